"""Helpers shared by the test modules (importable as `support`; see pythonpath in pyproject)."""

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "dev_corpus"


def sattrib_argv() -> list[str]:
    """Run the CLI the way users do: the installed console script when present."""
    script = Path(sys.executable).with_name("sattrib")
    return [str(script)] if script.exists() else [sys.executable, "-m", "slurm_attrib"]


def epilog_test_config(work: Path) -> dict:
    """The node epilog's config for a test cluster whose spools are under `work`: only the job's
    own output is read (this machine's kernel log and journal are no job's)."""
    return {"spool": str(work / "spool"), "local_spool": str(work / "local"), "epilog_timeout": 8,
            "sources": [{"name": n, "kind": k, "enabled": False} for n, k in
                        (("kernel", "kernel"), ("syslog", "syslog"), ("nvidia_smi", "nvidia_smi"),
                         ("flight_recorder", "app"))]}


def wait_for_diagnosis(results: Path, job: str, want=lambda diagnosis: True, timeout: float = 30.0) -> dict:
    """The job's stored diagnosis (<results>/<job>/diagnosis.json) once it holds for `want`."""
    path = Path(results) / str(job) / "diagnosis.json"
    end = time.monotonic() + timeout
    found: dict = {}
    while time.monotonic() < end:
        if path.is_file():
            found = json.loads(path.read_text())
            if want(found):
                return found
        time.sleep(0.2)
    raise AssertionError(f"no such diagnosis of job {job} after {timeout} s: {found.get('summary')} {found.get('coverage')}")
