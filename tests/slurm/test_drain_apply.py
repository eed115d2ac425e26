"""`sattrib drain --apply` on the real test cluster: every pending recommendation, single jobs' and
the fleet's, in one run, one drain per node with the most specific reason; and drain_policy
`auto` against `recommend`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_attrib.config import Config
from slurm_attrib.drain import apply_policy, plan
from slurm_attrib.model import Diagnosis, Drain, Outcome
from slurm_attrib.slurm.cli import CliBackend
from slurm_attrib.store import Row, Store

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
NOW = time.time()
DAY = 86400.0


def _row(job_id: str, node: str, days_ago: float, *, reason: str = "", gpu: str | None = None, category="gpu_fell_off_bus",
         domain="gpu") -> Row:
    when = NOW - days_ago * DAY
    drains = [{"node": node, "reason": reason, "status": "recommended", "detail": ""}] if reason else []
    return Row(job_id=job_id, user="alice", uid=1000, state="FAILED", domain=domain, category=category, quality="likely",
               culprit_nodes=[node], drains=drains, drain_note="", summary="", analysed_at=when, owner_ok=True,
               path=f"/r/{job_id}", job_end=when, cause_time=when, trusted=True,
               gpus=[{"node": node, "pci_bus_id": gpu, "xid": 79, "uuid": None}] if gpu else [])


@pytest.fixture
def cluster_env(slurm_cluster, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(f"results: {tmp_path / 'results'}\nspool: {tmp_path / 'spool'}\n")
    yield dict(slurm_cluster.env, SATTRIB_CONFIG=str(config), PYTHONPATH=str(REPO))
    for node in slurm_cluster.nodes:
        slurm_cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)


def _sattrib(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_attrib", *args], capture_output=True, text=True, env=env, timeout=120)


def _reason(slurm_cluster, node: str) -> str:
    state = slurm_cluster.run("scontrol", "show", "node", node).stdout
    return state.split("Reason=", 1)[1].split(" [")[0] if "Reason=" in state else ""


def test_one_run_applies_everything_pending_and_keeps_the_most_specific_reason(slurm_cluster, cluster_env, tmp_path):
    store = Store(tmp_path / "results")
    store.put_many([
        # gpu01: a job named its GPU, two jobs make it a repeat offender of the node as a whole
        _row("301", "gpu01", 3, reason="sattrib: Xid79 GPU 3b:00 job 301", gpu="0000:3b:00"),
        _row("302", "gpu01", 1, domain="host", category="node_failure"),
        # gpu02: one job's link fault; the fleet names a GPU that failed in two jobs: the GPU wins
        _row("303", "gpu02", 4, gpu="0000:5d:00"),
        _row("304", "gpu02", 2, gpu="0000:5d:00"),
        _row("305", "gpu02", 1, reason="sattrib: link_down mlx5_0 job 305", domain="network", category="link_down"),
        # gpu03: two jobs' recommendations, one drain
        _row("306", "gpu03", 2, reason="sattrib: Xid79 GPU 18:00 job 306", gpu="0000:18:00"),
        _row("307", "gpu03", 30, reason="sattrib: Xid48 GPU 2a:00 job 307"),
    ])
    listed = _sattrib(cluster_env, "drain", "--recommend").stdout.splitlines()
    assert {line.split("\t")[0] for line in listed} == {"gpu01", "gpu02", "gpu03"}
    applied = _sattrib(cluster_env, "drain", "--apply")
    assert applied.returncode == 0, applied.stderr
    lines = applied.stdout.splitlines()
    assert "gpu01\tfleet:301,302\tapplied (applied with job 301 recommendation)" in lines
    assert "gpu02\tjob 305\tapplied (applied with the fleet's (303,304,305) recommendation)" in lines
    assert _reason(slurm_cluster, "gpu01") == "sattrib: Xid79 GPU 3b:00 job 301"
    assert _reason(slurm_cluster, "gpu02").startswith("sattrib: repeat GPU 0000:5d:00 fault in 3 jobs/14d")
    assert _reason(slurm_cluster, "gpu03") == "sattrib: Xid48 GPU 2a:00 job 307"  # the older of equals
    # nothing is left for a second run, and the reasons stay
    assert _sattrib(cluster_env, "drain", "--recommend").stdout.strip() == "no pending drain recommendations"
    again = _sattrib(cluster_env, "drain", "--apply")
    assert again.returncode == 0 and again.stdout.strip() == "nothing to apply"
    assert _reason(slurm_cluster, "gpu01") == "sattrib: Xid79 GPU 3b:00 job 301"
    assert {e["status"] for r in store.rows() for e in r.drains} == {"applied"}


def test_a_node_we_drained_keeps_its_reason_unless_the_new_one_is_more_specific(slurm_cluster, cluster_env, tmp_path):
    slurm_cluster.run("scontrol", "update", "NodeName=gpu04", "State=DRAIN", "Reason=sattrib: Xid79 GPU 3b:00 job 401")
    store = Store(tmp_path / "results")
    store.put(_row("402", "gpu04", 1, reason="sattrib: node_failure job 402", domain="host", category="node_failure"))
    out = _sattrib(cluster_env, "drain", "--apply")
    assert "already drained by sattrib with reason 'sattrib: Xid79 GPU 3b:00 job 401'" in out.stdout
    assert _reason(slurm_cluster, "gpu04") == "sattrib: Xid79 GPU 3b:00 job 401"
    slurm_cluster.run("scontrol", "update", "NodeName=gpu04", "State=DRAIN", "Reason=sattrib: node_failure job 403")
    store.put(_row("404", "gpu04", 1, reason="sattrib: Xid95 GPU 5d:00 job 404", gpu="0000:5d:00"))
    assert _sattrib(cluster_env, "drain", "--apply").returncode == 0
    assert _reason(slurm_cluster, "gpu04") == "sattrib: Xid95 GPU 5d:00 job 404"


def test_drain_policy_auto_drains_at_once_and_recommend_waits(slurm_cluster, cluster_env, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.conf)
    backend = CliBackend(timeout=20)
    diagnosis = Diagnosis(
        domain="gpu", category="gpu_fell_off_bus", culprit_nodes=["gpu03"], quality="confirmed",
        drain=[Drain(node="gpu03", reason="sattrib: Xid79 GPU 3b:00 job 7")], evidence=[], summary="test",
        outcome=Outcome(state="FAILED", job_id="7"))
    for policy, status in (("recommend", "recommended"), ("off", "skipped")):
        config = Config(drain_policy=policy)
        [entry] = apply_policy(plan(diagnosis, config)[0], config, backend)
        assert entry["status"] == status and not backend.node_state("gpu03").drained
    config = Config(drain_policy="auto")
    [entry] = apply_policy(plan(diagnosis, config)[0], config, backend)
    assert entry["status"] == "applied" and backend.node_state("gpu03").drained
    assert _reason(slurm_cluster, "gpu03") == "sattrib: Xid79 GPU 3b:00 job 7"
