"""The real epilog summarises flight-recorder dumps into the bundle; hang_finding reads them back."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

from conftest import source_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_hangdumps import fr_dump  # noqa: E402

from slurm_attrib.ingest.bundle import load_spool_job  # noqa: E402
from slurm_attrib.ingest.hangdumps import hang_finding  # noqa: E402

BOUND = 4
SLACK = 1.5


class Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (subprocess.call, (["touch", str(self.marker)],))


def set_source(node, **src) -> None:
    """Replace every configured source of that name (Node.source keeps earlier enabled ones)."""
    node.config["sources"] = [s for s in node.config["sources"] if s["name"] != src["name"]] + [src]


def capture(node, name: str, dumps: dict[int, bytes], extra: dict[str, bytes] | None = None) -> dict:
    folder = node.tmp / f"fr-{name}"
    folder.mkdir()
    for rank, data in dumps.items():
        (folder / f"nccl_trace_rank_{rank}").write_bytes(data)
    for file_name, data in (extra or {}).items():
        (folder / file_name).write_bytes(data)
    node.env["SLURMD_NODENAME"] = name
    node.env["SLURM_JOB_START_TIME"] = str(int(time.time()) - 3600)
    set_source(node, name="flight_recorder", kind="app", path=str(folder / "nccl_trace_rank_*"), max_files=8)
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    return node.bundle(node=name)


def test_epilog_summarises_dumps_and_the_bundle_names_the_rank(node):
    marker = node.tmp / "pwned"
    old = pickle.dumps(fr_dump(3))
    b1 = capture(node, "gpu01", {0: pickle.dumps(fr_dump(12)), 1: pickle.dumps(fr_dump(12))},
                 {"nccl_trace_rank_9": pickle.dumps({"entries": [Exploit(marker)]})})
    b2 = capture(node, "gpu02", {2: pickle.dumps(fr_dump(11, "completed")), 3: pickle.dumps(fr_dump(12)), 7: old})
    assert not marker.exists()
    src = source_of(b1, "flight_recorder")
    assert src["status"] == "ok" and src["kind"] == "app"
    texts = [t for _, t in src["lines"]]
    assert any(t.startswith("sattrib-fr rank=0 pg=0 name=default_pg last_enqueued=12") for t in texts)
    assert any(t.startswith("sattrib-fr rank=1 ") for t in texts)
    assert not any("rank=9" in t for t in texts)
    status = {os.path.basename(f["path"]): f["status"] for f in src["files"]}
    assert status["nccl_trace_rank_9"].startswith("unreadable")
    assert status["nccl_trace_rank_0"].startswith("ok")

    # a dump older than the job window is listed, not read
    folder = node.tmp / "fr-gpu02"
    past = time.time() - 3 * 86400
    os.utime(folder / "nccl_trace_rank_7", (past, past))
    node.bundle_path(node="gpu02").unlink()
    b2 = capture_again(node, "gpu02", folder)
    src2 = source_of(b2, "flight_recorder")
    status2 = {os.path.basename(f["path"]): f["status"] for f in src2["files"]}
    assert "outside the job window" in status2["nccl_trace_rank_7"]
    assert not any("rank=7" in t for _, t in src2["lines"])

    evidence = load_spool_job(node.spool / "4242")
    found = hang_finding(evidence)
    assert found is not None and found.ranks == [2] and found.nodes == ["gpu02"]
    assert found.evidence[0][0] == "nodes/gpu02.json.gz/flight_recorder"
    assert "sattrib-fr rank=2" in found.evidence[0][2]


def capture_again(node, name: str, folder: Path) -> dict:
    node.env["SLURMD_NODENAME"] = name
    set_source(node, name="flight_recorder", kind="app", path=str(folder / "nccl_trace_rank_*"), max_files=8)
    rc, _ = node.run()
    assert rc == 0
    return node.bundle(node=name)


def test_byte_and_file_limits(node):
    dumps = {r: pickle.dumps(fr_dump(40)) for r in range(6)}
    folder = node.tmp / "fr-lim"
    folder.mkdir()
    for rank, data in dumps.items():
        (folder / f"nccl_trace_rank_{rank}").write_bytes(data)
    set_source(node, name="flight_recorder", kind="app", path=str(folder / "nccl_trace_rank_*"), max_files=2,
                max_bytes=10 * 1024 * 1024)
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    src = source_of(node.bundle(), "flight_recorder")
    statuses = [f["status"] for f in src["files"]]
    assert sum(s.startswith("ok") for s in statuses) == 2
    assert sum("more than 2 files" in s for s in statuses) == 4
    node.bundle_path().unlink()
    set_source(node, name="flight_recorder", kind="app", path=str(folder / "nccl_trace_rank_*"), max_files=8,
                max_bytes=len(dumps[0]) + 10)
    rc, _ = node.run()
    assert rc == 0
    statuses = [f["status"] for f in source_of(node.bundle(), "flight_recorder")["files"]]
    assert sum(s.startswith("ok") for s in statuses) == 1
    assert sum("byte budget" in s for s in statuses) == 5


def test_no_dumps_is_missing(node):
    set_source(node, name="flight_recorder", kind="app", path=str(node.tmp / "none" / "nccl_trace_rank_*"))
    rc, _ = node.run()
    assert rc == 0
    assert source_of(node.bundle(), "flight_recorder")["status"] == "missing"
