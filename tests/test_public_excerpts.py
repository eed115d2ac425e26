"""Public log excerpts collected after the rules were written: domain and category as labelled."""

from pathlib import Path

import pytest

from support import analyze_case, cases

DATA = Path(__file__).resolve().parent / "data" / "public_excerpts"
CASES = cases(DATA, "expected.yaml")


@pytest.mark.parametrize("case", CASES)
def test_public_excerpt(case):
    expected, diagnosis = analyze_case(DATA / case, "expected.yaml")
    assert (diagnosis["domain"], diagnosis["category"]) == (expected["domain"], expected["category"]), diagnosis["summary"]
    culprits = expected.get("culprit_nodes") or []
    for node in culprits:
        assert node in diagnosis["culprit_nodes"], diagnosis["summary"]
    node_folders = [p for p in (DATA / case).iterdir() if p.is_dir()]
    drained = [d["node"] for d in diagnosis["drain"]]
    # A paste in the job-level folder never justifies a drain; a node's own kernel log may.
    assert drained == [] if not node_folders else set(drained) <= set(culprits)
