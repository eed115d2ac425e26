"""`sattrib explain`: how the judgement reached its diagnosis, as a tree of decisions.

The cause, then each relation (rules/relations) that changed it or tied events to it, then what the
relations set aside and what they promoted, then the policy rows (rules/policies) that decided the
rest: shared or not, the culprits, the quality, the drain, or how a job with no cause ended.  A link made by a part of the judgement that is not a
relation yet is shown as `judge`."""

from __future__ import annotations

from collections import defaultdict

from slurm_attrib.engine.events import Event
from slurm_attrib.engine.timefmt import iso
from slurm_attrib.model import Diagnosis

SHOWN = 5  # events listed per group; the rest are counted


def proof_tree(diagnosis: Diagnosis, events: list[Event]) -> str:
    lines = [_verdict(diagnosis)]
    cause = next((e for e in events if diagnosis.cause and _is(e, diagnosis.cause.rule, diagnosis.cause.time)), None)
    if cause is not None:
        lines.append(f"cause   {_event(cause)}")
        for relation in cause.decided_by:
            lines.append(f"  changed by {relation}: {_note_of(cause)}")
        for relation, effects in sorted(_edges_into(cause, events).items()):
            lines.append(f"  explains, by {relation}: {_count(effects)}")
            lines += [f"    {_event(e)}" for e in effects[:SHOWN]]
    elif diagnosis.cause is None:
        lines.append("cause   none found")
    for title, groups in (("set aside", _by_relation(events, "suppress")), ("promoted", _by_relation(events, "aggregate"))):
        for relation, members in sorted(groups.items()):
            lines.append(f"{title} by {relation}: {_count(members)}")
            lines += [f"    {_event(e)}" for e in members[:SHOWN]]
    lines += [f"policy  {row}" for row in diagnosis._policy_rows]
    return "\n".join(lines) + "\n"


def _verdict(d: Diagnosis) -> str:
    culprits = ", ".join(d.culprit_nodes) or "no node"
    return f"job {d.outcome.job_id or '?'} {d.outcome.state or ''}: {d.domain}/{d.category} on {culprits} ({d.quality})"


def _is(event: Event, rule: str, time: str | None) -> bool:
    return event.rule_id == rule and iso(event.time) == time and event.role == "cause"


def _event(e: Event) -> str:
    repeats = f" x{e.repeats}" if e.repeats > 1 else ""
    return f"{e.rule_id} {e.node or '?'} {e.source}:{e.line} {iso(e.time) or 'untimed'}{repeats}  {e.text.splitlines()[0][:100]}"


def _note_of(event: Event) -> str:
    return "; ".join(f"{key}: {value}" for key, value in sorted(event.notes.items())) or "-"


def _count(events: list[Event]) -> str:
    lines = sum(e.repeats for e in events)
    return f"{len(events)} event(s)" + (f", {lines} lines" if lines != len(events) else "")


def _edges_into(cause: Event, events: list[Event]) -> dict[str, list[Event]]:
    found: dict[str, list[Event]] = defaultdict(list)
    for event in sorted(events, key=lambda e: e.sort_key):
        if event.explained_by is cause:
            by = [r for r in event.decided_by if r.startswith(("rel.", "org."))]  # explains and origin relations
            found[by[-1] if by else "no relation recorded"].append(event)
    return found


def _by_relation(events: list[Event], kind: str) -> dict[str, list[Event]]:
    prefix = {"suppress": "sup.", "aggregate": "agg."}[kind]
    found: dict[str, list[Event]] = defaultdict(list)
    for event in sorted(events, key=lambda e: e.sort_key):
        for relation in event.decided_by:
            if relation.startswith(prefix):
                found[relation].append(event)
    return found
