"""SlurmUser=slurm (most sites): the job's owner reads their diagnosis, nobody else does.

EpilogSlurmctld runs the analysis as `slurm`, which cannot chown the results to the job's owner:
the store gives them read access through a POSIX ACL entry instead (slurm_attrib/store/acl.py).
A job submitted by the unprivileged test user is analysed on the real test cluster; then that
user's `sattrib show JOBID` prints the diagnosis and another unprivileged user's does not.  A
failed analysis's status.json, written by the worker as slurm, is the owner's the same way.

Config lookup: the node Prolog/Epilog are written by `sattrib install-hooks` and find the config
in the `sattrib-config` file next to them; EpilogSlurmctld gets `$SATTRIB_CONFIG` from a wrapper.

The worker must run as slurm, which cannot enter the project venv's interpreter when it lives
under /root: the hook then runs the system's python3 with the venv's site-packages, when both are
the same Python version (the extension modules must load); otherwise the module is skipped."""

from __future__ import annotations

import json
import pwd
import subprocess
from pathlib import Path

import pytest
from slurmuser_site import readme_site_fixtures, runnable_python, wait_for_file

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
OTHER_USER = "nobody"
slurm_cluster_config, site = readme_site_fixtures("sattrib-slurmuser-")


def _as(user: str, cluster, d: Path, *argv: str) -> subprocess.CompletedProcess:
    python, path = runnable_python(user)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SATTRIB_CONFIG": str(d / "config.yaml"), "SLURM_CONF": cluster.conf,
           "PYTHONPATH": f"{REPO}:{path}" if path else str(REPO), "HOME": "/tmp"}
    command = ["runuser", "-u", user, "--", "env", *(f"{k}={v}" for k, v in env.items()), python, "-s", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/tmp")


def test_the_owner_reads_the_diagnosis_another_user_does_not(site):
    cluster, d = site
    script = ("echo 'Traceback (most recent call last):'\n"
              "echo '  File \"/home/user/train.py\", line 42, in <module>'\n"
              "echo 'ZeroDivisionError: division by zero'\n"
              "exit 1\n")
    job = cluster.sbatch(script, user=cluster.test_user, nodes=1)
    assert cluster.wait_job(job) == "FAILED"
    folder = d / "results" / str(job)
    wait_for_file(folder / "diagnosis.txt")
    assert list((d / "spool" / str(job)).iterdir()), "the node epilog did not find its sattrib-config"
    slurm = pwd.getpwnam("slurm").pw_uid
    for path, mode in ((folder, 0o750), (folder / "diagnosis.txt", 0o640), (folder / "diagnosis.json", 0o640)):
        info = path.stat()
        assert (info.st_uid, info.st_mode & 0o7777) == (slurm, mode), path  # slurm's, nobody else's by mode

    shown = _as(cluster.test_user, cluster, d, "-m", "slurm_attrib", "show", str(job))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == (folder / "diagnosis.txt").read_text()
    assert "ZeroDivisionError" in shown.stdout
    as_json = _as(cluster.test_user, cluster, d, "-m", "slurm_attrib", "show", str(job), "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == json.loads((folder / "diagnosis.json").read_text())

    other = _as(OTHER_USER, cluster, d, "-m", "slurm_attrib", "show", str(job))
    assert other.returncode == 3 and other.stdout == "", other.stderr  # NOT_YOURS
    for path in (folder / "diagnosis.txt", folder / "diagnosis.json"):
        read = _as(OTHER_USER, cluster, d, "-c", f"open({str(path)!r}).read()")
        assert read.returncode != 0 and "PermissionError" in read.stderr


def test_a_failed_analysis_is_told_to_its_owner_only(site):
    cluster, d = site
    job = "999123"
    owner = pwd.getpwnam(cluster.test_user).pw_uid
    record = ("from slurm_attrib.store.status import record_failure; "
              f"record_failure({str(d / 'results')!r}, {job!r}, 'MemoryError in the rule scan', uid={owner}, "
              "public_reason='MemoryError')")
    done = _as("slurm", cluster, d, "-c", record)
    assert done.returncode == 0, done.stderr
    status = d / "results" / job / "status.json"
    assert status.stat().st_mode & 0o7777 == 0o640 and (status.parent.stat().st_mode & 0o7777) == 0o750

    shown = _as(cluster.test_user, cluster, d, "-m", "slurm_attrib", "show", job)
    assert shown.returncode == 7, shown.stderr
    assert shown.stderr == f"sattrib: job {job}: analysis failed (MemoryError in the rule scan); ask an administrator\n"
    other = _as(OTHER_USER, cluster, d, "-m", "slurm_attrib", "show", job)
    assert other.returncode != 7 and "MemoryError" not in other.stderr, other.stderr


def test_a_hook_whose_python_cannot_start_tells_the_owner_the_analysis_failed(site):
    """EpilogSlurmctld as slurm with an interpreter that does not exist: the shell wrapper alone
    records the failure (hook-failures.log, and status.json, which slurm cannot give to the owner:
    readable by all, holding only why no analysis ran); the owner's `sattrib show` says so (exit 7)
    instead of "pending" forever."""
    cluster, d = site
    job = "999124"
    owner = pwd.getpwnam(cluster.test_user).pw_uid
    env = {"PATH": "/usr/bin:/bin", "SATTRIB_CONFIG": str(d / "config.yaml"), "SATTRIB_PYTHON": "/nonexistent/python3",
           "SLURM_JOB_ID": job, "SLURM_JOB_UID": str(owner), "SLURM_CONF": cluster.conf}
    hook = d / "etc" / "sattrib-epilog-ctld"
    ran = subprocess.run(["runuser", "-u", "slurm", "--", "env", *(f"{k}={v}" for k, v in env.items()), str(hook)],
                         capture_output=True, text=True, timeout=60, cwd="/tmp")
    assert ran.returncode == 0, ran.stderr  # a hook always exits 0

    status = d / "results" / job / "status.json"
    slurm = pwd.getpwnam("slurm").pw_uid
    assert (status.stat().st_uid, status.stat().st_mode & 0o7777) == (slurm, 0o644)
    assert status.parent.stat().st_mode & 0o7777 == 0o755
    recorded = json.loads(status.read_text())
    assert recorded["status"] == "failed" and recorded["hook"] == "sattrib-epilog-ctld"
    assert recorded["reason"].startswith("interpreter /nonexistent/python3 exit 127")
    assert f"job {job} " in (d / "results" / "hook-failures.log").read_text()

    shown = _as(cluster.test_user, cluster, d, "-m", "slurm_attrib", "show", job)
    assert shown.returncode == 7, shown.stderr
    assert shown.stderr.startswith(f"sattrib: job {job}: analysis failed (interpreter /nonexistent/python3 exit 127")
    assert shown.stderr.rstrip().endswith("ask an administrator")
