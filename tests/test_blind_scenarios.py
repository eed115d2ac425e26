"""Multi-node jobs written from the contract alone, by someone who never read this code."""

from pathlib import Path

import pytest

from support import analyze_case, cases

DATA = Path(__file__).resolve().parent / "data" / "blind_scenarios"
CASES = cases(DATA, "truth.yaml")


@pytest.mark.parametrize("case", CASES)
def test_blind_scenario(case):
    truth, got = analyze_case(DATA / case, "truth.yaml")
    categories = truth.get("category_allowed") or [truth["category"]]
    assert got["domain"] == truth["domain"] and got["category"] in categories, got["summary"]
    assert sorted(got["culprit_nodes"]) == sorted(truth["culprit_nodes"] or []), got["summary"]
    assert got["quality"] in truth["quality_allowed"]
    drains = [sorted(truth.get("drain_nodes") or []), *(sorted(d) for d in truth.get("drain_alternatives") or [])]
    assert sorted(d["node"] for d in got["drain"]) in drains
