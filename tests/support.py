"""Helpers shared by the test modules (importable as `support`; see pythonpath in pyproject)."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "dev_corpus"


def sattrib_argv() -> list[str]:
    """Run the CLI the way users do: the installed console script when present."""
    script = Path(sys.executable).with_name("sattrib")
    return [str(script)] if script.exists() else [sys.executable, "-m", "slurm_attrib"]
