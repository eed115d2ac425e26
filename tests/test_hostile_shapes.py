"""No input stops or hides the analysis (issue 18): each hostile shape of the issue, given to
`sattrib analyze` under a 1 GiB address-space limit and a 20 s bound, gives a diagnosis (exit 0)
without a traceback."""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import zlib
from pathlib import Path

import pytest
from hostile_support import JOB_ID, NODES, PLACES, window

from support import sattrib_argv

LIMIT = 1 << 30
BOUND = 20.0
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def analyze(path: Path, refusal: str = "") -> dict:
    """The diagnosis of `sattrib analyze PATH --format json`; fails on a traceback, exit != 0, or
    more than BOUND seconds.  With `refusal`, exit 2 with one line naming it is also accepted
    (the contract's answer to a job.json that is not valid JSON): {} then."""
    try:
        result = subprocess.run([*sattrib_argv(), "analyze", str(path), "--format", "json"], capture_output=True,
                                timeout=BOUND, preexec_fn=_limited)
    except subprocess.TimeoutExpired:
        pytest.fail(f"analyze ran past {BOUND:g} s")
    assert b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")[-1500:]
    stderr = result.stderr.decode(errors="replace")
    if refusal and result.returncode == 2 and stderr.count("\n") == 1 and refusal in stderr:
        return {}
    assert result.returncode == 0, stderr[-500:]
    return json.loads(result.stdout)


def job_with_stdout(root: Path, lines: list[str]) -> Path:
    PLACES["job-stdout"](root, lines, window())
    return root


def rewrite_job(root: Path, **changes) -> None:
    job = json.loads((root / "job.json").read_text())
    job.update(changes)
    (root / "job.json").write_text(json.dumps(job))


@pytest.mark.parametrize("blanks", [24, 40])
def test_the_backtracking_line_is_read_in_linear_time(tmp_path, blanks):
    analyze(job_with_stdout(tmp_path, [" " * blanks + "ValueError:x"]))


@pytest.mark.parametrize("stamp", ["9999-12-31T23:59:59-12:00", "0000-01-01T00:00:00", "0001-01-01T00:00:00+14:00"])
def test_a_line_stamped_far_away_hides_nothing(tmp_path, stamp):
    """A far stamp on a job-output line is ignored: the node's real Xid still names it."""
    root = job_with_stdout(tmp_path, [f"{stamp} {XID}"])
    win = window()
    (root / NODES[1] / "dmesg.txt").write_text(f"{win.when:%Y-%m-%dT%H:%M:%S},123456+00:00 {XID}\n")
    assert analyze(root)["culprit_nodes"] == [NODES[1]]


@pytest.mark.parametrize("value", [float("nan"), 1e20, -1e20, "0000-01-01T00:00:00", "9999-12-31T23:59:59-12:00"])
def test_a_job_time_far_away_or_not_a_number_gives_a_diagnosis_or_a_one_line_refusal(tmp_path, value):
    root = job_with_stdout(tmp_path, [])
    rewrite_job(root, start=value)
    analyze(root, refusal="job.json")


def test_a_hostlist_bomb_in_job_json(tmp_path):
    root = job_with_stdout(tmp_path, [])
    rewrite_job(root, nodes="a[0-999]b[0-999]c[0-99]")
    analyze(root)


def test_a_gzip_bomb_becomes_a_coverage_entry(tmp_path):
    root = job_with_stdout(tmp_path, [])
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * (1 << 20)
    (root / NODES[0] / "dmesg.gz").write_bytes(b"".join(z.compress(block) for _ in range(2048)) + z.flush())
    diagnosis = analyze(root)
    assert any(c["source"] == f"{NODES[0]}/dmesg.gz" for c in diagnosis.get("coverage", []))


def test_a_folder_three_thousand_deep(tmp_path):
    root = job_with_stdout(tmp_path, [])
    fd = os.open(root / NODES[0], os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    try:
        analyze(root)
    finally:  # pytest's own clean-up of old temporary folders recurses once per level
        subprocess.run(["rm", "-rf", "--", str(root / NODES[0] / "d")], check=True)


def test_a_malformed_bundle_leaves_the_others_read(tmp_path):
    """One node's bundle is corrupt, another's job record says NaN: the third node's kernel Xid is
    still the cause."""
    win = window()
    PLACES["spool-job-stdout"](tmp_path, ["hello"], win)
    nodes = tmp_path / "nodes"
    (nodes / f"{NODES[1]}.json.gz").write_bytes(gzip.compress(b'{"format": "sattrib-node-bundle", "version": 1, "sources": 7'))
    bundle = json.loads(gzip.decompress((nodes / f"{NODES[2]}.json.gz").read_bytes()))
    bundle["job"]["start"] = "NaN"
    bundle["sources"].append({"name": "extra", "kind": "kernel", "status": "ok", "lines": [[1, None], ["x", "y"]]})
    (nodes / f"{NODES[2]}.json.gz").write_bytes(gzip.compress(json.dumps(bundle).encode()))
    bundle = json.loads(gzip.decompress((nodes / f"{NODES[3]}.json.gz").read_bytes()))
    stamp = win.when.strftime("%Y-%m-%dT%H:%M:%S.%f+0000")
    bundle["sources"].append({"name": "kernel", "kind": "kernel", "status": "ok", "lines": [[9, f"{stamp} {NODES[3]} kernel: {XID}"]]})
    (nodes / f"{NODES[3]}.json.gz").write_bytes(gzip.compress(json.dumps(bundle).encode()))
    diagnosis = analyze(tmp_path)
    assert diagnosis["culprit_nodes"] == [NODES[3]], (JOB_ID, diagnosis["summary"])
