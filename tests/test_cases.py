"""Every case folder below tests/data (a folder holding an expected.yaml) is analysed in-process,
its JSON dumped as `sattrib analyze` prints it, and held to its expectation; the format is in
tests/data/README.md.  One test runs the CLI itself on a few cases and asks for the same bytes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from slurm_attrib.cli import render_json
from slurm_attrib.engine.pipeline import analyze_path
from support import sattrib_argv

DATA = Path(__file__).resolve().parent / "data"
REQUIRED = {"domain", "category", "culprit_nodes"}
CHECKED = REQUIRED | {"category_allowed", "culprit_match", "quality_allowed", "drain_nodes", "drain_alternatives",
                      "symptoms", "known_miss", "outcome_state"}
PROSE = {"source", "how_established", "label_confidence", "note"}  # for the reader; not checked
CASES = sorted(str(p.parent.relative_to(DATA)) for p in DATA.glob("*/*/expected.yaml"))


def expectation(case: str) -> dict:
    return yaml.safe_load((DATA / case / "expected.yaml").read_text(encoding="utf-8"))


def in_process_json(case: str) -> str:
    return render_json(analyze_path(DATA / case))


def as_param(case: str):
    reason = expectation(case).get("known_miss")
    return pytest.param(case, marks=pytest.mark.xfail(reason=reason, strict=True)) if reason else case


def test_expectation_files_are_well_formed():
    """Checked apart from the cases: a known miss's xfail would swallow a typo in its own file."""
    assert len(CASES) > 600
    for case in CASES:
        expected = expectation(case)
        assert REQUIRED <= set(expected) <= CHECKED | PROSE, (case, sorted(set(expected) - CHECKED - PROSE))
        assert expected.get("culprit_match", "includes") in ("includes", "exact"), case
        assert "drain_alternatives" not in expected or "drain_nodes" in expected, case
        for symptom in expected.get("symptoms") or []:
            assert set(symptom) == {"rule", "explained_by"}, case
        if "known_miss" in expected:
            assert isinstance(expected["known_miss"], str) and expected["known_miss"].strip(), case


@pytest.mark.parametrize("case", [as_param(case) for case in CASES])
def test_case(case):
    expected, got = expectation(case), json.loads(in_process_json(case))
    summary = got["summary"]
    assert got["domain"] == expected["domain"], summary
    assert got["category"] in [expected["category"], *expected.get("category_allowed", [])], summary
    culprits = expected["culprit_nodes"] or []
    if expected.get("culprit_match", "includes") == "exact":
        assert sorted(got["culprit_nodes"]) == sorted(culprits), summary
    else:
        assert set(culprits) <= set(got["culprit_nodes"]), summary
    if "quality_allowed" in expected:
        assert got["quality"] in expected["quality_allowed"], summary
    if "outcome_state" in expected:
        assert got["outcome"]["state"] == expected["outcome_state"], got["outcome"]
    drained = sorted(d["node"] for d in got["drain"])
    if "drain_nodes" in expected:
        allowed = [sorted(expected["drain_nodes"]), *(sorted(d) for d in expected.get("drain_alternatives") or [])]
        assert drained in allowed, summary
    elif any(p.is_dir() for p in (DATA / case).iterdir()):
        assert set(drained) <= set(culprits), summary  # a node's own kernel log may drain that node
    else:
        assert drained == [], summary  # job output alone never justifies a drain
    groups = {(group["rule"], group["explained_by"]) for group in got["symptoms"]}
    for symptom in expected.get("symptoms") or []:
        assert (symptom["rule"], symptom["explained_by"]) in groups, sorted(groups, key=str)


CLI_CASES = [
    "blind_scenarios/01-xid79-fell-off-bus",  # gzip, 8 node folders, a drain
    "blind_scenarios/b2-06-host-oom-pernode-kernlog",  # CRLF job output
    "dev_corpus/036-returnn-cn234-gpu-lost-pcie-aer-hang",
    "public_excerpts/001-nvsentinel-multiline-fallen-off-bus-indented",
    "public_excerpts_round12/2105-lumi-rocm-smi-login-node-harmless",
]


@pytest.mark.parametrize("case", CLI_CASES)
def test_cli_prints_the_in_process_json(case):
    result = subprocess.run([*sattrib_argv(), "analyze", str(DATA / case)], capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == in_process_json(case).encode()
