"""The single entry point: evidence in, diagnosis out."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from slurm_attrib.engine.diagnose import diagnose
from slurm_attrib.engine.events import anchor_boot_clock, extract_events, last_seen, resolve_nodes
from slurm_attrib.ingest.layout import load_evidence
from slurm_attrib.ingest.timestamps import estimate_boot_times
from slurm_attrib.ingest.types import Evidence
from slurm_attrib.model import Diagnosis
from slurm_attrib.ruleset.loader import load_rules
from slurm_attrib.ruleset.scanner import Scanner


@cache
def _scanner(rule_dirs: tuple[Path, ...]) -> Scanner:
    return Scanner(load_rules(list(rule_dirs)))


def analyze_evidence(evidence: Evidence, rule_dirs: tuple[Path, ...] = ()) -> Diagnosis:
    boot_times = estimate_boot_times(evidence)
    events = extract_events(evidence, _scanner(rule_dirs), boot_times)
    resolve_nodes(events, evidence.job)
    anchor_boot_clock(events)
    fired = sorted({e.rule_id for e in events})
    return diagnose(evidence, events, fired, last_seen(evidence, boot_times))


def load_any(path: Path) -> Evidence:
    """A capture spool job directory (the epilog's bundles) or a plain logs-layout directory."""
    from slurm_attrib.ingest.bundle import is_spool_job_dir, load_spool_job

    return load_spool_job(path) if is_spool_job_dir(path) else load_evidence(path)


def analyze_path(path: Path, rule_dirs: tuple[Path, ...] = ()) -> Diagnosis:
    """Diagnose a logs-layout directory or a capture spool job directory."""
    return analyze_evidence(load_any(Path(path)), tuple(rule_dirs))
