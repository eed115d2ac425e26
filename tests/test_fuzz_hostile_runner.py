"""benchmarks/fuzz_hostile.py works: it counts every input, exits by its failures, saves what fails
and kills an input that runs past its timeout; and 200 of its inputs give no failure (issue 18)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_hostile.py"
KINDS = ("ok", "input-error", "crash", "hang", "memory", "drain")


def fuzz(out: Path, *options: str) -> tuple[subprocess.CompletedProcess, dict[str, int]]:
    """Run the runner; (the process, the counts of its total row by outcome)."""
    result = subprocess.run([sys.executable, str(RUNNER), "--out", str(out), *options],
                            capture_output=True, text=True, timeout=600)
    assert "Traceback" not in result.stderr, result.stderr
    total = next(line for line in result.stdout.splitlines() if line.startswith("| total"))
    cells = [cell.strip().replace(",", "") for cell in total.strip("|").split("|")]
    return result, dict(zip(KINDS, map(int, cells[1:1 + len(KINDS)])))


@pytest.fixture(scope="module")
def two_hundred(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzz")
    return out, *fuzz(out, "--count", "200", "--jobs", "2", "--timeout", "20")


def test_the_runner_counts_every_input_and_exits_by_its_failures(two_hundred):
    out, result, counts = two_hundred
    assert re.search(r"^fuzz_hostile: 200 inputs \(seed 0, 2 workers", result.stdout, re.M), result.stdout
    assert sum(counts.values()) == 200
    failures = sum(counts[k] for k in ("crash", "hang", "memory", "drain"))
    assert result.returncode == (1 if failures else 0)
    saved = sorted(out.glob("*/case.json"))
    assert bool(saved) == bool(failures)
    for case in saved:
        assert json.loads(case.read_text())["replay"].endswith(f"--seed 0 --replay {case.parent.name.split('-')[-1]}")


def test_two_hundred_hostile_inputs_give_no_failure(two_hundred):
    out, result, counts = two_hundred
    assert result.returncode == 0, result.stdout


def test_an_input_past_its_timeout_is_a_hang_and_the_run_goes_on(tmp_path):
    result, counts = fuzz(tmp_path, "--count", "3", "--jobs", "1", "--timeout", "0.001")
    assert counts["hang"] == 3 and result.returncode == 1
    assert len(list(tmp_path.glob("hang-*/case.json"))) == 3
