"""The index's fleet columns: filled from the diagnosis, and added to an index written before them."""

from __future__ import annotations

import sqlite3

from slurm_attrib.engine.pipeline import analyze_path
from slurm_attrib.ruleset.loader import pack_version
from slurm_attrib.simulate import write_scenario
from slurm_attrib.store import INDEX, Store

OLD_SCHEMA = """
CREATE TABLE diagnoses (
    job_id TEXT PRIMARY KEY, user TEXT, uid INTEGER, state TEXT, domain TEXT, category TEXT,
    quality TEXT, culprit_nodes TEXT NOT NULL DEFAULT '[]', drains TEXT NOT NULL DEFAULT '[]',
    drain_note TEXT NOT NULL DEFAULT '', summary TEXT NOT NULL DEFAULT '', analysed_at REAL NOT NULL,
    owner_ok INTEGER NOT NULL DEFAULT 1, path TEXT NOT NULL
);
INSERT INTO diagnoses (job_id, user, uid, state, domain, category, quality, culprit_nodes, analysed_at, path)
VALUES ('5', 'alice', 1000, 'FAILED', 'gpu', 'gpu_fell_off_bus', 'confirmed', '["gpu03"]', 1.0, '/x/5');
"""


def test_fleet_facts_come_from_the_diagnosis(tmp_path):
    write_scenario("link_down", tmp_path / "job", nodes=4, ranks_per_node=2, seed=1)
    diagnosis = analyze_path(tmp_path / "job")
    store = Store(tmp_path / "results")
    row = store.save("9", diagnosis, "t\n", uid=None, user=None, state="FAILED", drains=[],
                     rule_pack=pack_version(), evidence=str(tmp_path / "job"))
    again = store.get("9")
    assert again == row
    assert again.rule_pack == pack_version() and again.evidence.endswith("job")
    assert again.node_count == 4 and again.elapsed and again.elapsed > 0
    assert again.trusted and again.cause_time is not None
    culprit = diagnosis.culprit_nodes[0]
    assert any(link["node"] == culprit and link["trusted"] for link in again.links)


def test_gpus_of_an_xid_job_are_indexed(tmp_path):
    write_scenario("gpu_fell_off_bus", tmp_path / "job", nodes=4, ranks_per_node=2, seed=2)
    diagnosis = analyze_path(tmp_path / "job")
    row = Store(tmp_path / "r").save("10", diagnosis, "t\n", uid=None, user=None, state="FAILED", drains=[])
    assert [(g["node"], g["xid"]) for g in row.gpus] == [(diagnosis.culprit_nodes[0], 79)]


def test_an_index_written_before_the_fleet_columns_gains_them(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    with sqlite3.connect(root / INDEX) as con:
        con.executescript(OLD_SCHEMA)
    store = Store(root)
    old = store.get("5")  # read before any write: the old columns only
    assert old.culprit_nodes == ["gpu03"] and old.rule_pack == "" and old.links == []
    store.set_drains("5", [])  # the first write adds the columns, keeping the row
    columns = {r[1] for r in sqlite3.connect(root / INDEX).execute("PRAGMA table_info(diagnoses)")}
    assert {"rule_pack", "links", "gpus", "cause_time"} <= columns
    assert store.get("5").domain == "gpu"
