"""Choose the origin of a failure among the events and write the diagnosis."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from slurm_attrib.engine import correlate
from slurm_attrib.engine.events import Event
from slurm_attrib.engine.explain import actions_for, drain_reason, summary_for
from slurm_attrib.engine.timefmt import iso
from slurm_attrib.ingest.types import Evidence, JobContext
from slurm_attrib.model import (
    Cause,
    CoverageItem,
    Diagnosis,
    Drain,
    EvidenceLine,
    Gpu,
    Outcome,
    SymptomGroup,
    TimelineEntry,
)
from slurm_attrib.vocab import DRAINABLE_DOMAINS

# Job states that are themselves the origin (Slurm decided, or Slurm saw the node die).
STATE_CAUSES = {
    "TIMEOUT": ("scheduler", "time_limit"),
    "DEADLINE": ("scheduler", "time_limit"),
    "PREEMPTED": ("scheduler", "preempted"),
    "CANCELLED": ("scheduler", "cancelled"),
    "NODE_FAIL": ("host", "node_failure"),
    "BOOT_FAIL": ("host", "node_failure"),
    "OUT_OF_MEMORY": ("application", "host_oom"),
}
FAILED_STATES = {"FAILED", *STATE_CAUSES}
SYSTEMIC_MIN_NODES = 3
MAX_DRAIN_NODES = 2
MAX_SYMPTOM_LINES = 40
MAX_CONTEXT_LINES = 10


@dataclass
class Verdict:
    domain: str
    category: str
    quality: str
    culprits: list[str] = field(default_factory=list)
    primary: Event | None = None
    rivals: list[Event] = field(default_factory=list)
    systemic: bool = False
    notes: list[str] = field(default_factory=list)


# Scheduler causes each job state agrees with; under any other known state they are step teardown.
SCHEDULER_STATES = {
    "time_limit": {"TIMEOUT", "DEADLINE"},
    "preempted": {"PREEMPTED", "REQUEUED"},
    "cancelled": {"CANCELLED"},
}


def diagnose(evidence: Evidence, events: list[Event], rules_fired: list[str], last_seen: dict[str, float]) -> Diagnosis:
    job = evidence.job
    events = events + _job_state_events(evidence)
    _date_node_failures(events, last_seen)
    correlate.apply_job_window(events, job)
    correlate.link_xid_bursts(events)
    _demote_teardown(events)
    _reconcile_with_job_state(events, job)
    _discard_contradicted_claims(events, evidence)
    verdict = _judge(events, job, {f.node for f in evidence.files if f.node})
    drains = _drains(verdict, job)
    return Diagnosis(
        domain=verdict.domain,
        category=verdict.category,
        culprit_nodes=verdict.culprits,
        quality=verdict.quality,
        drain=drains,
        evidence=_evidence_lines(events, verdict),
        summary=summary_for(verdict, _symptom_groups(events), job),
        outcome=_outcome(job),
        cause=_cause(verdict.primary, verdict) if verdict.primary else None,
        alternatives=[_cause(e, verdict) for e in _alternatives(events, verdict)],
        systemic=verdict.systemic,
        gpus=_gpus(events, verdict),
        symptoms=_symptom_groups(events),
        timeline=_timeline(events, verdict),
        actions=actions_for(verdict, drains),
        coverage=[CoverageItem(**vars(c)) for c in evidence.coverage],
        rules_fired=rules_fired,
        notes=verdict.notes,
    )


def _job_state_events(evidence: Evidence) -> list[Event]:
    job = evidence.job
    state = _state(job)
    if state not in STATE_CAUSES:
        return []
    domain, category = STATE_CAUSES[state]
    source = job.source or "job.json"
    return [
        Event(
            rule_id="slurm.job_state",
            title=f"Slurm job state {state}",
            type="job_state",
            domain=domain,
            category=category,
            role="cause",
            severity="error",
            strength=3,
            source=source,
            line=_line_of(evidence, source, '"state"'),
            text=f"state: {job.state}",
            kind="job",
            trusted=True,
            kernel_side=False,
            order=(-1, 0),
            time=job.end,
        )
    ]


def _line_of(evidence: Evidence, source: str, needle: str) -> int:
    try:
        text = (evidence.root / source).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 1
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return number
    return 1


def _date_node_failures(events: list[Event], last_seen: dict[str, float]) -> None:
    """Slurm notices a dead node minutes late (SlurmdTimeout): the failure began when it went silent."""
    for event in events:
        silent_since = last_seen.get(event.node or "")
        if event.category == "node_failure" and silent_since is not None:
            if event.time is None or silent_since < event.time:
                event.notes["reported_at"] = event.time
                event.time = silent_since


def _reconcile_with_job_state(events: list[Event], job: JobContext) -> None:
    """Slurm's own job state is authoritative: a 'CANCELLED' step banner in a FAILED job is teardown."""
    state = _state(job)
    if not state:
        return
    for event in events:
        agreeing = SCHEDULER_STATES.get(event.category or "")
        if event.role == "cause" and agreeing is not None and state not in agreeing:
            event.role = "symptom"
            event.notes["job_state"] = f"job state {state} disagrees"


def _discard_contradicted_claims(events: list[Event], evidence: Evidence) -> None:
    """A kernel message printed in the job's output that the node's own kernel log does not hold.

    Users can print anything; when the node's kernel or syslog is present and shows no such
    event, the printed line is a forgery or a copy, and only context.
    """
    logged_nodes = {f.node for f in evidence.files if f.trusted and f.kind in ("kernel", "syslog")}
    confirmed = {(e.node, e.rule_id) for e in events if e.trusted}
    confirmed_anywhere = {rule_id for _node, rule_id in confirmed}
    all_logged = bool(evidence.job.nodes) and set(evidence.job.nodes) <= logged_nodes
    for event in events:
        if event.trusted or not event.kernel_side or event.role != "cause":
            continue
        if event.node in logged_nodes and (event.node, event.rule_id) not in confirmed:
            event.role = "context"
            event.notes["contradicted"] = f"not in {event.node}'s own kernel log"
        elif event.node is None and all_logged and event.rule_id not in confirmed_anywhere:
            event.role = "context"
            event.notes["contradicted"] = "in no node's own kernel log"


def _state(job: JobContext) -> str | None:
    return job.state.split()[0].upper() if job.state else None


def _demote_teardown(events: list[Event]) -> None:
    """Application errors printed after the job said it completed are teardown noise."""
    done_at: dict[int, int] = {}
    for event in events:
        if event.type in ("job_progress_done", "program_exit"):
            file_index, line = event.order
            done_at[file_index] = min(line, done_at.get(file_index, line))
    for event in events:
        file_index, line = event.order
        if event.role == "cause" and event.domain == "application" and line > done_at.get(file_index, 1 << 62):
            event.role = "context"
            event.notes["teardown"] = "after the job reported completion"


def _judge(events: list[Event], job: JobContext, nodes_with_logs: set[str]) -> Verdict:
    candidates = [e for e in events if e.role == "cause"]
    if not candidates:
        return _judge_without_cause(events, job)
    primary, rivals = _choose_primary(candidates)
    if _after_the_hang(primary, events):
        primary.notes["after_hang"] = "began after the collectives had stalled: it cannot explain them"
        return _judge_without_cause(events, job)
    _link_symptoms(events, primary)
    verdict = Verdict(domain=primary.domain, category=primary.category or "no_evidence", quality="likely")
    verdict.primary, verdict.rivals = primary, rivals
    verdict.systemic = _is_systemic(candidates, primary, events, job)
    verdict.culprits = _culprits(verdict, events, job, nodes_with_logs)
    verdict.quality = _quality(verdict, job)
    return verdict


def _after_the_hang(primary: Event, events: list[Event]) -> bool:
    """A hardware fault that every collective timeout predates is no origin of the hang."""
    if primary.domain not in DRAINABLE_DOMAINS or primary.time is None:
        return False
    timeouts = [e for e in events if e.type == "collective_timeout" and e.role == "symptom" and e.time is not None]
    return bool(timeouts) and all(
        t.time + correlate.SKEW < primary.time and not correlate.explains(primary, t) for t in timeouts
    )


def _choose_primary(candidates: list[Event]) -> tuple[Event, list[Event]]:
    """Earliest initiating event, specific before generic; unorderable independent ones are rivals."""
    pool = [c for c in candidates if c.strength >= 2] or candidates
    timed = sorted((c for c in pool if c.time is not None), key=lambda c: c.sort_key)
    untimed = sorted((c for c in pool if c.time is None), key=lambda c: (-c.strength, c.order))
    if timed:
        first_time = timed[0].time
        ties = [c for c in timed if c.time - first_time <= correlate.SKEW]
        strongest = max(c.strength for c in ties)
        ties = sorted((c for c in ties if c.strength == strongest), key=lambda c: (not c.trusted, c.sort_key))
        if untimed and untimed[0].strength > strongest:
            ties = [c for c in untimed if c.strength == untimed[0].strength]
    else:
        ties = [c for c in untimed if c.strength == untimed[0].strength]
    primary = ties[0]
    rivals = _independent_rivals(primary, ties[1:])
    return primary, rivals


def _independent_rivals(primary: Event, others: list[Event]) -> list[Event]:
    """Hardware candidates on other nodes that timing cannot order against the primary."""
    if primary.domain not in DRAINABLE_DOMAINS or primary.node is None or not primary.trusted:
        return []
    rivals: dict[str, Event] = {}
    for other in others:
        if other.domain in DRAINABLE_DOMAINS and other.trusted and other.node and other.node != primary.node:
            if other.time is None and other.order[0] == primary.order[0]:
                continue  # same file, ordered by lines
            rivals.setdefault(other.node, other)
    return [rivals[n] for n in sorted(rivals)]


def _link_symptoms(events: list[Event], primary: Event) -> None:
    for event in events:
        if event is primary or event.role not in ("symptom", "cause") or event.explained_by is not None:
            continue
        if event.role == "cause" and event.strength > primary.strength and event.node != primary.node:
            continue
        if correlate.explains(primary, event):
            event.explained_by = primary
            if event.role == "cause" and _same_incident(primary, event):
                event.role = "symptom"
            elif event.role == "cause" and event.strength < 3:
                event.role = "symptom"


def _same_incident(a: Event, b: Event) -> bool:
    return a.node == b.node or a.node is None or b.node is None


def _is_systemic(candidates: list[Event], primary: Event, events: list[Event], job: JobContext) -> bool:
    if primary.time is None:
        nodes = {c.node for c in candidates if c.category == primary.category and c.node}
    else:
        nodes = {
            c.node
            for c in candidates
            if c.category == primary.category and c.node and c.time is not None and abs(c.time - primary.time) <= 300
        }
    known = set(job.nodes) | {e.node for e in events if e.node}
    return len(nodes) >= SYSTEMIC_MIN_NODES and len(nodes) * 2 >= max(len(known), 1)


def _culprits(verdict: Verdict, events: list[Event], job: JobContext, nodes_with_logs: set[str]) -> list[str]:
    primary = verdict.primary
    if verdict.systemic or primary.domain in ("storage", "scheduler") or primary.notes.get("no_culprit"):
        return []
    if verdict.rivals:
        return sorted({primary.node, *(r.node for r in verdict.rivals)} - {None})
    if primary.category == "node_failure" and primary.node is None:
        return _failed_nodes(events, job, nodes_with_logs)
    if primary.category == "transport_error" and not primary.trusted:
        return _blamed_peer(events)
    if primary.node:
        return [primary.node]
    if primary.domain == "application":
        roots = [e for e in events if e.type == "elastic_root_cause" and e.node]
        return sorted({min(roots, key=lambda e: e.order).node}) if roots else []
    return []


def _failed_nodes(events: list[Event], job: JobContext, nodes_with_logs: set[str]) -> list[str]:
    """The node Slurm names (`srun: error: Node failure on X`), else the one node that left no logs."""
    named = sorted({e.node for e in events if e.category == "node_failure" and e.node})
    if len(named) == 1:
        return named
    missing = sorted(set(job.nodes) - nodes_with_logs)
    return missing if len(missing) == 1 else []


def _blamed_peer(events: list[Event]) -> list[str]:
    """The far end of failing IB connections, when at least two other nodes name the same one."""
    known = {e.node for e in events if e.node}
    ip_to_node = correlate.peer_nodes(events, known)
    reporters: dict[str, set[str]] = defaultdict(set)
    for event in events:
        peer = ip_to_node.get(event.fields.get("peer_ip", ""))
        if event.category == "transport_error" and peer and event.node and event.node != peer:
            reporters[peer].add(event.node)
    blamed = sorted(peer for peer, nodes in reporters.items() if len(nodes) >= 2)
    return blamed if len(blamed) == 1 else []


def _quality(verdict: Verdict, job: JobContext) -> str:
    primary = verdict.primary
    if verdict.rivals:
        return "ambiguous"
    if verdict.systemic:
        return "likely"
    hardware = primary.domain in DRAINABLE_DOMAINS
    if hardware and not primary.trusted:
        return "likely"
    if primary.time is None and job.start is not None and hardware:
        return "likely"  # cannot tell whether it happened inside the job
    if primary.category == "node_failure" and primary.type == "job_state" and not verdict.culprits:
        return "likely"
    return "confirmed" if primary.strength >= 2 else "likely"


def _judge_without_cause(events: list[Event], job: JobContext) -> Verdict:
    timeouts = [e for e in events if e.type == "collective_timeout" and e.role == "symptom"]
    if timeouts:
        reporting, silent = correlate.silent_nodes(events, job)
        suspects = silent if len(silent) == 1 and reporting else correlate.lagging_nodes(events)
        verdict = Verdict(domain="unknown", category="hang_unattributed", quality="insufficient")
        if len(suspects) == 1:
            verdict.culprits, verdict.quality = suspects, "likely"
            verdict.notes.append(f"every node but {suspects[0]} reported a collective timeout")
        return verdict
    failing = [e for e in events if e.role == "symptom"]
    state = _state(job)
    if state in FAILED_STATES or failing:
        return Verdict(domain="unknown", category="no_evidence", quality="insufficient")
    quality = "confirmed" if state == "COMPLETED" else "likely"
    return Verdict(domain="none", category="success", quality=quality)


def _drains(verdict: Verdict, job: JobContext) -> list[Drain]:
    """Confirmed hardware faults from sources the user cannot write; ambiguous ones too, each
    node on its own evidence; never a systemic problem or more than MAX_DRAIN_NODES nodes."""
    if verdict.primary is None or verdict.quality not in ("confirmed", "ambiguous") or verdict.systemic:
        return []
    faults = [verdict.primary, *verdict.rivals]
    drainable = [e for e in faults if e.domain in DRAINABLE_DOMAINS and e.trusted and e.strength == 3]
    if len(drainable) != len(faults) or not 0 < len(verdict.culprits) <= MAX_DRAIN_NODES:
        return []
    by_node = {e.node: e for e in drainable if e.node}
    return [Drain(node=node, reason=drain_reason(by_node[node], job)) for node in verdict.culprits if node in by_node]


def _alternatives(events: list[Event], verdict: Verdict) -> list[Event]:
    primary = verdict.primary
    others = [e for e in events if e.role == "cause" and e is not primary and e.explained_by is None]
    seen: set[tuple] = set()
    chosen = list(verdict.rivals)
    for event in sorted(others, key=lambda e: e.sort_key):
        key = (event.node, event.category)
        if key in seen or (primary and key == (primary.node, primary.category)) or event in chosen:
            continue
        seen.add(key)
        chosen.append(event)
    return chosen[:10]


def _cause(event: Event, verdict: Verdict) -> Cause:
    nodes = verdict.culprits if event is verdict.primary else ([event.node] if event.node else [])
    gpus = [_gpu(event)] if event.fields.get("pci") else []
    detail = event.notes.get("xid_meaning", "")
    return Cause(
        domain=event.domain,
        category=event.category or "no_evidence",
        nodes=nodes,
        gpus=gpus,
        time=iso(event.time),
        rule=event.rule_id,
        title=event.title,
        trusted=event.trusted,
        detail=detail,
    )


def _gpu(event: Event) -> Gpu:
    return Gpu(node=event.node, pci_bus_id=event.fields["pci"], xid=event.fields.get("xid"))


def _gpus(events: list[Event], verdict: Verdict) -> list[Gpu]:
    found: dict[tuple, Gpu] = {}
    for event in sorted(events, key=lambda e: e.sort_key):
        if event.fields.get("pci") and event.type in ("gpu_xid", "gpu_lost") and event.role == "cause":
            found.setdefault((event.node or "", event.fields["pci"]), _gpu(event))
    return [found[k] for k in sorted(found)]


def _symptom_groups(events: list[Event]) -> list[SymptomGroup]:
    groups: dict[tuple, list[Event]] = defaultdict(list)
    for event in events:
        if event.role == "symptom":
            groups[(event.type, event.rule_id)].append(event)
    result = []
    for (kind, rule_id), members in groups.items():
        times = sorted(e.time for e in members if e.time is not None)
        explained = Counter(e.explained_by.rule_id for e in members if e.explained_by)
        result.append(
            SymptomGroup(
                type=kind,
                rule=rule_id,
                count=len(members),
                nodes=sorted({e.node for e in members if e.node}),
                ranks=sorted({e.rank for e in members if e.rank is not None}),
                first=iso(times[0]) if times else None,
                last=iso(times[-1]) if times else None,
                explained_by=explained.most_common(1)[0][0] if explained else None,
            )
        )
    return sorted(result, key=lambda group: (group.first or "~", group.type, group.rule))


def _timeline(events: list[Event], verdict: Verdict) -> list[TimelineEntry]:
    """The first cause, the first symptom on each node, and the last event, in time order."""
    timed = sorted((e for e in events if e.time is not None and e.role in ("cause", "symptom")), key=lambda e: e.sort_key)
    entries: list[tuple[Event, str]] = []
    if verdict.primary is not None:
        entries.append((verdict.primary, "first_cause"))
    first_per_node: dict[str, Event] = {}
    for event in timed:
        if event.role == "symptom" and event.node:
            first_per_node.setdefault(event.node, event)
    entries += [(e, "first_symptom") for e in first_per_node.values()]
    if timed and all(timed[-1] is not e for e, _ in entries):
        entries.append((timed[-1], "last_event"))
    entries.sort(key=lambda pair: pair[0].sort_key)
    return [
        TimelineEntry(
            time=iso(e.time), node=e.node, what=what, text=e.text.split("\n", 1)[0][:200], source=e.source, line=e.line
        )
        for e, what in entries
    ]


def _evidence_lines(events: list[Event], verdict: Verdict) -> list[EvidenceLine]:
    primary = verdict.primary
    causes = [primary, *verdict.rivals] if primary else []
    if primary:
        causes += [
            e
            for e in events
            if e.explained_by is primary and e.node == primary.node and e.category == primary.category
        ][:5]
    first_per_node: dict[tuple, Event] = {}
    for event in sorted(events, key=lambda e: e.sort_key):
        if event.role == "symptom":
            first_per_node.setdefault((event.node, event.type), event)
    symptoms = sorted(first_per_node.values(), key=lambda e: e.sort_key)[:MAX_SYMPTOM_LINES]
    context = [e for e in sorted(events, key=lambda e: e.sort_key) if e.role == "context"][:MAX_CONTEXT_LINES]
    if not primary:
        context += [e for e in events if e.role == "cause"][:MAX_CONTEXT_LINES]
    lines = []
    shown: set[tuple[str, int]] = set()
    for role, group in (("cause", causes), ("symptom", symptoms), ("context", context)):
        for event in group:
            if (event.source, event.line) in shown:
                continue
            shown.add((event.source, event.line))
            lines.append(
                EvidenceLine(
                    node=event.node,
                    source=event.source,
                    line=event.line,
                    time=iso(event.time),
                    text=event.text.split("\n", 1)[0][:500],
                    role=role,
                    rule=event.rule_id,
                )
            )
    return lines


def _outcome(job: JobContext) -> Outcome:
    return Outcome(
        state=job.state,
        exit_code=job.exit_code,
        job_id=job.job_id,
        start=iso(job.start),
        end=iso(job.end),
        nodes=list(job.nodes),
    )
