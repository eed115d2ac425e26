"""The single entry point: evidence in, diagnosis out."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from slurm_attrib.collection import no_cycle_collection
from slurm_attrib.engine.diagnose import judge
from slurm_attrib.engine.events import Event, anchor_boot_clock, date_onsets, join_minutes, resolve_nodes, scan_evidence
from slurm_attrib.ingest.hostmap import ip_host_pairs
from slurm_attrib.ingest.layout import load_evidence, load_file
from slurm_attrib.ingest.types import Evidence
from slurm_attrib.model import Diagnosis
from slurm_attrib.ruleset.loader import load_rules
from slurm_attrib.ruleset.scanner import Scanner


@cache
def _scanner(rule_dirs: tuple[Path, ...], second_look: bool = False) -> Scanner:
    """The rules proper, or (second look) those and the fallback rules."""
    rules = load_rules(list(rule_dirs))
    return Scanner(rules if second_look else [r for r in rules if not r.event.fallback])


def warm_scanners(rule_dirs: tuple[Path, ...] = ()) -> None:
    """Compile both scanners now, so that analyses forked from this process inherit them."""
    _scanner(rule_dirs)
    _scanner(rule_dirs, second_look=True)


def analyze_evidence(evidence: Evidence, rule_dirs: tuple[Path, ...] = ()) -> Diagnosis:
    return judge_evidence(evidence, rule_dirs)[0]


def judge_evidence(evidence: Evidence, rule_dirs: tuple[Path, ...] = ()) -> tuple[Diagnosis, list[Event]]:
    """The rules proper first; when they find a failure but no origin (`no_evidence`), or their
    verdict is one an outcome row lets the second look overturn (`second_look`: only messages known
    to be harmless), a second look with the fallback rules too, whose generic wordings can only
    give a lead.  With the diagnosis, the events as the judgement left them (`sattrib explain`, the
    relations' tests).
    Without cycle collection passes (collection.py): they cost a fifth of a large job's analysis."""
    with no_cycle_collection():
        judged = _analyze(evidence, _scanner(rule_dirs), rule_dirs)
        diagnosis = judged[0]
        if (diagnosis.category != "no_evidence" and not diagnosis._second_look
                and not _inferred_from_the_ending(judged[1], rule_dirs)):
            return judged
        return _analyze(evidence, _scanner(rule_dirs, second_look=True), rule_dirs)


def _inferred_from_the_ending(events: list[Event], rule_dirs: tuple[Path, ...]) -> bool:
    """The cause is only how the job ended (a relation that yields to leads promoted it): the
    second look may find what the ending followed from (srun's failed task after the program's
    own error line, which only a generic rule reads)."""
    from slurm_attrib.engine.relate import relations

    yielding = {r.id for r in relations(rule_dirs) if r.yields_to_leads}
    return any(e.role == "cause" and yielding.intersection(e.decided_by) for e in events)


def judge_path(path: Path, rule_dirs: tuple[Path, ...] = ()) -> tuple[Diagnosis, list[Event]]:
    return judge_evidence(load_any(Path(path)), tuple(rule_dirs))


def _analyze(evidence: Evidence, scanner: Scanner, rule_dirs: tuple[Path, ...]) -> tuple[Diagnosis, list[Event]]:
    # One pass, one file at a time (large files block by block): events, boot times, last seen.
    scanned = scan_evidence(evidence, scanner)
    events = scanned.events
    # hostmap reads only small files (streamed ones are larger): do not read those again.
    held = Evidence(evidence.root, evidence.job, [f for f in evidence.files if not f.streamed], evidence.coverage)
    resolve_nodes(events, evidence.job, ip_host_pairs(held))
    anchor_boot_clock(events, scanned.anchored)
    join_minutes(events, scanned.minutes, evidence.job)
    date_onsets(events, scanned.last_seen)
    fired = sorted({e.rule_id for e in events})
    return judge(evidence, events, fired, scanned.last_seen, rule_dirs)


def load_any(path: Path, vouch: bool = True) -> Evidence:
    """A capture spool job directory (the epilog's bundles), a plain logs-layout directory, or one
    job-level file (a logs layout holding just it).  vouch=False: no file in it is the operator's,
    whoever owns it (an upload): nothing acts."""
    from slurm_attrib.ingest.bundle import is_spool_job_dir, load_spool_job

    with no_cycle_collection():
        if Path(path).is_file():
            return load_file(path)
        return load_spool_job(path, vouch) if is_spool_job_dir(path) else load_evidence(path, vouch)


def analyze_path(path: Path, rule_dirs: tuple[Path, ...] = (), config=None) -> Diagnosis:
    """Diagnose a logs-layout directory or a capture spool job directory; with a config, also what
    its connectors (Loki, Prometheus) hold for the job's nodes and window."""
    evidence = load_any(Path(path))
    if config is not None and (config.loki.url or config.prometheus.url):
        # Imported only then: the connectors' HTTP client (urllib, ssl) costs ~8 ms of a small job's start-up.
        from slurm_attrib.connectors import gather

        gather(evidence, config)
    return analyze_evidence(evidence, tuple(rule_dirs))
