"""The diagnosis' parts built from the verdict and the events: causes, symptom groups, GPUs,
the timeline and the evidence trail."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING

from slurm_attrib.engine.events import Event, ranks_of
from slurm_attrib.engine.timefmt import iso
from slurm_attrib.ingest.types import Evidence, JobContext
from slurm_attrib.model import Cause, EvidenceLine, Gpu, Link, Outcome, SymptomGroup, TimelineEntry
from slurm_attrib.vocab import DOMAIN_OF_CATEGORY, OTHER_READING

if TYPE_CHECKING:
    from slurm_attrib.engine.verdict import Verdict

MAX_SYMPTOM_LINES = 40


MAX_CONTEXT_LINES = 10
MAX_LINKS = 64  # a 512-node job's NCCL errors name every rank's HCA: the kernel's lines come first


# A fault set aside because it came after the collectives stalled (sup.fault_after_the_hang) is no
# origin of the hang, but a fault on the job's hardware all the same: the operator sees it.
STILL_ALTERNATIVES = ("after_hang",)


def alternatives(events: list[Event], verdict: Verdict) -> list[Event]:
    primary = verdict.primary
    others = [e for e in events if (e.role == "cause" or any(k in e.notes for k in STILL_ALTERNATIVES))
              and e is not primary and e.explained_by is None]
    seen: set[tuple] = set()
    chosen = list(verdict.rivals)
    if primary and OTHER_READING in primary.notes:  # the same line read the other way
        other = primary.notes[OTHER_READING]
        chosen.insert(0, replace(primary, domain=DOMAIN_OF_CATEGORY[other], category=other))
        seen.add((primary.node, other))
    for event in sorted(others, key=lambda e: e.sort_key):
        key = (event.node, event.category)
        if key in seen or (primary and key == (primary.node, primary.category)) or event in chosen:
            continue
        seen.add(key)
        chosen.append(event)
    return chosen[:10]


def cause_of(event: Event, verdict: Verdict) -> Cause:
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
        rank=event.rank,
        rank_node=event.node if event.rank is not None else None,
    )


HANG_DUMP_RULE = "hang.dumps"  # the rule id of lines read by ingest.hangdumps


def cause_of_hang(verdict: Verdict) -> Cause | None:
    found = verdict.hang
    if found is None:
        return None
    ranks = ", ".join(str(r) for r in found.ranks)
    return Cause(
        domain=verdict.domain,
        category=verdict.category,
        nodes=verdict.culprits,
        rule=HANG_DUMP_RULE,
        title=f"Rank {ranks} singled out by the hang dumps" if len(found.ranks) == 1 else f"Ranks {ranks} singled out by the hang dumps",
        trusted=False,
        detail=found.reason,
    )


def _gpu(event: Event) -> Gpu:
    return Gpu(node=event.node, pci_bus_id=event.fields["pci"], xid=event.fields.get("xid"))


def gpus(events: list[Event], verdict: Verdict, evidence: Evidence | None = None) -> list[Gpu]:
    """The GPUs that reported a fault, each with its UUID and serial when the driver's lines or
    nvidia-smi output of its node name them."""
    from slurm_attrib.ingest.gpuids import gpu_identities, pci_key

    faults = [e for e in events if e.type in ("gpu_xid", "gpu_lost") and e.role == "cause" and e.fields.get("pci")]
    identities = gpu_identities(evidence, {e.node for e in faults}) if evidence is not None and faults else {}
    found: dict[tuple, Gpu] = {}
    for event in sorted(faults, key=lambda e: e.sort_key):
        key = (event.node or "", event.fields["pci"])
        if key not in found:
            identity = identities.get((event.node or "", pci_key(event.fields["pci"])), {})
            found[key] = _gpu(event).model_copy(update=identity)
    return [found[k] for k in sorted(found)]


def links(events: list[Event]) -> list[Link]:
    """The network devices and ports that reported a failure, one entry per (node, device, port,
    type) with its first time: what the fleet report groups by host port and switch across jobs."""
    found: dict[tuple, list[Event]] = defaultdict(list)
    for event in events:
        device = event.fields.get("device")
        counted = event.type.startswith("ib_counter")  # sysfs counter rises: context, but a fleet pattern
        if event.domain == "network" and device and (event.role in ("cause", "symptom") or counted):
            port = event.fields.get("port")
            port = int(port) if isinstance(port, int) or (isinstance(port, str) and port.isdigit()) else None
            found[(event.node or "", str(device), port if port is not None else -1, event.type)].append(event)
    result = []
    for key in sorted(found):
        members = sorted(found[key], key=lambda e: e.sort_key)
        first = members[0]
        result.append(Link(
            node=first.node, device=key[1], port=None if key[2] < 0 else key[2], type=key[3], rule=first.rule_id,
            time=iso(first.time), count=sum(int(e.fields.get("count") or 1) * e.repeats for e in members),
            trusted=any(e.trusted for e in members),
        ))
    return sorted(result, key=lambda link: not link.trusted)[:MAX_LINKS]


def symptom_groups(events: list[Event]) -> list[SymptomGroup]:
    groups: dict[tuple, list[Event]] = defaultdict(list)
    for event in events:
        if event.role == "symptom":
            groups[(event.type, event.rule_id)].append(event)
    result = []
    for (kind, rule_id), members in groups.items():
        times = sorted(moment for e in members for moment in (e.time, e.last_time) if moment is not None)
        explained = Counter(e.explained_by.rule_id for e in members if e.explained_by)
        result.append(
            SymptomGroup(
                type=kind,
                rule=rule_id,
                count=sum(e.repeats for e in members),
                nodes=sorted({e.node for e in members if e.node}),
                ranks=sorted({rank for e in members for rank in ranks_of(e)}),
                first=iso(times[0]) if times else None,
                last=iso(times[-1]) if times else None,
                explained_by=explained.most_common(1)[0][0] if explained else None,
            )
        )
    return sorted(result, key=lambda group: (group.first or "~", group.type, group.rule))


def timeline(events: list[Event], verdict: Verdict) -> list[TimelineEntry]:
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


def evidence_lines(events: list[Event], verdict: Verdict, source_nodes: dict[str, str | None] | None = None) -> list[EvidenceLine]:
    primary = verdict.primary
    causes = [primary, *verdict.rivals] if primary else []
    if primary:
        causes += [
            e
            for e in events
            if e.explained_by is primary and e.node == primary.node and e.category == primary.category
        ][:5]
    first_per_node: dict[tuple, tuple[tuple, int, Event]] = {}
    for position, event in enumerate(events):  # per (node, type), the symptom of the least sort key (the first of equals)
        if event.role == "symptom":
            known = first_per_node.get((event.node, event.type))
            if known is None or event.sort_key < known[0]:
                first_per_node[(event.node, event.type)] = (event.sort_key, position, event)
    symptoms = [e for _, _, e in sorted(first_per_node.values(), key=lambda k: k[:2])][:MAX_SYMPTOM_LINES]
    context = sorted((e for e in events if e.role == "context"), key=lambda e: e.sort_key)[:MAX_CONTEXT_LINES]
    if not primary:
        context += [e for e in events if e.role == "cause"][:MAX_CONTEXT_LINES]
    lines = _hang_dump_lines(verdict, source_nodes or {})
    shown: set[tuple[str, int]] = {(line.source, line.line) for line in lines}
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
                    time_inferred=event.time_inherited,
                    provenance=event.provenance,
                )
            )
    return lines


def _hang_dump_lines(verdict: Verdict, source_nodes: dict[str, str | None]) -> list[EvidenceLine]:
    if verdict.hang is None:
        return []
    return [
        EvidenceLine(node=source_nodes.get(source), source=source, line=line, time=None, text=text[:500], role="cause", rule=HANG_DUMP_RULE)
        for source, line, text in verdict.hang.evidence[:MAX_SYMPTOM_LINES]
    ]


def outcome(job: JobContext) -> Outcome:
    return Outcome(
        state=job.state,
        exit_code=job.exit_code,
        job_id=job.job_id,
        start=iso(job.start),
        end=iso(job.end),
        nodes=list(job.nodes),
    )
