"""Malformed node bundles never stop the analysis: any JSON in any field of a bundle (or of the
spool's job.json) gives a diagnosis, the bad part a coverage entry, the good parts their events."""

import gzip
import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_attrib.engine.pipeline import analyze_path
from slurm_attrib.ingest.bundle import load_spool_job
from slurm_attrib.vocab import CATEGORIES_BY_DOMAIN

XID = "[ 1234.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**15, max_value=10**300),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["kernel", "syslog", "app", "ok", "boot", "gpu01", "2026-12-02T13:00:00", "1e20", "nan"]),
)
anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                        max_leaves=12)
lines = st.one_of(anything, st.lists(st.one_of(st.tuples(st.integers(), st.sampled_from([XID, "x"])).map(list), anything), max_size=5))
sources = st.fixed_dictionaries({}, optional={
    "name": anything, "kind": st.one_of(st.sampled_from(["kernel", "app", "syslog"]), anything),
    "status": anything, "detail": anything, "lines": lines, "lines_total": anything, "lines_kept": anything,
    "line_base_known": anything,
})
jobs = st.fixed_dictionaries({}, optional={
    "job_id": anything, "user": anything, "state": anything, "exit_code": anything, "start": anything,
    "end": anything, "start_from": anything, "nodes": st.one_of(anything, st.lists(st.sampled_from(["gpu01", "gpu02\n", "x y"]))),
})
bundles = st.fixed_dictionaries(
    {"format": st.just("sattrib-node-bundle"), "version": st.just(1)},
    optional={"node": st.one_of(st.just("gpu01"), anything), "sources": st.one_of(st.lists(st.one_of(sources, anything), max_size=4), anything),
              "job": st.one_of(jobs, anything), "gpus": anything, "capture": anything, "counters": anything},
)
good_source = {"name": "dmesg", "kind": "kernel", "status": "ok", "lines": [[1, XID]]}


def write_spool(root: Path, bundle: dict, record) -> None:
    (root / "nodes").mkdir()
    (root / "nodes" / "gpu01.json.gz").write_bytes(gzip.compress(json.dumps(bundle).encode()))
    good = {"format": "sattrib-node-bundle", "version": 1, "node": "gpu02", "sources": [good_source],
            "job": {"nodes": ["gpu01", "gpu02"]}}
    (root / "nodes" / "gpu02.json.gz").write_bytes(gzip.compress(json.dumps(good).encode()))
    if record is not None:
        (root / "job.json").write_text(json.dumps(record))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(bundle=bundles, record=st.one_of(st.none(), jobs, anything))
def test_any_bundle_gives_a_diagnosis_and_the_good_bundle_is_read(tmp_path_factory, bundle, record):
    root = tmp_path_factory.mktemp("spool")
    write_spool(root, bundle, record)
    evidence = load_spool_job(root)
    assert any(f.rel == "nodes/gpu02.json.gz/dmesg" for f in evidence.files)
    diagnosis = analyze_path(root)
    assert diagnosis.category in CATEGORIES_BY_DOMAIN[diagnosis.domain]
    assert any(e.source.startswith("nodes/gpu02.json.gz") for e in diagnosis.evidence)


def test_wrong_types_become_coverage_notes(tmp_path):
    bundle = {"format": "sattrib-node-bundle", "version": 1, "node": "gpu01",
              "sources": [7, {"name": "dmesg", "kind": "kernel", "lines": [[1, XID], ["x", 1], [True, "y"]]},
                          {"name": "syslog", "kind": "syslog", "lines": {"1": "x"}}],
              "gpus": [1], "capture": ["errors"], "job": {"start": 1e20, "end": float("nan"), "nodes": 5}}
    write_spool(tmp_path, bundle, {"start": 10**40, "nodes": ["gpu01", "gpu02\n"]})
    evidence = load_spool_job(tmp_path)
    notes = {c.source: c for c in evidence.coverage}
    assert notes["nodes/gpu01.json.gz/source 1"].status == "unreadable"
    assert "2 malformed lines left out" in notes["nodes/gpu01.json.gz/dmesg"].detail
    assert "1 malformed lines left out" in notes["nodes/gpu01.json.gz/syslog"].detail
    assert evidence.job.start is None and evidence.job.end is None and evidence.job.nodes == ("gpu01",)
    assert "'start' ignored" in notes["job.json"].detail
    assert [f.rel for f in evidence.files] == ["nodes/gpu01.json.gz/dmesg", "nodes/gpu02.json.gz/dmesg"]


def test_a_deeply_nested_bundle_is_unreadable_not_a_crash(tmp_path):
    (tmp_path / "nodes").mkdir()
    (tmp_path / "nodes" / "gpu01.json.gz").write_bytes(gzip.compress(b"[" * 100_000 + b"]" * 100_000))
    (tmp_path / "job.json").write_text("[" * 100_000 + "]" * 100_000)
    evidence = load_spool_job(tmp_path)
    statuses = {c.source: c.status for c in evidence.coverage}
    assert statuses["nodes/gpu01.json.gz"] == "unreadable" and statuses["job.json"] == "unreadable"
