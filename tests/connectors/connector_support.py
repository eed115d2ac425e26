"""Helpers of the connector tests: simulated jobs split between local files and a server, and the
throw-away Prometheus of contrib/testprom.  (No conftest.py here: other test folders import theirs
by name.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from slurm_attrib.simulate.job import Job
from slurm_attrib.simulate.scenarios import SCENARIOS

REPO = Path(__file__).resolve().parents[2]
TESTPROM = REPO / "contrib" / "testprom"


def simulated(name: str, out: Path, seed: int = 3, nodes: int = 4) -> Job:
    """Write scenario `name` as a logs-layout job into `out`; the Job keeps every line with its time."""
    job = Job(name, nodes, 4, seed)
    job.baseline()
    SCENARIOS[name].build(job)
    job.write(out)
    return job


def diagnose(path: Path, config=None) -> dict:
    from slurm_attrib.engine.pipeline import analyze_path

    return analyze_path(path, (), config).model_dump(mode="json")


def verdict(diagnosis: dict) -> dict:
    """What must not depend on where the lines were read from."""
    return {
        "domain": diagnosis["domain"],
        "category": diagnosis["category"],
        "culprit_nodes": diagnosis["culprit_nodes"],
        "quality": diagnosis["quality"],
        "drain": [d["node"] for d in diagnosis["drain"]],
        "gpus": [(g["node"], g["pci_bus_id"], g["xid"]) for g in diagnosis.get("gpus") or []],
    }


def cause_lines(diagnosis: dict) -> list[dict]:
    return [e for e in diagnosis["evidence"] if e["role"] == "cause"]


def drop_lines(job_dir: Path, *needles: str) -> int:
    """Remove, from every node's files, the lines holding any of `needles`; how many went."""
    dropped = 0
    for path in sorted(job_dir.glob("*/*")):
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if not any(n in line for n in needles)]
        dropped += len(lines) - len(kept)
        path.write_text("".join(kept), encoding="utf-8")
    return dropped


class PrometheusServer:
    """contrib/testprom/start.sh over an OpenMetrics file; stop() removes it."""

    def __init__(self, openmetrics: str):
        self.dir = tempfile.mkdtemp(prefix="sattrib-testprom-", dir="/tmp")
        shutil.rmtree(self.dir)
        source = Path(tempfile.mkstemp(prefix="sattrib-om-", suffix=".om")[1])
        source.write_text(openmetrics, encoding="utf-8")
        try:
            proc = subprocess.run([str(TESTPROM / "start.sh"), self.dir, str(source)], capture_output=True, text=True,
                                  timeout=120, stdin=subprocess.DEVNULL)
        finally:
            source.unlink()
        if proc.returncode == 2:
            pytest.skip(f"prometheus tests: SKIPPED — {proc.stderr.strip().splitlines()[-1]}")
        if proc.returncode != 0:
            self.stop()
            pytest.fail(f"contrib/testprom/start.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}", pytrace=False)
        self.url = proc.stdout.strip().splitlines()[-1]

    def stop(self) -> None:
        subprocess.run([str(TESTPROM / "stop.sh"), self.dir], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)


class OpenMetrics:
    """Series written as OpenMetrics text for promtool: one family after another, samples in time order."""

    def __init__(self):
        self.families: dict[str, tuple[str, dict[str, list[tuple[float, float]]]]] = {}

    def series(self, metric: str, kind: str, labels: dict[str, str], samples: list[tuple[float, float]]) -> None:
        shown = ",".join(f'{k}={json.dumps(v)}' for k, v in labels.items())
        self.families.setdefault(metric, (kind, {}))[1].setdefault(shown, []).extend(samples)

    def text(self) -> str:
        out = []
        for metric, (kind, series) in self.families.items():
            out.append(f"# TYPE {metric} {kind}")
            for shown, samples in series.items():
                out += [f"{metric}{{{shown}}} {_num(v)} {t:.3f}" for t, v in sorted(samples)]
        return "\n".join(out) + "\n# EOF\n"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def scrapes(start: float, end: float, every: float = 15.0) -> list[float]:
    """Scrape times over [start, end], aligned to `every` seconds."""
    first = (int(start // every) + 1) * every
    return [first + i * every for i in range(int((end - first) // every) + 1)]


def step_samples(times: list[float], changes: list[tuple[float, float]], initial: float = 0.0) -> list[tuple[float, float]]:
    """A series scraped at `times` whose value becomes v at each (t, v) of `changes`."""
    out = []
    for at in times:
        value = initial
        for t, v in changes:
            if t <= at:
                value = v
        out.append((at, value))
    return out
