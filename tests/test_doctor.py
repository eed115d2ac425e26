"""`sattrib doctor` on real folders (the Slurm checks run on the real test cluster:
tests/slurm/test_doctor_cluster.py), and the failure records it and `sattrib show` read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _sattrib(config: Path, *args: str, module: str = "slurm_attrib") -> subprocess.CompletedProcess:
    env = {**os.environ, "SATTRIB_CONFIG": str(config), "PYTHONPATH": str(REPO), "SLURM_CONF": "/nonexistent/slurm.conf"}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=120, env=env, cwd="/")


def _checks(done: subprocess.CompletedProcess) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(done.stdout)}


@pytest.fixture
def site(tmp_path):
    for name in ("spool", "local", "results"):
        (tmp_path / name).mkdir(mode=0o755)
        (tmp_path / name).chmod(0o755)
    config = tmp_path / "config.yaml"
    config.write_text(f"spool: {tmp_path / 'spool'}\nlocal_spool: {tmp_path / 'local'}\nresults: {tmp_path / 'results'}\n"
                      f"slurm_user: {'root' if os.geteuid() == 0 else os.environ.get('USER', '')}\nindex_visibility: own\n")
    return tmp_path, config


def test_a_sound_layout_passes_the_path_checks(site):
    root, config = site
    done = _sattrib(config, "doctor", "--role", "all", "--json")
    checks = _checks(done)
    assert checks["config"] == {"name": "config", "status": "ok", "detail": str(config), "fix": ""}
    for name in ("spool", "spool bundles", "local spool", "stranded bundles", "results", "index", "analysis failures",
                 "node hook failures"):
        assert checks[name]["status"] == "ok", checks[name]
    # $SLURM_CONF names no file here: said at once, not after Slurm's minute of retries
    assert checks["scontrol"]["status"] == "FAIL" and checks["scontrol"]["detail"].startswith("SLURM_CONF=/nonexistent/slurm.conf: no such file")
    assert "SLURM_CONF" in checks["scontrol"]["fix"]
    assert checks["clock skew"]["status"] == "skip"
    assert done.returncode == 1  # Slurm is not reachable here


def test_what_a_deployment_gets_wrong_is_one_line_each_with_what_to_do(site):
    root, config = site
    (root / "spool").chmod(0o777)
    (root / "results").rmdir()
    done = _sattrib(config, "doctor", "--role", "controller", "--since", "30d")
    lines = done.stdout.splitlines()
    assert done.returncode == 1
    spool = next(line for line in lines if line.startswith("FAIL  spool:"))
    assert "users could make job folders" in spool and f"-- chown root {root / 'spool'}; chmod 0755" in spool
    assert any(line.startswith(f"FAIL  results: {root / 'results'} does not exist -- install -d -o ") for line in lines)
    assert not any("local spool" in line for line in lines)  # a node's check


def test_bundles_stranded_in_the_local_spool_are_a_warning_with_what_to_do(site):
    root, config = site
    for job in ("4242", "4250"):
        (root / "local" / job / "nodes").mkdir(parents=True)
        (root / "local" / job / "nodes" / "gpu01.json.gz").write_bytes(b"")
    checks = _checks(_sattrib(config, "doctor", "--role", "node", "--json"))
    stranded = checks["stranded bundles"]
    assert stranded["status"] == "warn" and stranded["detail"].startswith(f"2 in {root / 'local'} (jobs 4242, 4250)")
    assert "next epilog forwards them" in stranded["fix"]


def test_a_world_writable_index_fails(site):
    root, config = site
    (root / "results" / "index.db").write_bytes(b"")
    (root / "results" / "index.db").chmod(0o666)
    checks = _checks(_sattrib(config, "doctor", "--role", "controller", "--json"))
    assert checks["index"]["status"] == "FAIL" and checks["index"]["fix"] == f"chmod 0640 {root / 'results' / 'index.db'}"


def test_the_worker_records_its_failure_for_doctor_and_show(site):
    """An analysis that fails (here: an admin_group that is no group on this host) leaves the job's
    status.json and a line in hook-failures.log: `show` says it failed instead of "pending",
    `doctor` lists the job; a later successful analysis removes the status."""
    root, config = site
    config.write_text(config.read_text() + "admin_group: no-such-group-sattrib\n")
    done = _sattrib(config, "99", "--deadline", "0", module="slurm_attrib.worker")
    assert done.returncode == 1
    shown = _sattrib(config, "show", "99")
    assert shown.returncode == 7
    assert shown.stderr.startswith("sattrib: job 99: analysis failed (analysis failed: StoreError: admin_group 'no-such-group-sattrib'")
    assert shown.stderr.rstrip().endswith("; ask an administrator")
    checks = _checks(_sattrib(config, "doctor", "--role", "controller", "--json"))
    assert checks["analysis failures"]["status"] == "warn" and "(jobs 99)" in checks["analysis failures"]["detail"]
    assert checks["analysis failures"]["fix"].endswith("sattrib batch --force --jobs 99")

    config.write_text(config.read_text().replace("admin_group: no-such-group-sattrib\n", ""))
    assert _sattrib(config, "99", "--deadline", "0", module="slurm_attrib.worker").returncode == 0
    assert not (root / "results" / "99" / "status.json").exists()
    assert _sattrib(config, "show", "99").returncode == 0


def test_recent_failures_reads_only_the_window(tmp_path):
    from slurm_attrib.store.status import recent_failures

    (tmp_path / "hook-failures.log").write_text(
        "2020-01-01T00:00:00Z sattrib-epilog-ctld job 1 node c: old\nnot a line\n"
        "2030-01-01T00:00:00Z sattrib-epilog-ctld job 2 node c: new\n")
    assert recent_failures(tmp_path, 1600000000) == ["2030-01-01T00:00:00Z sattrib-epilog-ctld job 2 node c: new"]
    assert recent_failures(tmp_path / "none", 0) == []
