"""The index's fleet columns are filled from the diagnosis, in both backends (an index written
before them gains them: tests/fleet/test_store_index.py)."""

from __future__ import annotations

from slurm_attrib.engine.pipeline import analyze_path
from slurm_attrib.ruleset.loader import pack_version
from slurm_attrib.simulate import write_scenario
from slurm_attrib.store import Store


def test_fleet_facts_come_from_the_diagnosis(tmp_path, index_url):
    write_scenario("link_down", tmp_path / "job", nodes=4, ranks_per_node=2, seed=1)
    diagnosis = analyze_path(tmp_path / "job")
    store = Store(tmp_path / "results", index_url=index_url)
    row = store.save("9", diagnosis, "t\n", uid=None, user=None, state="FAILED", drains=[],
                     rule_pack=pack_version(), evidence=str(tmp_path / "job"))
    again = store.get("9")
    assert again == row
    assert again.rule_pack == pack_version() and again.evidence.endswith("job")
    assert again.node_count == 4 and again.elapsed and again.elapsed > 0
    assert again.trusted and again.cause_time is not None
    culprit = diagnosis.culprit_nodes[0]
    assert any(link["node"] == culprit and link["trusted"] for link in again.links)


def test_gpus_of_an_xid_job_are_indexed(tmp_path, index_url):
    write_scenario("gpu_fell_off_bus", tmp_path / "job", nodes=4, ranks_per_node=2, seed=2)
    diagnosis = analyze_path(tmp_path / "job")
    store = Store(tmp_path / "r", index_url=index_url)
    row = store.save("10", diagnosis, "t\n", uid=None, user=None, state="FAILED", drains=[])
    assert store.get("10") == row
    assert [(g["node"], g["xid"]) for g in row.gpus] == [(diagnosis.culprit_nodes[0], 79)]
