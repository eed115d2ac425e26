"""The third documented place of the config, through the real daemons: Slurm scrubs the hooks'
environment, and with no `$SATTRIB_CONFIG` and no `sattrib-config` next to the hooks, every hook
(Prolog and Epilog run by slurmd as root, EpilogSlurmctld run by slurmctld as SlurmUser=slurm)
reads /etc/sattrib/config.yaml, and the interpreter named in /etc/sattrib/python.

The daemons run in a private mount namespace whose /etc is an overlay of the machine's
(conftest ClusterConfig.private_etc): the machine's own /etc is never written.  The config names
a spool and a results folder of the test's own; a job's bundles and diagnosis land there (not in
the defaults /var/spool/sattrib and /var/lib/sattrib/results), and its owner reads the diagnosis."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from slurmuser_site import runnable_python, site_on, site_with_hooks, wait_for_file

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
_STATE: dict = {}


def _workdir() -> Path:
    """The site: its folders and config (slurmuser_site), the hooks as `sattrib install-hooks`
    writes them with nothing beside them naming a config, and the files the daemons see in /etc."""
    if "dir" in _STATE:
        return _STATE["dir"]
    d = site_with_hooks("sattrib-etc-layout-")
    assert not (d / "etc" / "sattrib-config").exists()
    # /etc/sattrib/python names an interpreter slurm can run: a site's wrapper of its own that
    # gives the system's python3 the packages (this checkout's venv may be under /root)
    python, path = runnable_python("slurm")
    interpreter = d / "bin" / "python"
    interpreter.write_text("#!/bin/sh\n" + (f"PYTHONPATH=\"${{PYTHONPATH:+$PYTHONPATH:}}{path}\"; export PYTHONPATH\n" if path else "")
                           + f"exec {python} \"$@\"\n")
    interpreter.chmod(0o755)
    etc = d / "private-etc"
    (etc / "sattrib").mkdir(parents=True)
    shutil.copy(d / "config.yaml", etc / "sattrib" / "config.yaml")
    (etc / "sattrib" / "python").write_text(f"{interpreter}\n")
    _STATE["dir"] = d
    return d


@pytest.fixture(scope="module")
def slurm_cluster_config():
    d = _workdir()
    return {"prolog": d / "etc" / "sattrib-prolog", "epilog": d / "etc" / "sattrib-epilog",
            "epilog_ctld": d / "etc" / "sattrib-epilog-ctld", "private_etc": d / "private-etc",
            "extra_env": {"SATTRIB_SLURM_USER": "slurm"}}


@pytest.fixture(scope="module")
def site(slurm_cluster):
    yield from site_on(slurm_cluster, _workdir())


def test_every_hook_finds_etc_sattrib_config_yaml_through_the_daemons(site):
    cluster, d = site
    script = ("sleep 5\n"  # long enough to see the Prolog's record, which the Epilog removes
              "srun -N2 -l bash -c 'echo rank $SLURM_PROCID on $SLURMD_NODENAME'\n"
              "echo 'Traceback (most recent call last):'\n"
              "echo '  File \"/home/user/train.py\", line 42, in <module>'\n"
              "echo 'ZeroDivisionError: division by zero'\n"
              "exit 1\n")
    job = cluster.sbatch(script, user=cluster.test_user, nodes=2)
    # the Prolog (slurmd, root) writes its start record into the configured local spool
    record = d / "local" / "prolog" / f"{job}.json"
    end = time.monotonic() + 30
    while not record.is_file() and time.monotonic() < end:
        time.sleep(0.1)
    assert record.is_file() and json.loads(record.read_text())["job_id"] == str(job)
    assert cluster.wait_job(job) == "FAILED"
    bundles = d / "spool" / str(job) / "nodes"
    folder = d / "results" / str(job)
    wait_for_file(folder / "diagnosis.json")
    # the node Epilog (slurmd, root) wrote every node's bundle into the configured spool ...
    nodes = sorted(p.name.split(".", 1)[0] for p in bundles.iterdir())
    assert len(nodes) == 2 and set(nodes) <= set(cluster.nodes), nodes
    # ... and EpilogSlurmctld (slurmctld, as slurm) the diagnosis into the configured results
    diagnosis = json.loads((folder / "diagnosis.json").read_text())
    assert (diagnosis["outcome"]["job_id"], diagnosis["outcome"]["state"]) == (str(job), "FAILED")
    assert diagnosis["category"] == "app_exception"
    assert not Path(f"/var/lib/sattrib/results/{job}").exists() and not Path(f"/var/spool/sattrib/{job}").exists()
    assert not Path("/etc/sattrib/config.yaml").exists() or Path("/etc/sattrib/config.yaml").read_bytes() != (d / "config.yaml").read_bytes()

    python, path = runnable_python(cluster.test_user)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SATTRIB_CONFIG": str(d / "config.yaml"), "SLURM_CONF": cluster.conf,
           "PYTHONPATH": f"{REPO}:{path}" if path else str(REPO), "HOME": "/tmp"}
    shown = subprocess.run(["runuser", "-u", cluster.test_user, "--", "env", *(f"{k}={v}" for k, v in env.items()),
                            python, "-s", "-m", "slurm_attrib", "show", str(job)],
                           capture_output=True, text=True, timeout=120, cwd="/tmp")
    assert shown.returncode == 0, shown.stderr
    assert "ZeroDivisionError" in shown.stdout
