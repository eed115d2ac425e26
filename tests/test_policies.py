"""The policies (rules/policies/*.yaml): the judgement's last decisions as tables, first row
first; each one's own tests through the whole analysis, a site's replacement, and the format."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from slurm_attrib.engine.relation_tests import check_policy, expected_outcome, judged, policy_outcome
from slurm_attrib.ruleset.policies import POLICIES, Policy, load_policy
from slurm_attrib.paths import bundled_dir

LOADED = [load_policy(name) for name in POLICIES]


@pytest.mark.parametrize("policy, test", [pytest.param(p, t, id=f"{p.id}: {t.name}") for p in LOADED for t in p.tests])
def test_policy(policy, test):
    assert policy_outcome(policy, judged(test)[0]) == expected_outcome(policy, test)


def test_every_quality_is_decided_by_some_row_and_tested():
    (quality,) = [p for p in LOADED if p.id == "pol.quality"]
    assert {row.quality for row in quality.rows} == {"confirmed", "likely", "ambiguous", "insufficient"}
    assert {t.expect["quality"] for t in quality.tests} == {"confirmed", "likely", "ambiguous", "insufficient"}


def test_a_site_policy_replaces_the_bundled_one(tmp_path):
    """A site folder's policies/quality.yaml without the hedging row: the hedged Xid is confirmed."""
    raw = yaml.safe_load((bundled_dir("rules") / "policies" / "quality.yaml").read_text(encoding="utf-8"))
    raw["rows"] = [row for row in raw["rows"] if row.get("note") != "the message hedges its own meaning"]
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "quality.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    site = load_policy("quality", (tmp_path,))
    failures = check_policy(site, (tmp_path,))
    assert [f.test for f in failures] == ["a kernel line that hedges its own meaning"]
    assert failures[0].got == ["confirmed"]


@pytest.mark.parametrize("rows, problem", [
    ([{"quality": "confirmed", "when": {"systemic": True}}], "the last row has no `when`"),
    ([{"quality": "likely"}, {"quality": "confirmed"}], "only the last row may decide without `when`"),
    ([{"by": "its_node"}], "a quality row gives a `quality`"),
    ([{"quality": "likely", "when": {"text": "(?=x)"}}, {"quality": "confirmed"}], "RE2 cannot run it"),
    ([{"quality": "sure"}], "quality"),
])
def test_a_malformed_policy_is_refused_with_its_reason(rows, problem):
    raw = {"id": "pol.quality", "decides": "quality", "description": "x", "references": ["https://example.org"], "rows": rows,
           "tests": [{"name": "a", "input": {"a.txt": "x"}, "expect": {"quality": "likely"}},
                     {"name": "b", "input": {"a.txt": "x"}, "expect": {"quality": "confirmed"}}]}
    with pytest.raises(ValidationError, match=problem):
        Policy.model_validate(raw)


def test_a_culprits_row_names_a_known_finder(tmp_path):
    from slurm_attrib.engine.policy import policy
    from slurm_attrib.errors import RuleError

    raw = yaml.safe_load((bundled_dir("rules") / "policies" / "culprits.yaml").read_text(encoding="utf-8"))
    raw["rows"][0]["by"] = "the_usual_suspects"
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "culprits.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    with pytest.raises(RuleError, match="unknown finder.*the_usual_suspects"):
        policy("culprits", (tmp_path,))


def test_a_row_that_passes_on_lets_the_next_one_decide(tmp_path):
    """Without the one-node row, a one-node job's program failure names no node."""
    raw = yaml.safe_load((bundled_dir("rules") / "policies" / "culprits.yaml").read_text(encoding="utf-8"))
    raw["rows"] = [row for row in raw["rows"] if row.get("by") != "the_jobs_node"]
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "culprits.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    failures = check_policy(load_policy("culprits", (tmp_path,)), (tmp_path,))
    assert [(f.test, f.got) for f in failures] == [("a one-node job's program failure names its node", [])]


def test_a_site_decides_how_far_a_fault_must_spread_to_be_shared(tmp_path):
    """A site folder's policies/systemic.yaml that calls two nodes enough: the two-node Xid is shared."""
    raw = yaml.safe_load((bundled_dir("rules") / "policies" / "systemic.yaml").read_text(encoding="utf-8"))
    raw["rows"][-1]["spread"]["nodes"] = 2
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "systemic.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    failures = check_policy(load_policy("systemic", (tmp_path,)), (tmp_path,))
    assert [(f.test, f.got) for f in failures] == [("on two nodes it is theirs", [True])]


@pytest.mark.parametrize("row", [
    {"systemic": True, "spread": {"nodes": 3, "within": 300}},
    {"quality": "likely"},
    {"spread": {"nodes": 1, "within": 300}},
])
def test_a_systemic_row_gives_systemic_or_a_spread(row):
    raw = {"id": "pol.systemic", "decides": "systemic", "description": "x", "references": ["https://example.org"],
           "rows": [row], "tests": [{"name": "a", "input": {"a.txt": "x"}, "expect": {"systemic": True}},
                                    {"name": "b", "input": {"a.txt": "x"}, "expect": {"systemic": False}}]}
    with pytest.raises(ValidationError):
        Policy.model_validate(raw)


# ---------------------------------------------------------------- pol.outcome: no line names a cause

def test_the_outcome_policy_knows_every_state_that_is_a_failure():
    """Its row for a failed job lists FAILED and every state that is itself a cause (rules/_codes.yaml
    slurm_job_state)."""
    from slurm_attrib.ruleset.hooks import code_tables

    causes = {e["name"] for e in code_tables()["slurm_job_state"]["by_number"].values() if e["role"] == "cause"}

    (outcome,) = [p for p in LOADED if p.id == "pol.outcome"]
    (failed,) = [row for row in outcome.rows if row.name.startswith("Slurm says the job failed")]
    assert causes and set(failed.when.job_state) == {"FAILED", *causes}


def test_every_outcome_row_is_tested_by_an_outcome_it_gives():
    (outcome,) = [p for p in LOADED if p.id == "pol.outcome"]
    given = {f"{row.outcome.category}/{row.outcome.quality}" for row in outcome.rows}
    assert given == {t.expect["outcome"] for t in outcome.tests}


def test_without_the_completed_row_a_quiet_completed_job_is_read_from_its_lines(tmp_path):
    """Slurm's COMPLETED row is what makes a node's background noise no failure: without it, a
    completed job whose node logged only slow Lustre replies has no positive end left to read."""
    raw = yaml.safe_load((bundled_dir("rules") / "policies" / "outcome.yaml").read_text(encoding="utf-8"))
    raw["rows"] = [row for row in raw["rows"] if row["name"] != "Slurm says the job completed"]
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "outcome.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    failures = check_policy(load_policy("outcome", (tmp_path,)), (tmp_path,))
    assert ("a completed job whose node logs corrected errors and slow Lustre replies", ["no_evidence/insufficient"]) in [
        (f.test, f.got) for f in failures]


@pytest.mark.parametrize("rows, problem", [
    ([{"quality": "likely"}], "only an outcome row, and every one, gives an `outcome`"),
    ([{"outcome": {"category": "no_evidence", "quality": "insufficient"}, "spread": {"nodes": 2, "within": 1}}],
     "an outcome row gives"),
    ([{"outcome": {"category": "a_mystery", "quality": "likely"}}], "category"),
    ([{"outcome": {"category": "success", "quality": "likely"}, "by": "stalled", "or_next": True}], "the last row"),
])
def test_a_malformed_outcome_policy_is_refused_with_its_reason(rows, problem):
    raw = {"id": "pol.outcome", "decides": "outcome", "description": "x", "references": ["https://example.org"],
           "rows": rows, "tests": [{"name": "a", "input": {"a.txt": "x"}, "expect": {"outcome": "success/likely"}},
                                   {"name": "b", "input": {"a.txt": "x"}, "expect": {"outcome": "success/likely"}}]}
    with pytest.raises(ValidationError, match=problem):
        Policy.model_validate(raw)


def test_an_outcome_row_names_a_known_finder(tmp_path):
    from slurm_attrib.engine.policy import policy
    from slurm_attrib.errors import RuleError

    raw = yaml.safe_load((bundled_dir("rules") / "policies" / "outcome.yaml").read_text(encoding="utf-8"))
    raw["rows"][0]["by"] = "its_node"  # a culprits finder, not an outcome one
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "outcome.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    with pytest.raises(RuleError, match="unknown finder.*its_node"):
        policy("outcome", (tmp_path,))


def test_a_cached_policy_is_built_again_when_the_matcher_it_holds_changes():
    """A policy's pickle holds relations.EventMatch objects: an upgrade that gives the matcher a new
    key must not unpickle the older shape (`'EventMatch' object has no attribute ...`)."""
    from slurm_attrib.ruleset import policies, relations

    assert {policies.__file__, relations.__file__} <= {str(p) for p in policies.MODEL_FILES}


# ---------------------------------------------------------------- pol.drain

@pytest.mark.parametrize("rows, problem", [
    ([{"quality": "likely"}], "only a drain row, and every one, gives `drain`"),
    ([{"drain": False, "by": "its_node"}], "only a drain row, and every one, gives `drain`"),
    ([{"drain": True, "when": {"quality": ["sure"]}}, {"drain": False}], "quality"),
])
def test_a_malformed_drain_policy_is_refused_with_its_reason(rows, problem):
    raw = {"id": "pol.drain", "decides": "drain", "description": "x", "references": ["https://example.org"],
           "rows": rows, "tests": [{"name": "a", "input": {"a.txt": "x"}, "expect": {"drain": []}},
                                   {"name": "b", "input": {"a.txt": "x"}, "expect": {"drain": []}}]}
    with pytest.raises(ValidationError, match=problem):
        Policy.model_validate(raw)


def test_a_site_drain_table_cannot_drain_on_lines_a_user_wrote(tmp_path):
    """A site's pol.drain that drains every cause still drains nothing for a fault only the job's
    output claims: the trust floor is the engine's, not the table's."""
    raw = yaml.safe_load((bundled_dir("rules") / "policies" / "drain.yaml").read_text(encoding="utf-8"))
    raw["rows"] = [{"name": "always", "drain": True}]
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "drain.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    failures = {f.test: f.got for f in check_policy(load_policy("drain", (tmp_path,)), (tmp_path,))}
    assert "the same fault claimed only in the job's output" not in failures  # still no drain
    assert failures == {"a kernel line that hedges its own meaning is not sure enough": ["gpu03"]}


def test_a_harmless_message_does_not_hide_an_error_only_the_second_look_reads(tmp_path):
    """The outcome row of harmless messages lets the second look overturn it (`second_look`): every
    TensorFlow job prints its CPU-feature notice, which says nothing of the error after it."""
    from slurm_attrib.engine.pipeline import judge_path

    notice = ("2026-12-02 13:00:00.000000: I tensorflow/core/platform/cpu_feature_guard.cc:193] This TensorFlow binary is "
              "optimized with oneAPI Deep Neural Network Library (oneDNN) to use the following CPU instructions in "
              "performance-critical operations:  AVX2 FMA\n")
    (tmp_path / "slurm-77.out").write_text(notice + "Fatal error: the solver diverged at step 12, aborting\n")
    diagnosis, _ = judge_path(tmp_path)
    assert (diagnosis.category, diagnosis.quality) == ("app_exception", "insufficient")
    (tmp_path / "slurm-77.out").write_text(notice)
    diagnosis, _ = judge_path(tmp_path)
    assert (diagnosis.category, diagnosis.quality) == ("success", "likely")
