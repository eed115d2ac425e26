"""Correlation across nodes: cause-to-symptom links, hangs."""

from __future__ import annotations

from collections import defaultdict

from slurm_attrib.engine.events import Event
from slurm_attrib.ingest.types import JobContext

SKEW = 5.0  # clocks of different nodes may differ by this much: events closer are not ordered
INHERITED_SKEW = 120.0  # a line without its own time is placed only roughly by its neighbours
EXPLAIN_HORIZON = 3600.0  # a cause explains what follows it within this time
# Events that say a collective stalled: watchdog timeouts, "Some NCCL operations have failed or
# timed out", the heartbeat monitor's "watchdog got stuck".
HANG_TYPES = frozenset({"collective_timeout", "collective_failure", "watchdog_hang"})


def explains(cause: Event, effect: Event) -> bool:
    """Whether a cause can explain a later event: it came first (within skew) or inside its stall.

    A collective timeout that "ran for N ms" started N ms before it was reported; a fault inside
    that interval explains it.
    """
    if cause.time is None or effect.time is None:
        return cause.order <= effect.order if cause.order[0] == effect.order[0] else True
    if effect.type == "collective_timeout" and effect.fields.get("ran_ms"):
        onset = effect.time - effect.fields["ran_ms"] / 1000.0
        return onset - 60.0 - SKEW <= cause.time <= effect.time + SKEW
    return cause.time - SKEW <= effect.time <= cause.time + EXPLAIN_HORIZON


def hang_reporters(events: list[Event], job: JobContext) -> tuple[list[str], list[str]]:
    """Nodes whose ranks reported collective timeouts, and nodes of the job that did not."""
    timeouts = [e for e in events if e.type in HANG_TYPES and e.role != "context"]
    reporting = sorted({e.node for e in timeouts if e.node})
    known = set(job.nodes) | {e.node for e in events if e.node and e.type in ("nccl_rank", "nccl_ip")}
    silent = sorted(known - set(reporting))
    return reporting, silent


def lagging_nodes(events: list[Event]) -> list[str]:
    """Nodes whose ranks completed fewer collectives than every other rank (watchdog status lines).

    Sequence numbers count per process group, so only one group's lines are compared: the group
    that most lines report on.
    """
    by_group: dict[tuple, dict[str, int]] = defaultdict(dict)
    for event in events:
        value = event.fields.get("completed")
        if event.node and isinstance(value, int):
            group = by_group[(event.rule_id, event.fields.get("pg", 0))]
            group[event.node] = min(value, group.get(event.node, value))
    if not by_group:
        return []
    completed = max(by_group.values(), key=len)
    if len(completed) < 2:
        return []
    lowest = min(completed.values())
    laggards = sorted(n for n, v in completed.items() if v == lowest)
    return laggards if len(laggards) < len(completed) else []
