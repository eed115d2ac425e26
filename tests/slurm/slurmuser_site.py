"""A site folder for test modules whose cluster runs with SlurmUser=slurm: its config (spool,
results owned by slurm, node sources off) and hook wrappers that set the config and interpreter."""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES_OFF = [{"name": n, "kind": "kernel", "enabled": False} for n in ("kernel", "syslog", "nvidia_smi", "flight_recorder", "ib_counters")]


def write_site_config(d: Path) -> None:
    """spool, local, results (slurm's) and bin below d, and d/config.yaml naming them."""
    for sub in ("spool", "local", "results", "bin"):
        (d / sub).mkdir(mode=0o755)
    slurm = pwd.getpwnam("slurm")
    os.chown(d / "results", slurm.pw_uid, slurm.pw_gid)
    config = {"spool": str(d / "spool"), "local_spool": str(d / "local"), "results": str(d / "results"),
              "analysis_deadline": 5, "late_bundle_wait": 0, "epilog_timeout": 8, "index_visibility": "own",
              "sources": SOURCES_OFF}
    (d / "config.yaml").write_text(json.dumps(config, indent=1))


def write_hook_wrapper(d: Path, name: str, python: str | Path, pythonpath: str = "") -> None:
    """d/bin/<name>: the project's hook with $SATTRIB_CONFIG, $SATTRIB_PYTHON (and PYTHONPATH) set,
    and the cluster's SLURM_CONF from d/slurm-env once the cluster is up."""
    path = f"; PYTHONPATH={pythonpath}" if pythonpath else ""
    exported = " PYTHONPATH" if pythonpath else ""
    wrapper = d / "bin" / name
    wrapper.write_text("#!/bin/sh\n"
                       f"SATTRIB_CONFIG={d / 'config.yaml'}; SATTRIB_PYTHON={python}{path}\n"
                       f"export SATTRIB_CONFIG SATTRIB_PYTHON{exported}\n"
                       f"[ -r {d / 'slurm-env'} ] && . {d / 'slurm-env'}\n"
                       f"exec {REPO / 'epilog' / name} \"$@\"\n")
    wrapper.chmod(0o755)


def write_slurm_env(d: Path, cluster) -> None:
    (d / "slurm-env").write_text(f"SLURM_CONF={cluster.conf}\nexport SLURM_CONF\n")


def site_on(cluster, d: Path):
    """The body of a module's `site` fixture: (cluster, d) with d's Slurm environment written;
    d removed afterwards unless SATTRIB_KEEP_TESTCLUSTER is set."""
    write_slurm_env(d, cluster)
    yield cluster, d
    if not os.environ.get("SATTRIB_KEEP_TESTCLUSTER"):
        shutil.rmtree(d, ignore_errors=True)


@functools.cache
def runnable_python(user: str) -> tuple[str, str]:
    """(interpreter, PYTHONPATH) with which `user` can import the package's dependencies: this
    interpreter, else the system's python3 of the same version with this one's site-packages."""
    site = sysconfig.get_paths()["purelib"]
    for python, path in ((sys.executable, ""), ("/usr/bin/python3", site)):
        probe = ["runuser", "-u", user, "--", "env", f"PYTHONPATH={path}", python, "-s", "-c",
                 f"import sys, pydantic, re2, yaml, click; assert sys.version_info[:2] == {tuple(sys.version_info[:2])}"]
        if subprocess.run(probe, capture_output=True, timeout=60, cwd="/tmp").returncode == 0:
            return python, path
    pytest.skip(f"no Python with the package's dependencies that {user} can run")


def site_with_hooks(prefix: str) -> Path:
    """A site folder under /tmp (write_site_config) with the hooks as `sattrib install-hooks` writes
    them into its etc/, and this checkout's package beside that folder, as in a source checkout."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)
    write_site_config(d)
    (d / "slurm_attrib").symlink_to(REPO / "slurm_attrib")
    subprocess.run([sys.executable, "-m", "slurm_attrib", "install-hooks", str(d / "etc")], check=True,
                   env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True)
    (d / "etc").chmod(0o755)
    return d


def wait_for_file(path: Path, seconds: float = 90) -> None:
    import time

    end = time.monotonic() + seconds
    while not path.is_file() and time.monotonic() < end:
        time.sleep(0.3)
    assert path.is_file(), f"{path} never appeared"


def readme_site(prefix: str, **config) -> Path:
    """A site installed as the README says, with SlurmUser=slurm: the node hooks find the config in
    the `sattrib-config` file next to them, EpilogSlurmctld gets $SATTRIB_CONFIG from a wrapper
    with a Python slurm can run; `config` overrides keys of the site's config."""
    d = site_with_hooks(prefix)
    if config:
        (d / "config.yaml").write_text(json.dumps({**json.loads((d / "config.yaml").read_text()), **config}, indent=1))
    (d / "etc" / "sattrib-config").write_text(f"{d / 'config.yaml'}\n")
    python, path = runnable_python("slurm")
    write_hook_wrapper(d, "sattrib-epilog-ctld", python, path)
    return d


def readme_cluster_config(d: Path) -> dict:
    """The slurm_cluster_config of a readme_site."""
    return {"prolog": d / "etc" / "sattrib-prolog", "epilog": d / "etc" / "sattrib-epilog",
            "epilog_ctld": d / "bin" / "sattrib-epilog-ctld", "extra_env": {"SATTRIB_SLURM_USER": "slurm"}}


def readme_site_fixtures(prefix: str, **config):
    """A test module's fixtures `slurm_cluster_config` and `site` on one readme_site made for it,
    when the cluster is first configured (its hooks are the site's): assign both at module level."""
    made: dict[str, Path] = {}

    def workdir() -> Path:
        if "dir" not in made:
            made["dir"] = readme_site(prefix, **config)
        return made["dir"]

    @pytest.fixture(scope="module")
    def slurm_cluster_config():
        return readme_cluster_config(workdir())

    @pytest.fixture(scope="module")
    def site(slurm_cluster):
        yield from site_on(slurm_cluster, workdir())

    return slurm_cluster_config, site
