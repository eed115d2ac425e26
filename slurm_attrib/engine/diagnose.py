"""Choose the origin of a failure among the events and write the diagnosis."""

from __future__ import annotations

from collections.abc import Callable

from slurm_attrib.engine import assemble, reconcile, relate
from slurm_attrib.engine.checks import JudgeContext, stalled_progress, tolerance
from slurm_attrib.engine.culprits import CulpritContext
from slurm_attrib.engine.events import Event
from slurm_attrib.engine.explain import actions_for, summary_for
from slurm_attrib.engine.policy import culprits_of, drains_of, outcome_of, quality_row, systemic_of
from slurm_attrib.engine.timefmt import iso
from slurm_attrib.engine.verdict import Verdict
from slurm_attrib.ingest.types import Evidence, JobContext
from slurm_attrib.model import CoverageItem, Diagnosis
from slurm_attrib.provenance import Provenance
from slurm_attrib.vocab import DRAINABLE_DOMAINS


def judge(evidence: Evidence, events: list[Event], rules_fired: list[str], last_seen: dict[str, float],
          rule_dirs: tuple = ()) -> tuple[Diagnosis, list[Event]]:
    """The diagnosis, and the events as the judgement left them (roles, edges, decided_by)."""
    job = evidence.job
    events = events + reconcile.job_state_events(evidence)
    context = JudgeContext(job, events, kernel_logged=frozenset(
        f.node for f in evidence.files if f.provenance is Provenance.KERNEL and f.node), evidence=evidence)
    relate.suppress(events, context, rule_dirs)
    relate.aggregate(events, context, rule_dirs)
    relate.explain(events, context, rule_dirs)
    relate.rank_roots(events, context, rule_dirs)
    verdict = _judge(events, evidence, last_seen, context, rule_dirs)
    drains = drains_of(verdict, job, events, rule_dirs)
    symptoms = assemble.symptom_groups(events)
    diagnosis = Diagnosis(
        domain=verdict.domain,
        category=verdict.category,
        culprit_nodes=verdict.culprits,
        quality=verdict.quality,
        drain=drains,
        evidence=assemble.evidence_lines(events, verdict, {f.rel: f.node for f in evidence.files}),
        summary=summary_for(verdict, symptoms, job),
        outcome=assemble.outcome(job),
        cause=assemble.cause_of(verdict.primary, verdict) if verdict.primary else assemble.cause_of_hang(verdict),
        alternatives=[assemble.cause_of(e, verdict) for e in assemble.alternatives(events, verdict)],
        systemic=verdict.systemic,
        gpus=assemble.gpus(events, verdict, evidence),
        links=assemble.links(events),
        symptoms=symptoms,
        timeline=assemble.timeline(events, verdict),
        actions=actions_for(verdict, drains),
        coverage=[CoverageItem(**vars(c)) for c in evidence.coverage],
        rules_fired=rules_fired,
        notes=verdict.notes,
        decided_by=_decided_by(verdict, events),
    )
    diagnosis._policy_rows = list(verdict.rows)
    diagnosis._second_look = verdict.second_look
    return diagnosis, events


def _decided_by(verdict: Verdict, events: list[Event]) -> list[str]:
    """The relations that shaped the cause: those that changed it, then those that made its symptoms."""
    if verdict.primary is None:
        return []
    found = list(verdict.primary.decided_by)
    for event in events:
        if event.explained_by is verdict.primary:
            found += event.decided_by
    return list(dict.fromkeys(found))


def _judge(events: list[Event], evidence: Evidence, last_seen: dict[str, float], context: JudgeContext,
           rule_dirs: tuple) -> Verdict:
    job, nodes_without_logs = evidence.job, evidence.nodes_without_logs()
    candidates = [e for e in events if e.role == "cause"] or relate.last_resort_causes(events, context, rule_dirs)
    if not candidates:
        return outcome_of(events, evidence, rule_dirs)
    primary, rivals = _choose_primary(candidates)
    primary.chosen = True
    relate.explain(events, context, rule_dirs, link=True)
    verdict = Verdict(domain=primary.domain, category=primary.category or "no_evidence", quality="likely")
    verdict.primary, verdict.rivals = primary, rivals
    verdict.systemic = systemic_of(verdict, candidates, job, events, rule_dirs)
    verdict.culprits = culprits_of(CulpritContext(verdict, events, job, nodes_without_logs, last_seen), rule_dirs)
    row = quality_row(verdict, job, events, rule_dirs)
    verdict.quality = row.quality
    if row.note:
        verdict.notes.append(row.note)
    if "inferred" in primary.notes:  # the cause was inferred from a pattern of lines: say which
        verdict.notes.append(primary.notes["inferred"])
    if "hint" in primary.notes:  # what the cause's reading adds (an origin relation's `hints`, a code's)
        verdict.notes.append(primary.notes["hint"])
    if primary.domain == "scheduler":
        verdict.notes += _stall_before_the_end(events, job)
    if primary.fallback:
        verdict.notes.append("no rule knows this failure's wording: the cause is the nearest lead a generic rule found, not a finding")
    if primary.time is None and primary.type != "job_state":
        verdict.notes.append("the cause has no wall-clock time (seconds since boot with no anchor, or no time at all): it cannot be placed in the job's window")
    return verdict


STALL_NOTED_AFTER = 600.0  # seconds without progress before the scheduler's end that make a stall worth saying


def _stall_before_the_end(events: list[Event], job: JobContext) -> list[str]:
    """A time limit or cancel that ended a run whose progress had stopped short long before: the
    user's question is why it stopped, not that the scheduler ended it."""
    stalled = stalled_progress(events)
    if stalled is None or stalled.time is None or stalled.time_inherited or job.end is None:
        return []
    idle = job.end - stalled.time
    if idle < STALL_NOTED_AFTER:
        return []
    return [f"progress had stopped at {stalled.fields['done']}/{stalled.fields['total']} at {iso(stalled.time)} "
            f"({stalled.source}:{stalled.line}), {idle / 60:.0f} min before the job ended: the run stalled first"]


def _choose_primary(candidates: list[Event]) -> tuple[Event, list[Event]]:
    """The cause that ranks first by rank_key among the specific ones (strength 2 or 3, when there
    are any); the independent faults that tie with it on the moment and strength are its rivals."""
    pool = [c for c in candidates if c.strength >= 2] or candidates
    key = rank_key(pool)
    primary = min(pool, key=key)
    ties = [c for c in pool if c is not primary and key(c)[:3] == key(primary)[:3]]
    return primary, _independent_rivals(primary, sorted(ties, key=key))


def rank_key(pool: list[Event]) -> Callable[[Event], tuple]:
    """The one sort key of the roots (the causes no relation explained), most telling first:

    1. at the first moment: timed within clock skew (checks.tolerance) of the earliest timed
       candidate, or untimed (a line with no time cannot be shown to be later);
    2. the strongest (the rule's strength: specific before generic);
    3. timed before untimed, at equal strength;
    4. trusted before untrusted: what a user cannot have written first;
    5. the earliest, then the first in line order (Event.sort_key).
    Which of two faults printed together is the other's symptom is no matter of order but of
    knowledge: a relation says it (a GPU off the bus and its root port's surprise down)."""
    timed = [c for c in pool if c.time is not None]
    first = min(timed, key=lambda c: c.sort_key) if timed else None

    def key(c: Event) -> tuple:
        at_first_moment = c.time is None or c.time - first.time <= tolerance(first, c)
        return (not at_first_moment, -c.strength, c.time is None, not c.trusted, c.sort_key)

    return key


# Domains whose faults on two nodes are independent of each other (a GPU, a link, a host, a
# kernel OOM kill); the kernel must report both (trusted) for them to be rivals.
RIVAL_DOMAINS = (*DRAINABLE_DOMAINS, "application")


def _independent_rivals(primary: Event, others: list[Event]) -> list[Event]:
    """Faults on other nodes, reported by their kernels, that timing cannot order against the primary."""
    if primary.domain not in RIVAL_DOMAINS or primary.node is None or not primary.trusted:
        return []
    rivals: dict[str, Event] = {}
    for other in others:
        if other.domain in RIVAL_DOMAINS and other.trusted and other.node and other.node != primary.node:
            if other.time is None and other.order[0] == primary.order[0]:
                continue  # same file, ordered by lines
            rivals.setdefault(other.node, other)
    return [rivals[n] for n in sorted(rivals)]
