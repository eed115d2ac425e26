"""Topology files as the tools print them, and fabric patterns across jobs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from slurm_attrib.fleet.fabric import fabric_patterns
from slurm_attrib.fleet.topology import SwitchPort, TopologyError, load_topology

DATA = Path(__file__).resolve().parents[1] / "data" / "topology"
T0 = 1_780_000_000.0


def link(job, node, t, device="mlx5_0", port=1, kind="nic_link_down"):
    return {"job_id": job, "node": node, "device": device, "port": port, "time": t, "type": kind}


def test_iblinkinfo_maps_host_ports_to_switch_ports():
    topology = load_topology([DATA / "iblinkinfo.txt"])
    assert topology.switch_of("gpu01", "mlx5_0", 1) == SwitchPort("leaf-07", "7cfe900300a1b2c3", 1)
    assert topology.switch_of("gpu02", "mlx5_0", 1).port == 2
    assert topology.switch_of("gpu04", "mlx5_0", 1).switch == "leaf-08"  # the description says gpu04.cluster
    assert topology.switch_of("gpu01", "ib0", None).switch == "leaf-07"  # one port: the netdev name is enough
    assert topology.switch_of("gpu99", "mlx5_0", 1) is None
    assert not any(host.startswith("leaf") for host, _, _ in topology.ports)  # the CA block's port is not a switch's


def test_ibnetdiscover_maps_host_ports_including_old_hca_names():
    topology = load_topology([DATA / "ibnetdiscover.txt"])
    assert topology.switch_of("gpu01", "mlx5_0", 1) == SwitchPort("leaf-07", "7cfe900300a1b2c3", 1)
    assert topology.switch_of("gpu02", "mlx5_0", 1) == SwitchPort("leaf-07", "7cfe900300a1b2c3", 2)  # "gpu02 HCA-1"


def test_a_file_of_neither_format_is_one_error_naming_it(tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_bytes(b"\x00\xffhello\nCA 'mlx5_0'\n\tPort 1:\n")
    with pytest.raises(TopologyError, match=r"notes.txt: neither iblinkinfo nor ibnetdiscover"):
        load_topology([junk])
    with pytest.raises(TopologyError, match="cannot read"):
        load_topology([tmp_path / "missing.txt"])


def test_one_host_port_failing_in_three_jobs_is_a_host_side_suspect():
    events = [link("101", "gpu03", T0), link("117", "gpu03", T0 + 86400), link("130", "gpu03", None),
              link("140", "gpu05", T0 + 5)]
    [pattern] = fabric_patterns(events)
    assert (pattern.kind, pattern.key, pattern.job_ids, pattern.drain_ok) == ("host_port", "gpu03 mlx5_0 port 1", ["101", "117", "130"], True)
    assert pattern.summary.startswith("replace or reseat the cable/transceiver of gpu03 mlx5_0 port 1")


def test_two_hosts_behind_one_switch_failing_together_blame_the_switch():
    topology = load_topology([DATA / "iblinkinfo.txt"])
    events = [link("201", "gpu01", T0), link("202", "gpu02", T0 + 120),
              link("203", "gpu01", T0 + 86400), link("204", "gpu02", T0 + 86400 + 60)]
    patterns = fabric_patterns(events, topology)
    assert [(p.kind, p.key, p.hosts, p.drain_ok) for p in patterns] == [
        ("switch", "switch leaf-07", ["gpu01", "gpu02"], False), ("switch", "switch leaf-07", ["gpu01", "gpu02"], False)]
    assert "leaf-07" in patterns[0].summary  # and neither host is a host-port suspect


def test_the_same_hosts_far_apart_in_time_are_host_ports_not_the_switch():
    topology = load_topology([DATA / "iblinkinfo.txt"])
    events = [link("201", "gpu01", T0), link("202", "gpu02", T0 + 7200), link("203", "gpu01", T0 + 86400)]
    patterns = fabric_patterns(events, topology)
    assert [(p.kind, p.key) for p in patterns] == [("host_port", "gpu01 mlx5_0 port 1")]


def test_hosts_on_different_switches_are_no_switch_pattern():
    topology = load_topology([DATA / "iblinkinfo.txt"])
    assert fabric_patterns([link("1", "gpu01", T0), link("1", "gpu03", T0 + 10)], topology) == []


def test_without_topology_many_hosts_at_once_is_fabric_wide():
    events = [link("301", f"gpu0{n}", T0 + n) for n in range(1, 5)] + [link("302", "gpu01", T0 + 30)]
    [pattern] = fabric_patterns(events)
    assert (pattern.kind, pattern.hosts, pattern.job_ids, pattern.drain_ok) == (
        "fabric_wide", ["gpu01", "gpu02", "gpu03", "gpu04"], ["301", "302"], False)


def test_the_result_does_not_depend_on_input_order():
    topology = load_topology([DATA / "iblinkinfo.txt"])
    events = [link(str(j), f"gpu0{1 + j % 4}", T0 + j * 50 + (j % 3) * 86400) for j in range(40)]
    expected = fabric_patterns(events, topology)
    shuffled = events[:]
    random.Random(3).shuffle(shuffled)
    assert fabric_patterns(shuffled, topology) == expected and expected
