"""Every hook finds the config the same documented way ($SATTRIB_CONFIG, else the first line of
`sattrib-config` next to it, else /etc/sattrib/config.yaml), runs `--check` as `sattrib doctor`
does, and records its failures where an admin looks even when Python cannot start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO

HOOKS = ("sattrib-prolog", "sattrib-epilog", "sattrib-epilog-ctld")


@pytest.fixture
def hooks(tmp_path, node):
    """The hooks as `sattrib install-hooks` writes them, with `sattrib-config` (no trailing
    newline) naming the node's config."""
    folder = tmp_path / "hooks"
    subprocess.run([sys.executable, "-m", "slurm_attrib", "install-hooks", str(folder)], check=True,
                   capture_output=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    node.config["results"] = str(tmp_path / "results")
    (tmp_path / "results").mkdir(mode=0o755)
    (folder / "sattrib-config").write_text(str(node.write_config()))
    return folder


def _run(hook: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(hook), *args], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=60)


def _slurm_env(node) -> dict:
    return {k: v for k, v in node.env.items() if k != "SATTRIB_PYTHON"}


def test_node_hooks_read_the_sattrib_config_file_next_to_them(node, hooks):
    node.env["SLURM_JOB_ID"] = "4243"
    assert _run(hooks / "sattrib-prolog", _slurm_env(node)).returncode == 0
    assert (node.local / "prolog" / "4243.json").is_file()  # the configured local spool, not /var/tmp/sattrib
    assert _run(hooks / "sattrib-epilog", _slurm_env(node)).returncode == 0
    assert node.bundle()["job"]["job_id"] == "4243"


def test_the_ctld_hook_reads_it_too(node, hooks, tmp_path):
    env = {**_slurm_env(node), "SLURM_JOB_ID": "4244", "SLURM_JOB_NODELIST": ""}
    assert _run(hooks / "sattrib-epilog-ctld", env).returncode == 0
    log = tmp_path / "results" / "worker.log"  # the detached worker's, in the configured results
    end = time.monotonic() + 30
    while not log.is_file() and time.monotonic() < end:
        time.sleep(0.1)
    assert log.is_file()


@pytest.mark.parametrize("hook", HOOKS)
def test_check_names_the_interpreter_and_config_each_hook_uses(hook, hooks, node):
    done = _run(hooks / hook, {}, "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"interpreter {sys.executable}" or os.path.samefile(lines[0].split(" ", 1)[1], sys.executable)
    assert lines[1] == f"config {node.tmp / 'config.yaml'}"
    assert f"local_spool {node.local}" in lines
    env_config = node.tmp / "other.yaml"
    env_config.write_text(f"local_spool: {node.tmp / 'elsewhere'}\n")
    done = _run(hooks / hook, {"SATTRIB_CONFIG": str(env_config)}, "--check")  # $SATTRIB_CONFIG first
    assert f"local_spool {node.tmp / 'elsewhere'}" in done.stdout.splitlines()


@pytest.mark.parametrize("hook", HOOKS)
def test_a_missing_sattrib_config_is_an_error_not_the_defaults(hook, hooks, node):
    done = _run(hooks / hook, {"SATTRIB_CONFIG": str(node.tmp / "typo.yaml")}, "--check")
    assert done.returncode == 2 and done.stdout.splitlines()[-1] == f"config: {node.tmp / 'typo.yaml'}: no such config file"


def test_sattrib_commands_refuse_a_missing_sattrib_config(tmp_path):
    done = subprocess.run([sys.executable, "-m", "slurm_attrib", "show", "1"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SATTRIB_CONFIG": str(tmp_path / "typo.yaml"), "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and done.stderr == f"sattrib: {tmp_path / 'typo.yaml'}: no such config file\n"


@pytest.mark.parametrize("hook", ("sattrib-prolog", "sattrib-epilog"))
def test_node_hooks_record_a_python_that_cannot_start(hook, hooks, node):
    node.local.mkdir(mode=0o750)
    done = _run(hooks / hook, {**_slurm_env(node), "SATTRIB_PYTHON": "/nonexistent/python3"})
    assert done.returncode == 0
    [line] = (node.local / "hook-failures.log").read_text().splitlines()
    assert f"{hook} job 4242 node gpu01: interpreter /nonexistent/python3 exit 127" in line


def test_node_hooks_record_nothing_into_a_folder_someone_else_could_write(hooks, node):
    node.local.mkdir(mode=0o777)
    node.local.chmod(0o777)
    _run(hooks / "sattrib-epilog", {**_slurm_env(node), "SATTRIB_PYTHON": "/nonexistent/python3"})
    assert not (node.local / "hook-failures.log").exists()


def test_the_ctld_hook_records_a_python_that_cannot_start_for_the_job_and_doctor(hooks, node, tmp_path):
    env = {**_slurm_env(node), "SLURM_JOB_ID": "4245", "SATTRIB_PYTHON": "/nonexistent/python3"}
    assert _run(hooks / "sattrib-epilog-ctld", env).returncode == 0
    status = json.loads((tmp_path / "results" / "4245" / "status.json").read_text())
    assert (status["job_id"], status["status"], status["hook"]) == ("4245", "failed", "sattrib-epilog-ctld")
    assert "interpreter /nonexistent/python3 exit 127" in status["reason"]
    assert "job 4245" in (tmp_path / "results" / "hook-failures.log").read_text()
    mode = (tmp_path / "results" / "4245" / "status.json").stat().st_mode & 0o777
    assert mode == 0o640


# /etc/sattrib/config.yaml, the third place, read in a private mount namespace whose /etc is an
# overlay of the machine's: the test never writes the machine's own /etc.
PRIVATE_ETC = ('mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc'
               ' && mkdir -p /etc/sattrib && cp "$2" /etc/sattrib/config.yaml && shift 2 && exec "$@"')


@pytest.fixture
def bare_hooks(tmp_path):
    """The hooks as `sattrib install-hooks` writes them, with no `sattrib-config` beside them."""
    folder = tmp_path / "bare-hooks"
    subprocess.run([sys.executable, "-m", "slurm_attrib", "install-hooks", str(folder)], check=True,
                   capture_output=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert not (folder / "sattrib-config").exists()
    return folder


def _with_etc_config(config: Path, hook: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    overlay = config.parent / "etc-overlay"
    (overlay / "upper").mkdir(parents=True, exist_ok=True)
    (overlay / "work").mkdir(exist_ok=True)
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", PRIVATE_ETC, "sh",
               str(overlay), str(config), str(hook), *args]
    done = subprocess.run(command, env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", **env}, capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0 and ("unshare" in done.stderr or "mount" in done.stderr):
        pytest.skip(f"no private mount namespace with an overlay here: {done.stderr.strip()}")
    return done


def test_every_hook_reads_etc_sattrib_config_yaml_when_nothing_else_names_a_config(node, bare_hooks, tmp_path):
    node.config["results"] = str(tmp_path / "results")
    (tmp_path / "results").mkdir(mode=0o755)
    config = node.write_config()
    for hook in HOOKS:
        done = _with_etc_config(config, bare_hooks / hook, {}, "--check")
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[1] == "config /etc/sattrib/config.yaml"
        assert f"local_spool {node.local}" in done.stdout.splitlines()
    env = {**_slurm_env(node), "SLURM_JOB_ID": "4246"}
    assert _with_etc_config(config, bare_hooks / "sattrib-prolog", env).returncode == 0
    assert (node.local / "prolog" / "4246.json").is_file()  # the configured local spool
    assert _with_etc_config(config, bare_hooks / "sattrib-epilog", env).returncode == 0
    node.env["SLURM_JOB_ID"] = "4246"
    assert node.bundle()["job"]["job_id"] == "4246"  # in the configured spool
    assert _with_etc_config(config, bare_hooks / "sattrib-epilog-ctld", {**env, "SLURM_JOB_NODELIST": ""}).returncode == 0
    log = tmp_path / "results" / "worker.log"  # the detached worker's, in the configured results
    end = time.monotonic() + 30
    while not log.is_file() and time.monotonic() < end:
        time.sleep(0.1)
    assert log.is_file()
    assert not Path("/etc/sattrib/config.yaml").exists() or Path("/etc/sattrib/config.yaml").read_bytes() != config.read_bytes()
