"""Admin gates (report, metrics, webhooks, drain --apply, show of others' jobs) read who is an
administrator from a config only root can write, never from the caller's own $SATTRIB_CONFIG.

The commands run as the unprivileged user `nobody` (setpriv), so these tests need root."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from support import sattrib_argv

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="running commands as another user needs root and setpriv")


@pytest.fixture
def place():
    """A folder `nobody` can read, with an empty results folder."""
    path = Path(tempfile.mkdtemp(prefix="sattrib-gates-", dir="/tmp"))
    path.chmod(0o755)
    (path / "results").mkdir(mode=0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _nobody() -> tuple[pwd.struct_passwd, str]:
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    return user, grp.getgrgid(user.pw_gid).gr_name


def _config(place: Path, name: str, admin_group: str, owner: int, mode: int) -> Path:
    path = place / name
    path.write_text(yaml.safe_dump({"results": str(place / "results"), "admin_group": admin_group}))
    os.chown(path, owner, owner)
    path.chmod(mode)
    return path


def _as_nobody(args: list[str], config: Path) -> subprocess.CompletedProcess:
    user, _ = _nobody()
    env = {"PATH": "/usr/bin:/bin", "SATTRIB_CONFIG": str(config), "HOME": "/tmp"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
                           *sattrib_argv(), *args], env=env, capture_output=True, text=True, timeout=60, cwd="/tmp")


@pytest.mark.parametrize("command", [["report"], ["metrics"], ["webhooks", "--retry"], ["drain", "--apply"]])
def test_own_config_cannot_make_the_caller_an_admin(place, command):
    user, group = _nobody()
    mine = _config(place, "mine.yaml", group, user.pw_uid, 0o644)
    done = _as_nobody(command, mine)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is for administrators" in lines[0], done.stderr


def test_root_owned_config_makes_its_admin_group_admins(place):
    _, group = _nobody()
    trusted = _config(place, "site.yaml", group, 0, 0o644)
    done = _as_nobody(["report", "--format", "json"], trusted)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("mode", [0o664, 0o646])
def test_root_owned_config_others_can_write_does_not_count(place, mode):
    _, group = _nobody()
    loose = _config(place, "loose.yaml", group, 0, mode)
    done = _as_nobody(["report"], loose)
    assert done.returncode == 2 and "is for administrators" in done.stderr


def test_root_owned_config_check_names_the_problem(place):
    from slurm_attrib.config import ConfigError, _root_owned_config

    user, group = _nobody()
    theirs = _config(place, "theirs.yaml", group, user.pw_uid, 0o644)
    with pytest.raises(ConfigError, match="not owned by root"):
        _root_owned_config(theirs)
    assert _root_owned_config(_config(place, "site.yaml", group, 0, 0o640)).admin_group == group
