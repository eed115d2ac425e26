"""Results store and drain policy; the drain parts against the real local Slurm cluster."""

from __future__ import annotations

import os
import stat

import pytest

from slurm_attrib.config import Config
from slurm_attrib.drain import UndrainRefused, apply_entry, apply_pending, clean_reason, plan, undrain
from slurm_attrib.model import Diagnosis, Drain, Outcome
from slurm_attrib.slurm.cli import CliBackend
from slurm_attrib.hostlist import expand
from slurm_attrib.store import APPLIED, KEPT, RECOMMENDED, SKIPPED, Store


def _diag(culprits=("gpu03",), drains=("gpu03",), systemic=False) -> Diagnosis:
    return Diagnosis(
        domain="gpu", category="xid_79", culprit_nodes=list(culprits), quality="confirmed",
        drain=[Drain(node=n, reason="sattrib: Xid79 GPU 3b:00 job 7") for n in drains],
        evidence=[], summary="test", outcome=Outcome(state="FAILED", job_id="7"), systemic=systemic,
    )


def test_hostlist():
    assert expand("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand("a[1-2]b[3-4]") == ["a1b3", "a1b4", "a2b3", "a2b4"]
    assert expand("") == [] and expand("(null)") == []
    with pytest.raises(ValueError):
        expand("gpu[01-")


def test_store_atomic_replace_modes_and_index(tmp_path):
    store = Store(tmp_path / "results")
    row = store.save("7", _diag(), "text v1\n", uid=1234, user="alice", state="FAILED", drains=[])
    job_dir = tmp_path / "results" / "7"
    assert stat.S_IMODE(job_dir.stat().st_mode) == 0o750
    for name in ("diagnosis.json", "diagnosis.txt"):
        st = (job_dir / name).stat()
        assert stat.S_IMODE(st.st_mode) == 0o640
        if os.geteuid() == 0:
            assert st.st_uid == 1234 and st.st_gid == 0
    assert row.owner_ok == (os.geteuid() == 0)
    inode = (job_dir / "diagnosis.txt").stat().st_ino
    store.save("7", _diag(), "text v2\n", uid=1234, user="alice", state="FAILED", drains=[])
    assert store.read("7", "diagnosis.txt") == "text v2\n"
    assert (job_dir / "diagnosis.txt").stat().st_ino != inode  # replaced by rename, not rewritten
    assert not [p for p in job_dir.iterdir() if p.name.startswith(".")]
    got = store.get("7")
    assert (got.user, got.uid, got.category, got.culprit_nodes) == ("alice", 1234, "xid_79", ["gpu03"])
    assert [r.job_id for r in store.rows()] == ["7"]
    with pytest.raises(Exception):
        store.save("../x", _diag(), "", uid=None, user=None, state=None, drains=[])


def test_store_does_not_follow_symlinks(tmp_path):
    store = Store(tmp_path / "results")
    store.save("8", _diag(), "v1\n", uid=None, user=None, state=None, drains=[])
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "results" / "8" / "diagnosis.txt").unlink()
    (tmp_path / "results" / "8" / "diagnosis.txt").symlink_to(victim)
    store.save("8", _diag(), "v2\n", uid=None, user=None, state=None, drains=[])
    assert victim.read_text() == "keep"
    assert store.read("8", "diagnosis.txt") == "v2\n"


def test_plan_policy_caps_and_systemic():
    entries, note = plan(_diag(), Config(drain_policy="recommend"))
    assert [e["status"] for e in entries] == [RECOMMENDED] and note == ""
    entries, note = plan(_diag(), Config(drain_policy="off"))
    assert [e["status"] for e in entries] == [SKIPPED] and "off" in note
    many = _diag(culprits=("a", "b", "c", "d"), drains=("a", "b"))
    entries, note = plan(many, Config(systemic_threshold=3))
    assert all(e["status"] == SKIPPED for e in entries) and "systemic" in note
    entries, note = plan(_diag(culprits=("a", "b", "c"), drains=("a", "b", "c")), Config(drain_max_nodes=2))
    assert all(e["status"] == SKIPPED for e in entries) and "drain_max_nodes" in note


def test_clean_reason():
    r = clean_reason("Xid79 \n on gpu " + "x" * 400)
    assert r.startswith("sattrib:") and "\n" not in r and len(r.encode()) <= 255


# -- against the real cluster ---------------------------------------------------------------------


@pytest.fixture
def backend(slurm_cluster, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm_cluster.conf)
    b = CliBackend(timeout=20)
    yield b
    for node in slurm_cluster.nodes:
        slurm_cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)


@pytest.mark.slurm
def test_cli_backend_job_and_node(slurm_cluster, backend):
    job = slurm_cluster.sbatch("exit 3\n", nodes=2, job_name="adapter")
    assert slurm_cluster.wait_job(job) == "FAILED"
    info = backend.job_info(str(job))
    assert (info.state, info.exit_code, info.user, info.uid) == ("FAILED", "3:0", "root", 0)
    assert len(info.nodes) == 2 and info.start and info.end and not info.active
    assert backend.job_info("987654") is None
    assert backend.node_state("nosuchnode") is None
    state = backend.node_state("gpu02")
    assert state.state in ("IDLE", "MIXED", "ALLOCATED") and not state.drained


@pytest.mark.slurm
def test_drain_keeps_foreign_reason_and_undrain_only_ours(slurm_cluster, backend, tmp_path):
    slurm_cluster.run("scontrol", "update", "NodeName=gpu02", "State=DRAIN", "Reason=admin: replacing PSU")
    entry = apply_entry({"node": "gpu02", "reason": "sattrib: Xid79 job 1", "status": RECOMMENDED}, backend)
    assert entry["status"] == KEPT
    assert backend.node_state("gpu02").reason == "admin: replacing PSU"
    with pytest.raises(UndrainRefused):
        undrain("gpu02", backend)
    assert backend.node_state("gpu02").drained

    entry = apply_entry({"node": "gpu03", "reason": "sattrib: Xid79 GPU 3b:00 job 1", "status": RECOMMENDED}, backend)
    assert entry["status"] == APPLIED
    state = backend.node_state("gpu03")
    assert state.drained and state.reason == "sattrib: Xid79 GPU 3b:00 job 1"
    sinfo = slurm_cluster.run("sinfo", "-h", "-R", "-n", "gpu03").stdout
    assert "sattrib: Xid79 GPU 3" in sinfo  # the first 20 characters carry the essential
    assert undrain("gpu03", backend).startswith("sattrib:")
    assert not backend.node_state("gpu03").drained
    with pytest.raises(UndrainRefused):
        undrain("gpu03", backend)  # no longer drained: nothing of ours to resume


@pytest.mark.slurm
def test_apply_pending_from_index(slurm_cluster, backend, tmp_path):
    store = Store(tmp_path / "results")
    entries, _ = plan(_diag(culprits=("gpu04",), drains=("gpu04",)), Config())
    store.save("11", _diag(culprits=("gpu04",), drains=("gpu04",)), "t\n", uid=0, user="root", state="FAILED", drains=entries)
    done = apply_pending(store, backend, ("gpu01",))
    assert done == []  # other node asked for: nothing applied
    done = apply_pending(store, backend)
    assert [(j, e["node"], e["status"]) for j, e in done] == [("11", "gpu04", APPLIED)]
    assert store.get("11").drains[0]["status"] == APPLIED
    assert backend.node_state("gpu04").reason.startswith("sattrib:")
    assert apply_pending(store, backend) == []
