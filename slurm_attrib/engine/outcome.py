"""The finders of pol.outcome (rules/policies/outcome.yaml): what the job's own story shows when
no line names a cause, where a table row needs code to read it (the hang dumps, which nodes a
collective timeout left out, where progress stopped)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from slurm_attrib.engine import correlate
from slurm_attrib.engine.checks import stalled_progress
from slurm_attrib.engine.events import Event, has_ranks, ranks_of
from slurm_attrib.engine.timefmt import iso
from slurm_attrib.ingest.hangdumps import HangFinding, hang_finding
from slurm_attrib.ingest.types import Evidence


@dataclass
class Found:
    """What a finder found: the nodes it singles out, the values a row's note is filled with, the
    notes it writes itself, and the hang dumps' finding."""

    nodes: list[str] = field(default_factory=list)
    values: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hang: HangFinding | None = None


@dataclass
class OutcomeContext:
    events: list[Event]
    evidence: Evidence

    @cached_property
    def hang_dump(self) -> HangFinding | None:
        """The rank(s) the job's hang dumps (flight recorder, py-spy) single out; read once."""
        return hang_finding(self.evidence, _rank_nodes(self.events))


def _rank_nodes(events: list[Event]) -> dict[int, str]:
    ranks: dict[int, str] = {}
    for event in sorted((e for e in events if e.node and has_ranks(e)), key=lambda e: e.order):
        for rank in ranks_of(event):
            ranks.setdefault(rank, event.node)
    return ranks


def _from_dumps(found: HangFinding) -> Found:
    """A rank behind or elsewhere is the suspect, never proof of a hardware fault (a slow data
    loader looks the same): the policy's rows give it at most `likely`, never a drain."""
    notes = [found.reason] + ([] if found.nodes else ["the dumps do not say which node the suspect rank ran on"])
    return Found(nodes=list(found.nodes), notes=notes, hang=found)


def hang_dump_mismatch(context: OutcomeContext) -> Found | None:
    """The dumps show one rank in a different collective (op or sizes) than the others: the
    program's ranks desynchronised."""
    found = context.hang_dump
    return _from_dumps(found) if found is not None and found.kind == "mismatch" else None


def hang_dump_suspect(context: OutcomeContext) -> Found | None:
    """The dumps show one rank behind the others, or elsewhere in its stack."""
    found = context.hang_dump
    return _from_dumps(found) if found is not None and found.kind != "mismatch" else None


def hang_suspect(context: OutcomeContext) -> Found | None:
    """The one node a collective timeout singles out: the only node of the job that did not report
    it while others did, else the only one whose ranks completed fewer collectives."""
    reporting, silent = correlate.hang_reporters(context.events, context.evidence.job)
    suspects = silent if len(silent) == 1 and reporting else correlate.lagging_nodes(context.events)
    return Found(nodes=suspects, values={"node": suspects[0]}) if len(suspects) == 1 else None


def stalled(context: OutcomeContext) -> Found | None:
    """The run's last progress stopped short of its end and nothing says it finished (checks.stalled_progress)."""
    last = stalled_progress(context.events)
    if last is None:
        return None
    timed = last.time is not None and not last.time_inherited
    return Found(values={"done": last.fields["done"], "total": last.fields["total"],
                         "time": iso(last.time) if timed else None, "source": last.source, "line": last.line})


FINDERS: dict[str, Callable[[OutcomeContext], Found | None]] = {
    "hang_dump_mismatch": hang_dump_mismatch,
    "hang_dump_suspect": hang_dump_suspect,
    "hang_suspect": hang_suspect,
    "stalled": stalled,
}
