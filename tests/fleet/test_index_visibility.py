"""The SQLite index is world-readable only where Slurm shows everyone's jobs anyway (PrivateData
without `jobs`); otherwise users find their own diagnoses through their per-user files.

Reading as another user runs commands as `nobody` (setpriv), so those tests need root."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from slurm_attrib.engine.pipeline import analyze_path
from slurm_attrib.slurm.cli import jobs_visible_to_all, private_data_of
from slurm_attrib.store import INDEX, Store
from slurm_attrib.store.index import readable_by_all
from support import sattrib_argv

DEMO = Path(__file__).resolve().parents[2] / "slurm_attrib" / "samples" / "demo"
as_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")

# lines of `scontrol show config` (Slurm 22.05) around the setting
SHOW_CONFIG = """PreemptExemptTime       = 00:00:00
PrEpParameters          = (null)
PrivateData             = {}
ProctrackType           = proctrack/linuxproc
"""


@pytest.mark.parametrize("value, visible", [("none", True), ("usage,users", True), ("jobs", False),
                                            ("accounts,jobs,usage", False), ("all", False)])
def test_private_data_decides(value, visible):
    assert jobs_visible_to_all(private_data_of(SHOW_CONFIG.format(value))) is visible


def test_auto_without_an_answer_from_slurm_is_private(monkeypatch):
    monkeypatch.setenv("SLURM_CONF", "/nonexistent/slurm.conf")  # scontrol itself fails
    readable_by_all.cache_clear()
    try:
        assert readable_by_all("auto") is False
    finally:
        readable_by_all.cache_clear()
    assert readable_by_all("everyone") and not readable_by_all("own")


@pytest.fixture
def results():
    place = Path(tempfile.mkdtemp(prefix="sattrib-visibility-", dir="/tmp"))
    place.chmod(0o755)
    yield place
    shutil.rmtree(place, ignore_errors=True)


def _save(store: Store, job_id: str, uid: int | None, user: str) -> None:
    store.save(job_id, analyze_path(DEMO), "diagnosis text\n", uid=uid, user=user, state="FAILED", drains=[])


@pytest.mark.parametrize("visibility, mode", [("everyone", 0o644), ("own", 0o640)])
def test_index_mode_follows_the_setting(results, visibility, mode):
    store = Store(results / "results", index_visibility=visibility)
    _save(store, "11", None, "alice")
    for suffix in ("", "-wal", "-shm"):
        path = results / "results" / f"{INDEX}{suffix}"
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == mode, path


def _show_as_nobody(config: Path, job_id: str) -> subprocess.CompletedProcess:
    user = pwd.getpwnam("nobody")
    env = {"PATH": "/usr/bin:/bin", "SATTRIB_CONFIG": str(config), "HOME": "/tmp"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
                           *sattrib_argv(), "show", job_id], env=env, capture_output=True, text=True, timeout=60, cwd="/tmp")


@as_root
def test_users_see_their_own_jobs_without_the_private_index(results):
    nobody = pwd.getpwnam("nobody")
    config = results / "config.yaml"
    config.write_text(yaml.safe_dump({"results": str(results / "results"), "index_visibility": "own"}))
    store = Store(results / "results", index_visibility="own")
    _save(store, "21", nobody.pw_uid, "nobody")
    _save(store, "22", 0, "root")
    index = results / "results" / INDEX
    assert subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--init-groups",
                           "cat", str(index)], capture_output=True).returncode != 0
    mine = _show_as_nobody(config, "21")
    assert mine.returncode == 0 and mine.stdout == "diagnosis text\n", mine.stderr
    theirs = _show_as_nobody(config, "22")
    assert theirs.returncode == 3 and "not readable by you" in theirs.stderr
