"""How the culprit policy (rules/policies/culprits.yaml) finds nodes: its named finders, each
reading the verdict and the events (engine/policy.py applies the policy's rows)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from slurm_attrib.engine.events import Event
from slurm_attrib.ingest.types import JobContext

if TYPE_CHECKING:
    from slurm_attrib.engine.verdict import Verdict

WENT_SILENT_MARGIN = 60.0  # a node whose logs stop this much before every other node's died first
NODE_NAMING_FIELDS = ("node", "host", "nodes")  # rule fields that name the node a line is about


@dataclass
class CulpritContext:
    verdict: Verdict
    events: list[Event]
    job: JobContext
    nodes_without_logs: list[str]
    last_seen: dict[str, float]


def no_one(found: CulpritContext) -> list[str]:
    return []


def cause_and_rivals(found: CulpritContext) -> list[str]:
    """The nodes of the cause and of the rivals timing cannot order against it."""
    return sorted({found.verdict.primary.node, *(r.node for r in found.verdict.rivals)} - {None})


def its_node(found: CulpritContext) -> list[str]:
    return [found.verdict.primary.node] if found.verdict.primary.node else []


def same_failure_elsewhere(found: CulpritContext) -> list[str]:
    """The one node of the other lines reporting the same failure (srun's `node107: task 0: Out Of
    Memory` next to slurmstepd's oom-kill line, which names no node); none when they name several."""
    primary = found.verdict.primary
    nodes = sorted({
        e.node for e in found.events
        if e is not primary and e.node and e.category == primary.category and e.role in ("cause", "symptom")
        and (e.explained_by is primary or e.order[0] == primary.order[0])
    })
    return nodes if len(nodes) == 1 else []


def elastic_root_cause(found: CulpritContext) -> list[str]:
    """The node torchelastic's error summary names as the root cause (its first such line)."""
    roots = [e for e in found.events if e.type == "elastic_root_cause" and e.node]
    return [min(roots, key=lambda e: e.order).node] if roots else []


def the_jobs_node(found: CulpritContext) -> list[str]:
    """The job ran on one node: the failure happened there."""
    return list(found.job.nodes) if len(found.job.nodes) == 1 else []


def the_one_host_seen(found: CulpritContext) -> list[str]:
    """Without the job's record, lines that all name one host ran there."""
    seen = {e.node for e in found.events if e.node}
    return sorted(seen) if len(seen) == 1 else []


def failed_nodes(found: CulpritContext) -> list[str]:
    """The node Slurm names (`srun: error: Node failure on X`, printed by srun or salloc), else the
    one node that left no logs, else the node its peers' failed connections name, else the one
    node whose logs stopped well before all others'.
    Naming is not draining: drains need trusted evidence."""
    failures = [e for e in found.events if e.category == "node_failure" and e.node]
    # A line that names the failed node (`Node failure on X`, `on failed node X`) outranks where a
    # banner was printed: `*** JOB ... ON <batch host> CANCELLED ... DUE TO NODE FAILURE ***`
    # comes from the node that survived.
    naming = [e for e in failures if any(e.fields.get(key) for key in NODE_NAMING_FIELDS)]
    named = sorted({e.node for e in naming or failures})
    if len(named) == 1:
        return named
    if len(found.nodes_without_logs) == 1:
        return found.nodes_without_logs
    peer = blamed_peer(found.events, found.job.nodes)  # the node its peers lost their connections to
    if peer:
        return peer
    if len(found.last_seen) >= 3:
        ordered = sorted(found.last_seen.items(), key=lambda item: (item[1], item[0]))
        (first, stopped), (_, next_stop) = ordered[0], ordered[1]
        if next_stop - stopped >= WENT_SILENT_MARGIN:
            return [first]
    return []


def the_blamed_peer(found: CulpritContext) -> list[str]:
    return blamed_peer(found.events, found.job.nodes)


def blamed_peer(events: list[Event], job_nodes: tuple[str, ...]) -> list[str]:
    """The far end of failing connections, when at least two other nodes name the same one
    (peers resolved by `events.resolve_nodes` through the IP and rank maps present): a node of
    the job, or of the events; one that died without a line of its own is blamed all the same."""
    known = {e.node for e in events if e.node} | set(job_nodes)
    reporters: dict[str, set[str]] = defaultdict(set)
    for event in events:
        peer = event.notes.get("peer_node")
        if event.category == "transport_error" and peer in known and event.node and event.node != peer:
            reporters[peer].add(event.node)
    blamed = sorted(peer for peer, nodes in reporters.items() if len(nodes) >= 2)
    return blamed if len(blamed) == 1 else []


FINDERS: dict[str, Callable[[CulpritContext], list[str]]] = {
    "no_one": no_one, "cause_and_rivals": cause_and_rivals, "failed_nodes": failed_nodes,
    "the_blamed_peer": the_blamed_peer, "its_node": its_node, "same_failure_elsewhere": same_failure_elsewhere,
    "elastic_root_cause": elastic_root_cause, "the_jobs_node": the_jobs_node, "the_one_host_seen": the_one_host_seen,
}
