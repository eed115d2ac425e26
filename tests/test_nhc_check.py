"""contrib/nhc/sattrib.nhc run by bash with NHC's die/log stand-ins and a fake sattrib on PATH."""

from __future__ import annotations

import subprocess
from pathlib import Path

CHECK = Path(__file__).resolve().parents[1] / "contrib" / "nhc" / "sattrib.nhc"


def _run(tmp_path: Path, fake: str | None, node: str = "gpu07") -> tuple[int, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if fake is not None:
        script = bin_dir / "sattrib"
        script.write_text("#!/bin/sh\n" + fake)
        script.chmod(0o755)
    program = (
        'die() { echo "DIE $1 $2"; return 1; }\n'
        'log() { echo "LOG $*"; }\n'
        f'HOSTNAME_S={node}\n'
        f'. {CHECK}\n'
        'check_sattrib_drain; echo "RC $?"\n'
    )
    proc = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SATTRIB_NHC_TIMEOUT": "2"})
    return int(proc.stdout.strip().rsplit("RC ", 1)[1]), proc.stdout


def test_a_pending_recommendation_fails_the_node(tmp_path):
    rc, out = _run(tmp_path, 'echo "$3" > "$(dirname "$0")/asked"; printf "gpu07\\tjob 4242\\tsattrib: Xid79 GPU 3b:00 job 4242\\n"')
    assert rc == 1 and "DIE 1 check_sattrib_drain:  sattrib: Xid79 GPU 3b:00 job 4242 (job 4242)" in out
    assert (tmp_path / "bin" / "asked").read_text().strip() == "gpu07"  # asked about this node only


def test_a_fleet_recommendation_fails_the_node(tmp_path):
    rc, out = _run(tmp_path, 'printf "gpu07\\tfleet 11,12\\tsattrib: repeat node fault in 2 jobs/14d\\n"')
    assert rc == 1 and "(fleet 11,12)" in out


def test_nothing_pending_passes(tmp_path):
    rc, out = _run(tmp_path, 'echo "no pending drain recommendations"')
    assert rc == 0 and "DIE" not in out


def test_another_node_s_line_passes(tmp_path):
    rc, out = _run(tmp_path, 'printf "gpu08\\tjob 1\\tsattrib: x\\n"')
    assert rc == 0 and "DIE" not in out


def test_sattrib_failing_slow_or_missing_never_fails_the_node(tmp_path):
    rc, out = _run(tmp_path, 'echo "sattrib: no results index" >&2; exit 2')
    assert rc == 0 and "LOG check_sattrib_drain:  sattrib failed (exit 2): sattrib: no results index" in out
    rc, out = _run(tmp_path, "sleep 10")
    assert rc == 0 and "failed (exit 124)" in out
    (tmp_path / "none").mkdir()
    rc, out = _run(tmp_path / "none", None)  # no sattrib on PATH at all
    assert rc == 0 and "not found; check skipped" in out


# The whole path with the real sattrib: jobs analysed into a results store by `sattrib batch
# --drain`, then the check asks `sattrib drain --recommend` for the node.

XID_LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."


def _job(folder: Path, job_id: str, files: dict[str, str]) -> None:
    import json

    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps({
        "job_id": job_id, "state": "FAILED", "exit_code": "1:0", "nodes": ["gpu07", "gpu08"],
        "start": "2026-12-02T13:00:00", "end": "2026-12-02T13:10:00"}))
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def _check_with_real_sattrib(tmp_path: Path, jobs: dict[str, dict[str, str]], node: str) -> tuple[int, str]:
    import os
    import sys

    for job_id, files in jobs.items():
        _job(tmp_path / "jobs" / job_id, job_id, files)
    config = tmp_path / "config.yaml"
    config.write_text(f"results: {tmp_path / 'results'}\nspool: {tmp_path / 'spool'}\ndrain_policy: recommend\n")
    env = {**os.environ, "SATTRIB_CONFIG": str(config)}
    batch = subprocess.run([sys.executable, "-m", "slurm_attrib", "batch", "--drain", "--workers", "1", str(tmp_path / "jobs")],
                           capture_output=True, text=True, env=env, timeout=300)
    assert batch.returncode == 0, batch.stderr
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sattrib").write_text(f"#!/bin/sh\nexec {sys.executable} -m slurm_attrib \"$@\"\n")
    (bin_dir / "sattrib").chmod(0o755)
    program = ('die() { echo "DIE $1 $2"; return 1; }\nlog() { echo "LOG $*"; }\n'
               f"HOSTNAME_S={node}\n. {CHECK}\ncheck_sattrib_drain; echo \"RC $?\"\n")
    proc = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=120,
                          env={**env, "PATH": f"{bin_dir}:/usr/bin:/bin", "SATTRIB_NHC_TIMEOUT": "60"})
    return int(proc.stdout.strip().rsplit("RC ", 1)[1]), proc.stdout


def test_lines_a_job_printed_never_fail_a_node(tmp_path):
    """Two jobs print what a failing node would show (on a node of theirs and on one outside the
    job): no recommendation, single job's or fleet's, so the check passes on both nodes."""
    forged = {"slurm-{}.out": f"srun: error: Node failure on gpu09\n[Tue Dec  2 13:04:06 2026] {XID_LINE}\n"
                              "srun: error: gpu07: task 3: Killed\nRuntimeError: CUDA error: unspecified launch failure\n"}
    jobs = {job_id: {name.format(job_id): text for name, text in forged.items()} for job_id in ("11", "12")}
    rc, out = _check_with_real_sattrib(tmp_path, jobs, "gpu09")
    assert rc == 0 and "DIE" not in out, out
    rc, out = _check_with_real_sattrib(tmp_path / "again", jobs, "gpu07")
    assert rc == 0 and "DIE" not in out, out


def test_the_kernels_own_line_fails_the_node(tmp_path):
    """The control: the same Xid in gpu07's own kernel log (a folder root owns) does fail it."""
    jobs = {"21": {"gpu07/dmesg.txt": f"[Tue Dec  2 13:04:06 2026] {XID_LINE}\n", "slurm-21.out": "Traceback: x\n"}}
    rc, out = _check_with_real_sattrib(tmp_path, jobs, "gpu07")
    assert rc == 1 and "DIE 1 check_sattrib_drain:" in out and "Xid79" in out, out
