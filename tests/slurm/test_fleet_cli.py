"""The fleet from the command line: `sattrib report` over a store, and repeat offenders becoming
drain recommendations that `sattrib drain --apply` applies on the real test cluster."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_attrib.store import Row, Store

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
NOW = time.time()
DAY = 86400.0


def _row(job_id: str, node: str, days_ago: float, *, domain="gpu", category="gpu_fell_off_bus", quality="likely",
         gpu=None, xid=None, links=()) -> Row:
    when = NOW - days_ago * DAY
    return Row(
        job_id=job_id, user="alice", uid=1000, state="FAILED", domain=domain, category=category, quality=quality,
        culprit_nodes=[node] if domain != "application" else [], drains=[], drain_note="", summary=f"{category} on {node}",
        analysed_at=when + 60, owner_ok=True, path=f"/r/{job_id}", job_start=when - 3600, job_end=when, node_count=2,
        cause_time=when, trusted=True, gpus=[{"node": node, "pci_bus_id": gpu, "xid": xid, "uuid": None, "serial": None}] if gpu else [],
        links=list(links),
    )


def _link(node: str, days_ago: float) -> dict:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(NOW - days_ago * DAY))
    return {"node": node, "device": "mlx5_0", "port": 1, "type": "nic_link_down", "rule": "net.mlx5_link_down",
            "time": stamp, "count": 1, "trusted": True}


@pytest.fixture
def fleet(slurm_cluster, tmp_path):
    store = Store(tmp_path / "results")
    store.put_many([
        _row("201", "gpu01", 9, gpu="0000:3b:00", xid=79),
        _row("202", "gpu01", 2, gpu="0000:3b:00", xid=79),
        _row("203", "gpu02", 3, category="gpu_uncorrectable_ecc", quality="confirmed", gpu="0000:5d:00", xid=48),
        _row("204", "gpu03", 1, domain="application", category="app_exception"),
        _row("205", "gpu04", 40),  # outside the window
        _row("206", "gpu04", 1),
    ])
    config = tmp_path / "config.yaml"
    config.write_text(f"results: {tmp_path / 'results'}\nspool: {tmp_path / 'spool'}\n")
    env = dict(slurm_cluster.env, SATTRIB_CONFIG=str(config), PYTHONPATH=str(REPO))
    yield env, store
    slurm_cluster.run("scontrol", "update", "NodeName=gpu01", "State=RESUME", check=False)


def _sattrib(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_attrib", *args], capture_output=True, text=True, env=env, timeout=120)


def test_report_in_three_formats(fleet):
    env, _ = fleet
    data = json.loads(_sattrib(env, "report", "--since", "14d", "--format", "json").stdout)
    assert data["jobs"] == 5 and data["by_domain"] == {"gpu": 4, "application": 1}
    assert [(o["node"], o["gpu"], o["recommendation"]) for o in data["repeat_offenders"]] == [("gpu01", "0000:3b:00", "drain")]
    assert [o["job_id"] for o in data["repeat_offenders"][0]["jobs"]] == ["201", "202"]
    assert data["xid_histogram"] == {"gpu01 0000:3b:00": {"79": 2}, "gpu02 0000:5d:00": {"48": 1}}
    assert data["gpu_hours_lost"]["gpu"] == pytest.approx(4 * 1 * 2 * 8)  # 4 jobs x 1 h x 2 nodes x 8 GPUs
    text = _sattrib(env, "report", "--since", "14d").stdout
    assert "Repeat offenders (>= 2 jobs in 14 days): 1" in text and "gpu01 GPU 0000:3b:00: DRAIN" in text
    rows = list(csv.DictReader(io.StringIO(_sattrib(env, "report", "--since", "14d", "--format", "csv").stdout)))
    offenders = [r for r in rows if r["section"] == "repeat_offender"]
    assert {(r["node"], r["jobs"]) for r in offenders} == {("gpu01", "201 202")}
    short = json.loads(_sattrib(env, "report", "--since", "2d", "--json").stdout)
    assert short["jobs"] == 2  # jobs 204 and 206


def test_repeat_offender_is_recommended_applied_and_settled(fleet, slurm_cluster):
    env, _ = fleet
    listed = _sattrib(env, "drain", "--recommend")
    assert listed.returncode == 0
    [line] = listed.stdout.splitlines()
    node, source, reason = line.split("\t")
    assert node == "gpu01" and source == "fleet 201,202" and reason.startswith("sattrib: repeat GPU 0000:3b:00 fault in 2 jobs/14d")
    applied = _sattrib(env, "drain", "--apply")
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.startswith("gpu01\tfleet:201,202\tapplied")
    state = slurm_cluster.run("scontrol", "show", "node", "gpu01").stdout
    assert "Reason=sattrib: repeat GPU 0000:3b:00" in state and "DRAIN" in state
    # settled: the same two jobs recommend nothing any more
    assert _sattrib(env, "drain", "--recommend").stdout.strip() == "no pending drain recommendations"
    resumed = _sattrib(env, "undrain", "gpu01")
    assert resumed.returncode == 0 and "resumed" in resumed.stdout
    assert "DRAIN" not in slurm_cluster.run("scontrol", "show", "node", "gpu01").stdout.split("State=")[1].split()[0]


def test_switch_side_pattern_keeps_hosts_from_fleet_drains(fleet, tmp_path):
    env, store = fleet
    topology = tmp_path / "iblinkinfo.txt"
    topology.write_text(
        "Switch: 0x7cfe900300a1b2c3 leaf-07:\n"
        "           3    1[  ] ==( 4X       25.78125 Gbps Active/  LinkUp)==>       5    1[  ] \"gpu03 mlx5_0\" ( )\n"
        "           3    2[  ] ==( 4X       25.78125 Gbps Active/  LinkUp)==>       6    1[  ] \"gpu04 mlx5_0\" ( )\n"
    )
    config = Path(env["SATTRIB_CONFIG"])
    config.write_text(config.read_text() + f"topology_files: [{topology}]\n")
    store.put_many([
        _row("301", "gpu03", 2, domain="network", category="link_down", links=[_link("gpu03", 2)]),
        _row("302", "gpu04", 2 - 60 / DAY, domain="network", category="link_down", links=[_link("gpu04", 2 - 60 / DAY)]),
        _row("303", "gpu03", 1, domain="network", category="link_down", links=[_link("gpu03", 1)]),
        _row("304", "gpu04", 1 - 30 / DAY, domain="network", category="link_down", links=[_link("gpu04", 1 - 30 / DAY)]),
    ])
    data = json.loads(_sattrib(env, "report", "--format", "json", "--since", "14d").stdout)
    switch = [p for p in data["fabric_patterns"] if not p["drain_ok"]]
    assert switch and set(switch[0]["hosts"]) == {"gpu03", "gpu04"}
    assert "leaf-07" in switch[0]["summary"]
    drained = {d["node"] for d in data["fleet_drains"]}
    assert "gpu03" not in drained  # its network strikes are the switch's
    assert "gpu01" in drained
