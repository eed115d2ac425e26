"""The local spool, through the real daemons: when the shared spool does not take a node's bundle
at a job's end (here mounted read-only, which stops root too), slurmd's Epilog writes it to the
local spool; the node's next Epilog, with the shared spool back, forwards it; and the
controller's worker, still waiting for that node's bundle (late_bundle_wait), analyses the job
again with it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from slurmuser_site import readme_site_fixtures, wait_for_file
from support import wait_for_diagnosis

pytestmark = pytest.mark.slurm

slurm_cluster_config, site = readme_site_fixtures("sattrib-local-spool-", late_bundle_wait=120)


def _read_only(folder: Path) -> None:
    for command in (["mount", "--bind", str(folder), str(folder)], ["mount", "-o", "remount,bind,ro", str(folder)]):
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            subprocess.run(["umount", str(folder)], capture_output=True, timeout=30)
            pytest.skip(f"cannot make the shared spool read-only here: {done.stderr.strip()}")


def test_a_bundle_left_in_the_local_spool_reaches_its_analysis(site):
    cluster, d = site
    stranded = None
    _read_only(d / "spool")
    try:
        job = cluster.sbatch("echo 'Traceback (most recent call last):'\n"
                             "echo '  File \"/home/user/train.py\", line 42, in <module>'\n"
                             "echo 'ZeroDivisionError: division by zero'\nexit 1\n",
                             user=cluster.test_user, nodes=1, nodelist="gpu01")
        assert cluster.wait_job(job) == "FAILED"
        stranded = d / "local" / str(job) / "nodes" / "gpu01.json.gz"
        wait_for_file(stranded, 60)  # the Epilog wrote it to the local spool
        first = wait_for_diagnosis(d / "results", job, timeout=150)
        assert any(c["node"] == "gpu01" and c["status"] == "missing" for c in first["coverage"])
    finally:
        subprocess.run(["umount", str(d / "spool")], capture_output=True, timeout=30)
    after = cluster.sbatch("true\n", user=cluster.test_user, nodes=1, nodelist="gpu01")
    assert cluster.wait_job(after) == "COMPLETED"
    second = wait_for_diagnosis(d / "results", job, lambda found: any(
        c["source"] == "nodes/gpu01.json.gz/job_stdout" and c["status"] == "ok" for c in found["coverage"]), timeout=150)
    assert second["category"] == "app_exception" and "ZeroDivisionError" in json.dumps(second["evidence"])
    capture = next(c for c in second["coverage"] if c["source"] == "nodes/gpu01.json.gz/capture")
    assert "Read-only file system" in capture["detail"] and "writing to local spool" in capture["detail"]
    assert (d / "spool" / str(job) / "nodes" / "gpu01.json.gz").is_file() and not stranded.exists()
