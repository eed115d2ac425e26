"""Multi-node jobs written from the contract alone, by someone who never read this code."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from support import sattrib_argv

DATA = Path(__file__).resolve().parent / "data" / "blind_scenarios"
CASES = sorted(p.name for p in DATA.iterdir() if (p / "truth.yaml").exists())


@pytest.mark.parametrize("case", CASES)
def test_blind_scenario(case):
    truth = yaml.safe_load((DATA / case / "truth.yaml").read_text())
    result = subprocess.run([*sattrib_argv(), "analyze", str(DATA / case)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    categories = truth.get("category_allowed") or [truth["category"]]
    assert got["domain"] == truth["domain"] and got["category"] in categories, got["summary"]
    assert sorted(got["culprit_nodes"]) == sorted(truth["culprit_nodes"] or []), got["summary"]
    assert got["quality"] in truth["quality_allowed"]
    drains = [sorted(truth.get("drain_nodes") or []), *(sorted(d) for d in truth.get("drain_alternatives") or [])]
    assert sorted(d["node"] for d in got["drain"]) in drains
