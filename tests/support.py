"""Helpers shared by the test modules (importable as `support`; see pythonpath in pyproject)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "dev"


def sattrib_argv() -> list[str]:
    """Run the CLI the way users do: the installed console script when present."""
    script = Path(sys.executable).with_name("sattrib")
    return [str(script)] if script.exists() else [sys.executable, "-m", "slurm_attrib"]


def require_corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"dev corpus not found at {CORPUS}")
    return CORPUS


def cases(folder: Path, expectation: str) -> list[str]:
    """Names of the case folders below `folder` that hold an `expectation` file."""
    return sorted(p.name for p in folder.iterdir() if (p / expectation).exists()) if folder.is_dir() else []


def analyze_case(folder: Path, expectation: str) -> tuple[dict, dict]:
    """(expected, diagnosis): the case's expectation file and `sattrib analyze` JSON for it."""
    expected = yaml.safe_load((folder / expectation).read_text())
    result = subprocess.run([*sattrib_argv(), "analyze", str(folder)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return expected, json.loads(result.stdout)
