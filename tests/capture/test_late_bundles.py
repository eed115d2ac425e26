"""The controller's worker and a node whose bundle comes after the analysis deadline (real
epilog runs, the real worker in a subprocess; no Slurm: the worker analyses without the job
record)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO
from support import wait_for_diagnosis

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def test_a_late_bundle_is_analysed_again(node, tmp_path):
    results = tmp_path / "results"
    node.config.update(results=str(results), analysis_deadline=0.5, late_bundle_wait=30, drain_policy="off",
                       slurm_backend="cli")
    kernel = tmp_path / "kernel-%N.log"
    (tmp_path / "kernel-gpu02.log").write_text(XID + "\n")
    node.source(name="kernel", kind="kernel", path=str(kernel))
    assert node.run()[0] == 0  # gpu01 reports at once, with nothing wrong in its kernel log
    env = {**os.environ, **node.env, "SATTRIB_CONFIG": str(node.write_config()), "PATH": "/nonexistent",
           "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen([sys.executable, "-m", "slurm_attrib.worker", "4242"], env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        first = wait_for_diagnosis(results, "4242")
        late = [c for c in first["coverage"] if c["node"] == "gpu02" and c["status"] == "missing"]
        assert late and first["domain"] != "gpu", first["summary"]
        assert worker.poll() is None  # still watching for gpu02
        assert node.run(extra_env={"SLURMD_NODENAME": "gpu02"})[0] == 0
        second = wait_for_diagnosis(results, "4242", lambda d: d["domain"] == "gpu")
        assert second["culprit_nodes"] == ["gpu02"], second["summary"]
        assert not [c for c in second["coverage"] if c["status"] == "missing" and c["source"].endswith(".json.gz")]
        assert worker.wait(timeout=20) == 0  # nothing left to wait for
    finally:
        worker.kill()
        log = worker.communicate()[1]
    assert "again after the late bundle of gpu02" in log, log


def test_the_worker_stops_watching_after_late_bundle_wait(node, tmp_path):
    results = tmp_path / "results"
    node.config.update(results=str(results), analysis_deadline=0.3, late_bundle_wait=1, drain_policy="off",
                       slurm_backend="cli")
    assert node.run()[0] == 0
    env = {**os.environ, **node.env, "SATTRIB_CONFIG": str(node.write_config()), "PATH": "/nonexistent",
           "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "slurm_attrib.worker", "4242"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "no bundle from gpu02" in done.stderr and "again" not in done.stderr, done.stderr
    d = wait_for_diagnosis(results, "4242")
    assert [c["node"] for c in d["coverage"] if c["status"] == "missing" and c["source"].endswith(".json.gz")] == ["gpu02"]


def test_a_bundle_stranded_in_the_local_spool_reaches_the_worker_through_the_next_epilog(node, tmp_path):
    """gpu02 could not write the shared spool at job 4242's end (its bundle went to the local
    spool); its next epilog (job 4243), with the shared spool back, forwards it, and the worker
    still watching job 4242 analyses it again: the Xid in gpu02's kernel log is the cause."""
    results = tmp_path / "results"
    node.config.update(results=str(results), analysis_deadline=0.5, late_bundle_wait=60, drain_policy="off",
                       slurm_backend="cli")
    (tmp_path / "kernel-gpu02.log").write_text(XID + "\n")
    node.source(name="kernel", kind="kernel", path=str(tmp_path / "kernel-%N.log"))
    assert node.run()[0] == 0  # gpu01 reports at once, with nothing wrong in its kernel log
    worker_config = tmp_path / "worker-config.yaml"  # its own: the node's is written anew for each run
    worker_config.write_bytes(node.write_config().read_bytes())
    env = {**os.environ, **node.env, "SATTRIB_CONFIG": str(worker_config), "PATH": "/nonexistent", "PYTHONPATH": str(REPO)}
    worker = subprocess.Popen([sys.executable, "-m", "slurm_attrib.worker", "4242"], env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        shared = node.config["spool"]
        blocker = tmp_path / "spool-unreachable"
        blocker.write_text("")
        node.config["spool"] = str(blocker)
        assert node.run(extra_env={"SLURMD_NODENAME": "gpu02"})[0] == 0
        assert node.bundle_path(local=True, node="gpu02").is_file()
        first = wait_for_diagnosis(results, "4242")
        assert first["domain"] != "gpu" and any(c["node"] == "gpu02" and c["status"] == "missing" for c in first["coverage"])

        node.config["spool"] = shared
        assert node.run(extra_env={"SLURMD_NODENAME": "gpu02", "SLURM_JOB_ID": "4243"})[0] == 0
        second = wait_for_diagnosis(results, "4242", lambda d: d["domain"] == "gpu")
        assert second["culprit_nodes"] == ["gpu02"], second["summary"]
        assert not node.bundle_path(local=True, node="gpu02").exists()
        assert worker.wait(timeout=20) == 0
    finally:
        worker.kill()
        log = worker.communicate()[1]
    assert "again after the late bundle of gpu02" in log, log
