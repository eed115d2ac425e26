"""What every rank prints in a watchdog cascade, counted in Arrow (engine/cascades.py), gives the
events of reading every line in Python, field for field (the ranks' order included): on the
realistic corpora's many-rank shapes, and on lines made to sit on every edge of what is counted,
in a job output read window by window."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from slurm_attrib.engine import cascades, events  # noqa: E402
from slurm_attrib.engine.events import scan_evidence  # noqa: E402
from slurm_attrib.engine.pipeline import _scanner, load_any  # noqa: E402
from slurm_attrib.ingest import readers  # noqa: E402
from slurm_attrib.ingest.origin import Origin, line_origin  # noqa: E402
from slurm_attrib.ingest.timestamps import parse_line_time  # noqa: E402
from slurm_attrib.ruleset.loader import load_rules  # noqa: E402

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from realistic_corpora import SPECS, scaling_spec, write_corpus  # noqa: E402
from tests.test_counting import event_rows  # noqa: E402


def _scan(folder: Path, monkeypatch, counted: bool, window: int | None = None):
    """The scan's events, and how many lines were counted in Arrow."""
    tally = {"lines": 0, "failed": 0}
    split, check = cascades.CascadeCounter.split, events._read_group

    def spy(self, *args):
        groups, rest = split(self, *args)
        tally["lines"] += sum(g.lines for g in groups)
        return groups, rest

    def spy_check(*args):
        sure = check(*args)
        tally["failed"] += not sure
        return sure

    with monkeypatch.context() as patch:
        patch.setattr(cascades, "MIN_LINES", 4 if counted else 10**12)
        patch.setattr(cascades, "READ_SHARE", 0.0)  # planned on, whatever share of its lines goes back
        patch.setattr(events, "CASCADE_FROM_BYTES", 0)  # small job outputs: counted all the same
        patch.setattr(cascades.CascadeCounter, "split", spy)
        patch.setattr(events, "_read_group", spy_check)
        if window:
            patch.setattr(readers, "WINDOW_BLOCK", window)
        result = scan_evidence(load_any(folder), _scanner(()))
    assert tally["failed"] == 0  # no checked group read apart: the safety net stayed idle
    return result, tally["lines"]


def _same(folder: Path, monkeypatch, window: int | None = None) -> int:
    counted, lines = _scan(folder, monkeypatch, counted=True, window=window)
    plain, none = _scan(folder, monkeypatch, counted=False, window=window)
    assert none == 0
    assert event_rows(counted) == event_rows(plain)
    assert counted.boot_times == plain.boot_times and counted.last_seen == plain.last_seen
    return lines


@pytest.mark.parametrize("spec", [SPECS["g_32768_rank_cascade"].scaled(0.004, nodes=8),
                                  SPECS["a_1024n_nccl_info"].scaled(0.004, nodes=4),
                                  scaling_spec(8).scaled(0.2)], ids=lambda spec: spec.name)
def test_realistic_cascades_read_alike(spec, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / spec.name
    write_corpus(spec, folder, tmp_path / "truth.json")
    assert _same(folder, monkeypatch) > 20  # the cascade was counted, not read line by line
    assert _same(folder, monkeypatch, window=16 * 1024) > 20  # and window by window


START, END = 1_764_691_230.0, 1_764_694_845.0  # 2025-12-02T16:00:30Z .. 17:00:45Z


def _glog(t: float, severity: str = "E", digits: int = 9) -> str:
    from datetime import datetime, timezone

    moment = datetime.fromtimestamp(t, timezone.utc)
    fraction = f"{t % 1:.{digits}f}"[2:] if digits else ""
    return f"{severity}{moment:%m%d %H:%M:%S}" + (f".{fraction}" if digits else "")


def _edge_job(folder: Path) -> None:
    """A job output whose cascade lines take every form around the edges of what is counted:
    labels (none, right-aligned, long), `[RANK`, too long ranks, MPI and torchrun prefixes,
    stamps without a fraction or with too long a one, impossible dates, lines on both sides of the
    job's start and end, the same rank's first line in a form read in Python, unstamped lines a
    cascade rule reads, lines a rule's `unless` or another rule reads, overlong lines."""
    rng = random.Random(5)
    lines = []
    for i in range(4000):
        rank = rng.randrange(64)
        task = rank // 8
        t = START - 300 + i * 1.0 if i < 2000 else END - 1000 + (i - 2000) * 0.6  # across both edges
        prefix = rng.choice([f"{task}: [rank{rank}]:", f"{task:>3}: [rank{rank}]:", f"[rank{rank}]:",
                             f"{task}: [RANK{rank}]:", f"{task}: [rank{rank + 10**7}]:", f"[1,{rank}]<stdout>:",
                             f"[default{rank % 8}]:[rank{rank}]:", f"{task}: [rank{rank}]:"])
        stamp = rng.choice([_glog(t), _glog(t), _glog(t, "W", 6), _glog(t, digits=0), _glog(t) + "1",
                            "E1340 25:61:61.000001"])
        seq = 73399 + rng.randrange(2)
        pg = rng.choice(["", "[PG ID 0 PG GUID 0(default_pg) Rank {r}] ", "[PG ID 1 PG GUID 1 Rank {r}] "]).format(r=rank)
        timeout = rng.choice(["600000", "600000", "100"])
        body = rng.choice([
            f"[{stamp} ProcessGroupNCCL.cpp:632] {pg}[Rank {rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)={timeout}) ran for 600020 "
            f"milliseconds before timing out.",
            f"[{stamp} ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank {rank}]  failure detected by "
            f"watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, last completed work: {seq - 1}",
            f"[{stamp} ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Timeout at NCCL work: "
            f"{seq}, last enqueued NCCL work: {rng.choice([seq, -1])}, last completed NCCL work: -1.",
            f"[{stamp} ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations have failed or timed out. Due "
            f"to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
            f"[{stamp} ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog "
            f"thread terminated with exception:" + rng.choice(["", f" [Rank {rank}] Watchdog caught collective "
                                                                   f"operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE)"]),
            f"  what():  [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread terminated with "
            f"exception: [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE)",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            "Exception raised from checkTimeout at /opt/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618",
            f"[{stamp} ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations have failed " + "x" * 9000,
            f"[{stamp} train.py:12] step {i} loss 1.25",
        ])
        lines.append(prefix + body)
    out = folder / "slurm-77.out"
    folder.mkdir(parents=True)
    out.write_text("\n".join(lines) + "\n")
    (folder / "job.json").write_text(json.dumps({
        "job_id": "77", "state": "FAILED", "exit_code": "1:0", "nodes": [f"gpu{n:02d}" for n in range(8)],
        "start": "2025-12-02T16:00:30Z", "end": "2025-12-02T17:00:45Z"}))


def test_lines_on_every_edge_read_alike(tmp_path: Path, monkeypatch) -> None:
    _edge_job(tmp_path / "job")
    assert (tmp_path / "job" / "slurm-77.out").stat().st_size > readers.SMALL_FILE  # streamed
    assert _same(tmp_path / "job", monkeypatch, window=64 * 1024) > 500
    assert _same(tmp_path / "job", monkeypatch) > 500


def test_a_window_that_is_not_plain_ascii_is_read_in_python(tmp_path: Path, monkeypatch) -> None:
    _edge_job(tmp_path / "job")
    out = tmp_path / "job" / "slurm-77.out"
    out.write_text(out.read_text().replace("loss 1.25", "loss 1.25 \u2713"))
    assert _same(tmp_path / "job", monkeypatch) == 0


def test_the_shape_reads_the_origin_and_time_the_python_way() -> None:
    """What a counted line's shape gives (cascades._PREFIXED, _STAMP and the stamp read alone) is
    what line_origin and parse_line_time give for the whole line."""
    import re2

    shape, stamp_shape = re2.compile(cascades._PREFIXED), re2.compile(cascades._STAMP)
    counter = cascades.CascadeCounter(_scanner(()), 2025, lambda stamp: stamp)
    rng = random.Random(11)
    seen = 0
    for _ in range(3000):
        label = rng.choice(["", "7: ", "  3: ", "123456: ", "1234567: ", " 12: ", "x: "])
        rank = rng.choice(["[rank5]:", "[RANK5]:", "[rank1234567]:", "[rank12345678]:", "[rank]:", ""])
        stamp = rng.choice(["[E1202 16:22:44.349232197 ", "[I1202 16:22:44 ", "[W0229 01:02:03.5 ",
                            "[E1340 25:61:61.1 ", "[E1202 16:22:44.3492321971 ", "[2025-12-02 16:22:44] ", ""])
        rest = rng.choice(["ProcessGroupNCCL.cpp:632] [Rank 9] Watchdog caught", "x] [PG 0 Rank 3] y", "]"])
        line = label + rank + stamp + rest
        found = shape.search(line)
        if found is None:
            continue
        origin = line_origin(line)
        task = found.group("task")
        assert origin == Origin(None, int(found.group("prefix_rank")), int(task) if task else None, None), line
        stamped = stamp_shape.search(found.group("program"))
        if stamped is None:
            continue
        seen += 1
        reading = counter._stamp(stamped.group("stamp").encode())
        whole = parse_line_time(line, 2025)
        assert reading == (whole if whole.wall is not None or whole.mono is not None else None), line
    assert seen > 300


def test_only_the_rules_it_can_read_alike_are_counted() -> None:
    counted = {rule.id for rule in load_rules() if cascades.countable(rule)}
    assert {"torch.watchdog_timeout", "torch.pg_status", "torch.pg_work_status", "torch.async_failure",
            "torch.watchdog_thread_terminated"} <= counted
    # a hook rewrites its fields; following lines are not on the line; no cascade: no key to count by
    assert not counted & {"marker.nccl_rank", "torch.cpp_terminate_dist", "py.exception"}


def test_a_small_job_output_does_not_load_arrow(tmp_path: Path) -> None:
    """Arrow's import holds some 40 MB: a job whose output is smaller than COUNT_FROM_BYTES reads
    its cascades in Python."""
    _edge_job(tmp_path / "job")
    evidence = load_any(tmp_path / "job")
    assert events._cascade_counter(evidence, _scanner(()), 2025) is None
    output = next(f for f in evidence.files if f.kind == "app")
    assert output.content_size() < cascades.COUNT_FROM_BYTES
