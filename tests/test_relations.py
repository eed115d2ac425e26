"""The relations (rules/relations/*.yaml): each one's own tests through the whole analysis, and the
format's checks."""

from __future__ import annotations

import pytest

from slurm_attrib.engine.checks import check_problem
from slurm_attrib.engine.relate import relations
from slurm_attrib.engine.relation_tests import decided
from slurm_attrib.ruleset.relations import Relation, RelationTest

RELATIONS = relations()


@pytest.mark.parametrize(
    "relation, test", [pytest.param(r, t, id=f"{r.id}: {t.name}") for r in RELATIONS for t in r.tests]
)
def test_relation(relation, test):
    assert decided(relation, test) == sorted(test.expect["decided"])


def test_the_bundled_relations_cover_each_kind():
    assert {r.kind for r in RELATIONS} == {"suppress", "aggregate", "explains", "origin"}


def _relation(**changes) -> dict:
    base = {"id": "sup.example", "kind": "suppress", "description": "x", "references": ["https://example.org"],
            "target": {"role": ["cause"]}, "check": {"outside_job_window": {}}, "set": {"role": "context"},
            "note": "outside_window",
            "tests": [{"name": "fires", "input": {"a.txt": "x"}, "expect": {"decided": ["r@n"]}},
                      {"name": "does not", "input": {"a.txt": "x"}, "expect": {"decided": []}}]}
    return {**base, **changes}


def test_a_relation_needs_a_case_that_fires_and_one_that_must_not():
    Relation.model_validate(_relation())
    only_positive = _relation(tests=[{"name": "fires", "input": {"a.txt": "x"}, "expect": {"decided": ["r@n"]}}] * 2)
    with pytest.raises(ValueError, match="one where it must not"):
        Relation.model_validate(only_positive)


@pytest.mark.parametrize("changes, problem", [
    ({"kind": "aggregate"}, "needs `events`"),
    ({"target": {"role": ["culprit"]}}, "role"),
    ({"target": {"domain": ["gpus"]}}, "unknown domain"),
    ({"check": {}}, "needs a `check`"),
    ({"kind": "explains", "cause": {"role": ["cause"]}, "effect": {"role": ["symptom"]}, "check": {}},
     "an explains relation needs a `check`"),  # the evaluator pairs events by its check alone
    ({"set": {"role": "cause"}}, "only demotes"),
    ({"kind": "origin"}, "needs `notices`"),
    ({"keeps": [{"trusted": True}]}, "only an origin relation"),
    ({"last_resort": True}, "valid integer"),  # a tier, not a flag: the tiers' order is explicit
    ({"kind": "origin", "notices": [{"match": {"type": ["x"]}, "category": "cancel"}]}, "unknown category"),
])
def test_a_malformed_relation_is_refused_with_its_reason(changes, problem):
    with pytest.raises(ValueError, match=problem):
        Relation.model_validate(_relation(**changes))


def test_a_check_is_known_and_takes_only_its_own_parameters():
    assert check_problem("suppress", {"outside_job_window": {"before": 60}}, []) is None
    assert "unknown suppress check" in check_problem("suppress", {"no_such_check": {}}, [])
    assert "takes no parameter" in check_problem("suppress", {"outside_job_window": {"silence": 3}}, [])
    assert "unknown job check" in check_problem("aggregate", {}, ["job_is_happy"])
    assert check_problem("aggregate", {"values_differ": {"field": "op"}}, []) is None
    assert "takes no parameter" in check_problem("aggregate", {"repeated_ranks": {"field": "op"}}, [])


def test_explain_prints_the_cause_and_the_relations_that_decided(tmp_path):
    import json
    import subprocess

    from support import sattrib_argv

    (tmp_path / "gpu03").mkdir()
    (tmp_path / "job.json").write_text(json.dumps({"job_id": "77", "state": "FAILED", "start": "2026-12-02T13:00:00Z",
                                                   "end": "2026-12-02T13:30:00Z", "nodes": ["gpu03"]}))
    (tmp_path / "gpu03" / "dmesg.txt").write_text(
        "2026-12-01T09:00:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=python, An uncorrectable double bit error\n"
        "2026-12-02T13:04:06,123456+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=4121, name=python, GPU has fallen off the bus.\n"
        "2026-12-02T13:04:10,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 45, pid=4121, name=python, Ch 00000010\n")
    done = subprocess.run([*sattrib_argv(), "explain", str(tmp_path)], capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert lines[0] == "job 77 FAILED: gpu/gpu_fell_off_bus on gpu03 (confirmed)"
    assert lines[1].startswith("cause   gpu.xid gpu03 gpu03/dmesg.txt:2 ")
    assert "  explains, by rel.xid_burst: 1 event(s)" in lines
    assert any(line.startswith("set aside by sup.outside_job_window: 1 event(s)") for line in lines)
    # then the policy rows that decided the rest, each with what it gave; none of them in the JSON
    policies = [line.split(": ", 1)[0] for line in lines if line.startswith("policy  ")]
    assert policies == ["policy  pol.systemic", "policy  pol.culprits", "policy  pol.quality", "policy  pol.drain"]
    assert "policy  pol.quality: otherwise -> confirmed" in lines
    assert any(line.startswith("policy  pol.drain: a hardware fault") and line.endswith("-> gpu03") for line in lines)
    analysed = subprocess.run([*sattrib_argv(), "analyze", str(tmp_path)], capture_output=True, text=True, check=True)
    assert "pol.quality" not in analysed.stdout


def test_the_order_of_relations_within_a_stratum_does_not_change_any_case(monkeypatch):
    from pathlib import Path

    from slurm_attrib.engine import relate
    from slurm_attrib.engine.pipeline import judge_path

    cases = sorted(p.parent for p in (Path(__file__).parent / "data").glob("*/*/expected.yaml"))

    def judged() -> list:
        return [sorted((e.rule_id, e.order, e.role, e.strength, sorted(e.notes), sorted(e.decided_by)) for e in judge_path(case)[1])
                for case in cases]

    forward = judged()
    monkeypatch.setattr(relate, "relations", lambda rule_dirs=(): tuple(reversed(RELATIONS)))
    assert judged() == forward


def test_after_runs_a_suppression_in_a_later_round_and_refuses_a_cycle_or_an_unknown_id():
    from slurm_attrib.engine.relate import suppress_rounds
    from slurm_attrib.errors import RuleError

    first, second = (Relation.model_validate(_relation(id=f"sup.{name}", after=after))
                     for name, after in (("first", []), ("second", ["sup.first"])))
    assert [[r.id for r in round_] for round_ in suppress_rounds((second, first))] == [["sup.first"], ["sup.second"]]
    looped = Relation.model_validate(_relation(id="sup.first", after=["sup.second"]))
    with pytest.raises(RuleError, match="cycle"):
        suppress_rounds((looped, second))
    with pytest.raises(RuleError, match="no suppress or origin relation"):
        suppress_rounds((second,))


def test_a_suppression_after_an_origin_runs_once_the_roots_are_ranked():
    from slurm_attrib.engine.relate import suppress_rounds

    origin = Relation.model_validate(_relation(id="org.first", kind="origin", target=None, set=None, check={},
                                               notices=[{"match": {"type": ["x"]}, "category": "cancelled"}]))
    late, later, early = (Relation.model_validate(_relation(id=f"sup.{name}", after=after))
                          for name, after in (("late", ["org.first"]), ("later", ["sup.late"]), ("early", [])))
    loaded = (origin, late, later, early)
    assert [[r.id for r in round_] for round_ in suppress_rounds(loaded)] == [["sup.early"]]
    assert [[r.id for r in round_] for round_ in suppress_rounds(loaded, after_roots=True)] == [["sup.late"], ["sup.later"]]


@pytest.mark.parametrize("filler, expected", [(58, ["py.exception@None"]), (61, [])])
def test_an_ignored_exceptions_block_ends_within_its_bound(filler, expected):
    """sup.exception_python_ignored reads the first exception line at most 60 lines below
    `Exception ignored in:`; one further down is not that block's."""
    relation = next(r for r in RELATIONS if r.id == "sup.exception_python_ignored")
    lines = ["Exception ignored in: <function Foo.__del__ at 0x7f00>", *["  x = 1"] * filler, "ValueError: bad value"]
    test = RelationTest(name="bound", input={"slurm-77.out": "\n".join(lines) + "\n"}, expect={"decided": expected})
    assert decided(relation, test) == expected
