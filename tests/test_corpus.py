"""Every public excerpt in shared/corpus/dev gives its expected domain (and category where given)."""

import json
import subprocess

import pytest
import yaml

from support import CORPUS, sattrib_argv

CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "expected.yaml").exists()) if CORPUS.is_dir() else []


@pytest.mark.parametrize("case", CASES)
def test_corpus_case(case):
    expected = yaml.safe_load((CORPUS / case / "expected.yaml").read_text())
    result = subprocess.run([*sattrib_argv(), "analyze", str(CORPUS / case)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    diagnosis = json.loads(result.stdout)
    assert diagnosis["domain"] == expected["domain"], diagnosis["summary"]
    if expected.get("category"):
        assert diagnosis["category"] == expected["category"], diagnosis["summary"]
    assert sorted(diagnosis["culprit_nodes"]) == sorted(expected.get("culprit_nodes") or [])
    # The corpus excerpts are pasted job output: nothing there may justify a drain.
    assert diagnosis["drain"] == []
