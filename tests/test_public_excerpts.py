"""Public log excerpts collected after the rules were written: domain and category as labelled."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from support import sattrib_argv

DATA = Path(__file__).resolve().parent / "data" / "public_excerpts"
CASES = sorted(p.name for p in DATA.iterdir() if (p / "expected.yaml").exists())


@pytest.mark.parametrize("case", CASES)
def test_public_excerpt(case):
    expected = yaml.safe_load((DATA / case / "expected.yaml").read_text())
    result = subprocess.run([*sattrib_argv(), "analyze", str(DATA / case)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    diagnosis = json.loads(result.stdout)
    assert (diagnosis["domain"], diagnosis["category"]) == (expected["domain"], expected["category"]), diagnosis["summary"]
    culprits = expected.get("culprit_nodes") or []
    for node in culprits:
        assert node in diagnosis["culprit_nodes"], diagnosis["summary"]
    node_folders = [p for p in (DATA / case).iterdir() if p.is_dir()]
    drained = [d["node"] for d in diagnosis["drain"]]
    # A paste in the job-level folder never justifies a drain; a node's own kernel log may.
    assert drained == [] if not node_folders else set(drained) <= set(culprits)
