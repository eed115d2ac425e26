"""`sattrib doctor` against the real test cluster, and a hook failure end to end.

SlurmUser is `slurm` (most sites).  The EpilogSlurmctld wrapper names an interpreter in a folder
only root may enter (as a venv under /root would be): SlurmUser cannot start it, so every job's
analysis fails.  doctor must say so (the hook run as slurm), the failure must be recorded by the
shell wrapper itself, and the job's owner must read "analysis failed", not "pending"."""

from __future__ import annotations

import json
import pwd
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from slurmuser_site import site_on, write_hook_wrapper, write_site_config

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
_STATE: dict = {}


def _workdir() -> Path:
    if "dir" in _STATE:
        return _STATE["dir"]
    d = Path(tempfile.mkdtemp(prefix="sattrib-doctor-", dir="/tmp"))
    d.chmod(0o755)
    write_site_config(d)
    (d / "private").mkdir(mode=0o700)  # like a venv under /root: SlurmUser cannot enter it
    (d / "private" / "python3").symlink_to(sys.executable)
    for name, python in (("sattrib-prolog", sys.executable), ("sattrib-epilog", sys.executable),
                         ("sattrib-epilog-ctld", d / "private" / "python3")):
        write_hook_wrapper(d, name, python)
    _STATE["dir"] = d
    return d


@pytest.fixture(scope="module")
def slurm_cluster_config():
    d = _workdir()
    return {"prolog": d / "bin" / "sattrib-prolog", "epilog": d / "bin" / "sattrib-epilog",
            "epilog_ctld": d / "bin" / "sattrib-epilog-ctld", "extra_env": {"SATTRIB_SLURM_USER": "slurm"}}


@pytest.fixture(scope="module")
def site(slurm_cluster):
    yield from site_on(slurm_cluster, _workdir())


def _sattrib(cluster, d: Path, *args: str, user: str | None = None, python: str = sys.executable):
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SATTRIB_CONFIG": str(d / "config.yaml"),
           "SLURM_CONF": cluster.conf, "PYTHONPATH": str(REPO), "HOME": "/tmp"}
    argv = [python, "-m", "slurm_attrib", *args]
    if user:
        argv = ["runuser", "-u", user, "--", "env", *(f"{k}={v}" for k, v in env.items()), *argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd="/tmp")


def _user_python(cluster) -> str:
    for py in (sys.executable, "/usr/bin/python3"):
        r = subprocess.run(["runuser", "-u", cluster.test_user, "--", py, "-c", "import click, yaml"], capture_output=True, timeout=30)
        if r.returncode == 0:
            return py
    pytest.skip("no Python with click and PyYAML executable by the test user (apt-get install python3-click)")


def test_1_doctor_checks_slurm_and_runs_each_hook_as_its_user(site):
    cluster, d = site
    started = time.monotonic()
    done = _sattrib(cluster, d, "doctor", "--json", "--srun")
    took = time.monotonic() - started
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert done.returncode == 1, done.stdout + done.stderr
    assert checks["scontrol"]["status"] == "ok" and checks["scontrol"]["detail"].endswith("SlurmUser slurm")
    for key, hook in (("Prolog", "sattrib-prolog"), ("Epilog", "sattrib-epilog"), ("EpilogSlurmctld", "sattrib-epilog-ctld")):
        assert checks[f"slurm {key}"] == {"name": f"slurm {key}", "status": "ok", "detail": str(d / "bin" / hook), "fix": ""}
    assert checks["slurm PrologFlags"]["status"] == "ok" and "Alloc" in checks["slurm PrologFlags"]["detail"]
    for hook in ("sattrib-prolog", "sattrib-epilog"):
        assert checks[f"{hook} as root"]["status"] == "ok"
        assert checks[f"{hook} as root"]["detail"] == f"interpreter {sys.executable}, config {d / 'config.yaml'}"
    ctld = checks["sattrib-epilog-ctld as slurm"]
    assert ctld["status"] == "FAIL" and "Permission denied" in ctld["detail"], ctld
    assert f"(interpreter {d / 'private' / 'python3'})" in ctld["detail"] and "readable by slurm" in ctld["fix"]
    assert checks["munge"]["status"] == "ok"
    assert checks["results"]["status"] == "ok" and checks["spool"]["status"] == "ok"
    skew = checks["clock skew"]
    assert skew["status"] in ("ok", "warn") and "over 4 node(s)" in skew["detail"], skew
    assert took < 90
    assert [c["name"] for c in json.loads(done.stdout) if c["status"] == "FAIL"] == ["sattrib-epilog-ctld as slurm"]

    text = _sattrib(cluster, d, "doctor", "--role", "node")
    assert text.returncode == 0, text.stdout  # the node's side is sound
    assert "sattrib-epilog-ctld" not in text.stdout and text.stdout.splitlines()[0].startswith("ok    config: ")


def test_2_a_worker_that_cannot_start_is_recorded_and_shown_to_the_owner(site):
    cluster, d = site
    py = _user_python(cluster)
    job = cluster.sbatch("echo hello\n", user=cluster.test_user, nodes=2)
    assert cluster.wait_job(job) == "COMPLETED"
    status = d / "results" / str(job) / "status.json"
    end = time.monotonic() + 60
    while not status.is_file() and time.monotonic() < end:
        time.sleep(0.3)
    record = json.loads(status.read_text())
    assert (record["status"], record["hook"]) == ("failed", "sattrib-epilog-ctld")
    assert f"interpreter {d / 'private' / 'python3'} exit 126" in record["reason"]

    shown = _sattrib(cluster, d, "show", str(job), user=cluster.test_user, python=py)
    assert shown.returncode == 7, shown.stderr
    assert shown.stderr.startswith(f"sattrib: job {job}: analysis failed (interpreter {d / 'private' / 'python3'} exit 126")
    assert "Permission denied" in shown.stderr and shown.stderr.rstrip().endswith("ask an administrator")

    checks = {c["name"]: c for c in json.loads(_sattrib(cluster, d, "doctor", "--json").stdout)}
    failures = checks["analysis failures"]
    jobs = failures["fix"].rsplit(" ", 1)[-1].split(",")  # doctor's own srun job of test 1 too
    assert failures["status"] == "warn" and str(job) in jobs, failures
    assert failures["fix"].startswith("fix what the line says, then: sattrib batch --force --jobs ")
    # the epilog gave the job's spool folder to SlurmUser, bundles 0640 root:slurm
    assert checks["spool bundles"]["status"] == "ok", checks["spool bundles"]
    assert pwd.getpwuid((d / "spool" / str(job)).stat().st_uid).pw_name == "slurm"
