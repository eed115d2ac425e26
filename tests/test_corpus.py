"""Every public excerpt in shared/corpus/dev gives its expected domain (and category where given)."""

import pytest

from support import CORPUS, analyze_case, cases

CASES = cases(CORPUS, "expected.yaml")


@pytest.mark.parametrize("case", CASES)
def test_corpus_case(case):
    expected, diagnosis = analyze_case(CORPUS / case, "expected.yaml")
    assert diagnosis["domain"] == expected["domain"], diagnosis["summary"]
    if expected.get("category"):
        assert diagnosis["category"] == expected["category"], diagnosis["summary"]
    assert sorted(diagnosis["culprit_nodes"]) == sorted(expected.get("culprit_nodes") or [])
    # The corpus excerpts are pasted job output: nothing there may justify a drain.
    assert diagnosis["drain"] == []
