"""The real epilog/sattrib-epilog script: normal capture and the epilog fault matrix."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import time
from pathlib import Path


from conftest import EPILOG, source_of

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
BOUND = 4  # epilog_timeout in the test config
SLACK = 1.5  # interpreter start-up and shell wrapper


def kernel_file(tmp: Path, xid_at: int = 400, total: int = 1000) -> Path:
    lines = [f"2024-04-09T01:{i // 60 % 60:02d}:{i % 60:02d},000000+00:00 gpu01 kernel: filler line {i}" for i in range(1, total + 1)]
    lines[xid_at - 1] = f"2024-04-09T01:21:38,000000+00:00 gpu01 kernel: {XID}"
    path = tmp / "kernel-gpu01.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_normal_capture_keeps_xid_with_original_line_number(node):
    kernel_file(node.tmp)
    out = node.tmp / "slurm-4242.out"
    out.write_text("step 1\n" * 300 + "Traceback (most recent call last):\n  File x\nRuntimeError: NCCL error\n" + "tail\n")
    node.env["SLURM_JOB_STDOUT"] = str(node.tmp / "slurm-%j.out")
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    node.source(name="job_stdout", kind="app")
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    bundle = node.bundle()
    assert bundle["format"] == "sattrib-node-bundle" and bundle["version"] == 1
    assert bundle["node"] == "gpu01"
    assert bundle["job"]["job_id"] == "4242" and bundle["job"]["nodes"] == ["gpu01", "gpu02"]
    assert bundle["job"]["exit_code"] == "1:0" and bundle["job"]["user"] == "alice"
    kernel = source_of(bundle, "kernel")
    assert kernel["status"] == "ok" and kernel["lines_total"] == 1000
    lines = dict(kernel["lines"])
    assert XID in lines[400]
    assert 1 in lines and 1000 in lines  # first and last line for time anchoring
    assert 398 in lines and 401 in lines  # context
    assert kernel["lines_kept"] < 60  # pre-filtered
    app = source_of(bundle, "job_stdout")
    assert app["status"] == "ok" and app["kind"] == "app"
    assert any("Traceback" in text and n == 301 for n, text in app["lines"])
    assert bundle["capture"]["duration"] < BOUND
    # no temp files left behind
    assert [p.name for p in node.bundle_path().parent.iterdir()] == ["gpu01.json.gz"]


def test_python_engine_matches_grep(node):
    kernel_file(node.tmp, xid_at=10, total=200)
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    node.run()
    grep_lines = source_of(node.bundle(), "kernel")["lines"]
    node.bundle_path().unlink()
    node.run(extra_env={"SATTRIB_FILTER_ENGINE": "python"})
    src = source_of(node.bundle(), "kernel")
    assert src["filter"] == "python"
    assert src["lines"] == grep_lines


def test_unwritable_spool_falls_back_to_local(node):
    kernel_file(node.tmp)
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    blocker = node.tmp / "not-a-dir"
    blocker.write_text("x")
    node.config["spool"] = str(blocker)
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    bundle = node.bundle(local=True)
    assert bundle["capture"]["spool"] == "local"
    assert any("shared spool" in e for e in bundle["capture"]["errors"])
    assert XID in dict(source_of(bundle, "kernel")["lines"])[400]


def test_symlinked_job_dir_is_not_followed(node):
    kernel_file(node.tmp)
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    elsewhere = node.tmp / "elsewhere"
    elsewhere.mkdir()
    (node.spool / "4242").symlink_to(elsewhere)
    rc, _ = node.run()
    assert rc == 0
    assert list(elsewhere.iterdir()) == []  # nothing written through the symlink
    assert node.bundle(local=True)["capture"]["spool"] == "local"


def test_missing_commands_and_paths(node):
    node.source(name="kernel", kind="kernel", command=["/nonexistent/dmesg"])
    node.source(name="syslog", kind="syslog", command=["no-such-tool-sattrib"])
    node.source(name="nvidia_smi", kind="nvidia_smi", path=str(node.tmp / "nope.txt"))
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    bundle = node.bundle()
    for name in ("kernel", "syslog", "nvidia_smi"):
        assert source_of(bundle, name)["status"] == "missing", name


def _leftover(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


def test_hanging_commands_are_bounded_and_killed(node):
    kernel_file(node.tmp)
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    node.source(name="syslog", kind="syslog", command=["sleep", "107.25"], timeout=30)
    node.source(name="nvidia_smi", kind="nvidia_smi", command=["sh", "-c", "trap '' TERM; echo started; sleep 108.25; echo never"], timeout=30)
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    bundle = node.bundle()
    assert source_of(bundle, "syslog")["status"] == "timeout"
    smi = source_of(bundle, "nvidia_smi")
    assert smi["status"] == "timeout" and smi["lines"] == [[1, "started"]]
    assert source_of(bundle, "kernel")["status"] == "ok"  # the others are unaffected
    time.sleep(0.2)
    assert _leftover("107.25") == [] and _leftover("108.25") == []


def test_per_source_timeout(node):
    node.source(name="syslog", kind="syslog", command=["sleep", "30"], timeout=0.5)
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < 2.5
    assert source_of(node.bundle(), "syslog")["status"] == "timeout"


def test_huge_sources_are_capped(node):
    node.config["bundle_max_bytes"] = 2 * 1024 * 1024
    # 1 GB without a newline, from a command: killed at the byte cap
    node.source(name="kernel", kind="kernel", command=["head", "-c", "1G", "/dev/zero"], max_bytes=4 * 1024 * 1024)
    # endless matching lines: killed at the cap, kept lines bounded by the bundle share
    node.source(name="syslog", kind="syslog", command=["yes", XID], max_bytes=8 * 1024 * 1024)
    # a 1 GB sparse file with lines at both ends: only the newest max_bytes are scanned
    big = node.tmp / "big.log"
    with open(big, "wb") as f:
        f.write(b"early line\n" * 1000)
        f.seek(1 << 30)
        f.write(b"\nafter the hole\n" + XID.encode() + b"\nlast\n")
    node.source(name="nvidia_smi", kind="nvidia_smi", path=str(big), max_bytes=1024 * 1024)
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    assert node.bundle_path().stat().st_size < 2 * 1024 * 1024
    bundle = node.bundle()
    kernel = source_of(bundle, "kernel")
    assert kernel["status"] == "truncated" and kernel["bytes_read"] == 4 * 1024 * 1024
    syslog = source_of(bundle, "syslog")
    assert syslog["status"] == "truncated"
    assert all(XID in text for _, text in syslog["lines"][1:-1])  # the last one is cut at the cap
    nums = [n for n, _ in syslog["lines"]]
    assert nums == sorted(nums) and nums[-1] == syslog["lines_total"] and nums[1] > 1000  # newest survive
    sparse = source_of(bundle, "nvidia_smi")
    assert sparse["status"] in ("truncated", "timeout")
    if sparse["line_base_known"]:
        lines = {text: n for n, text in sparse["lines"]}
        assert lines[XID] == 1003 and lines["last"] == 1004


def test_garbage_bytes(node):
    path = node.tmp / "garbage.log"
    junk = bytes(range(256)) * 40
    path.write_bytes(junk + b"\n\xff\xfe\x00 " + XID.encode() + b" \xc3\x28\n" + junk)
    node.source(name="kernel", kind="kernel", path=str(path))
    rc, _ = node.run()
    assert rc == 0
    kernel = source_of(node.bundle(), "kernel")
    assert kernel["status"] == "ok"
    hits = [n for n, text in kernel["lines"] if "NVRM: Xid" in text]
    assert hits == [kernel["lines"][[n for n, _ in kernel["lines"]].index(hits[0])][0]]
    assert json.dumps(node.bundle())  # valid JSON, text decoded


def test_sigkill_during_write_leaves_no_partial_bundle(node):
    kernel_file(node.tmp, total=20000)
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"), prefilter=False)
    env = {"SATTRIB_CONFIG": str(node.write_config()), **node.env}
    nodes_dir = node.bundle_path().parent
    for delay in (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.6):
        proc = subprocess.Popen([str(EPILOG)], env=env, start_new_session=True)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if nodes_dir.is_dir():
            for p in nodes_dir.iterdir():
                if p.name.endswith(".json.gz"):
                    with gzip.open(p) as f:
                        assert json.load(f)["format"] == "sattrib-node-bundle"
                else:
                    assert p.name.startswith(".")
    # and a complete run afterwards still produces the bundle
    rc, _ = node.run()
    assert rc == 0 and node.bundle()["node"] == "gpu01"


def test_invalid_job_id_writes_nothing(node):
    node.env["SLURM_JOB_ID"] = "../../etc"
    rc, _ = node.run()
    assert rc == 0
    assert list(node.spool.iterdir()) == []
    assert not node.local.exists()


def test_broken_config_still_exits_zero(node, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("spool: [unclosed\n")
    env = {**node.env, "SATTRIB_CONFIG": str(bad)}
    done = subprocess.run([str(EPILOG)], env=env, timeout=30, capture_output=True)
    assert done.returncode == 0


def test_broken_interpreter_still_exits_zero(node):
    rc, _ = node.run(extra_env={"SATTRIB_PYTHON": "/nonexistent/python3"})
    assert rc == 0


def test_job_output_only_on_batch_host_and_checked(node):
    out = node.tmp / "out.txt"
    out.write_text("Traceback (most recent call last):\n")
    node.env["SLURM_JOB_STDOUT"] = str(out)
    node.source(name="job_stdout", kind="app")
    node.env["SLURMD_NODENAME"] = "gpu02"
    node.run()
    assert source_of(node.bundle(node="gpu02"), "job_stdout")["status"] == "skipped"
    # on the batch host a symlink is refused
    node.env["SLURMD_NODENAME"] = "gpu01"
    link = node.tmp / "link.txt"
    link.symlink_to(out)
    node.env["SLURM_JOB_STDOUT"] = str(link)
    node.run()
    assert source_of(node.bundle(), "job_stdout")["status"] == "forbidden"
    # a file owned by someone else is refused
    node.env["SLURM_JOB_STDOUT"] = str(out)
    node.env["SLURM_JOB_UID"] = "12345"
    if os.getuid() == 0:
        os.chown(out, 54321, 54321)
        node.run()
        assert source_of(node.bundle(), "job_stdout")["status"] == "forbidden"


def test_builtin_default_sources_run_on_this_machine(node):
    """No source config at all: the built-in sources run (whatever this machine has) in the bound."""
    node.config.pop("sources")
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    names = {s["name"] for s in node.bundle()["sources"]}
    assert {"kernel", "syslog", "nvidia_smi", "ib_counters", "flight_recorder"} <= names
    for src in node.bundle()["sources"]:
        assert src["status"] in ("ok", "empty", "missing", "forbidden", "timeout", "truncated", "error", "skipped")
