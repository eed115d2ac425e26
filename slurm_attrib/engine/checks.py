"""The named checks relations use (rules/relations/*.yaml `check:` and `only_if:`).

A relation says which events and what changes; a check is the one piece of reasoning it cannot say
in a matcher: a time window, a burst, a count over the job.  Each is small, takes its parameters
by name (checked when the relations load) and is tested through the relations that use it.

- suppress checks: (event, JudgeContext, **parameters) -> the reason (a short text) or None
- explains checks: (ordered events of one scope, the relation's matchers, **parameters) -> [(cause, effect)]
- job checks (`only_if`): (JudgeContext) -> bool
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from slurm_attrib.engine.events import Event
from slurm_attrib.engine.jobwindow import BEFORE, INSIDE, WINDOW_SLACK_AFTER, WINDOW_SLACK_BEFORE, window_side
from slurm_attrib.ingest.types import JobContext


@dataclass
class JudgeContext:
    job: JobContext
    events: list[Event]


# -- suppress --------------------------------------------------------------------------------------

def outside_job_window(event: Event, context: JudgeContext, before: float = WINDOW_SLACK_BEFORE,
                       after: float = WINDOW_SLACK_AFTER) -> str | None:
    """The event's time lies before the job's start (less `before` seconds) or after its end (plus
    `after`): a stale Xid from an earlier job, a line of the next one."""
    if event.time is None:
        return None
    side = window_side(event.time, context.job, before, after)
    if side == INSIDE:
        return None
    return "before the job started" if side == BEFORE else "after the job ended"


SUPPRESS_CHECKS: dict[str, Callable[..., str | None]] = {"outside_job_window": outside_job_window}


# -- explains --------------------------------------------------------------------------------------

def same_burst(ordered: list[Event], is_cause: Callable[[Event], bool], is_effect: Callable[[Event], bool],
               silence: float) -> list[tuple[Event, Event]]:
    """A burst runs until `silence` seconds pass without an event (of those ordered); its first
    cause explains the effects that follow it in the burst."""
    edges = []
    burst_cause: Event | None = None
    last_time: float | None = None
    for event in ordered:
        if event.time is not None and last_time is not None and event.time - last_time > silence:
            burst_cause = None
        last_time = event.time if event.time is not None else last_time
        if is_cause(event) and burst_cause is None:
            burst_cause = event
        elif is_effect(event) and burst_cause is not None:
            edges.append((burst_cause, event))
    return edges


def cause_first(ordered: list[Event], is_cause: Callable[[Event], bool], is_effect: Callable[[Event], bool],
                skew: float = 5.0) -> list[tuple[Event, Event]]:
    """Each timed effect is explained by the first timed cause no later than it, `skew` seconds of
    clock difference allowed (a job record's end is whole seconds, a slurmd line has milliseconds)."""
    causes = [e for e in ordered if is_cause(e) and e.time is not None]
    edges = []
    for effect in ordered:
        if not is_effect(effect) or effect.time is None:
            continue
        earlier = [c for c in causes if c is not effect and c.time <= effect.time + skew]
        if earlier:
            edges.append((earlier[0], effect))
    return edges


EXPLAINS_CHECKS: dict[str, Callable[..., list[tuple[Event, Event]]]] = {"same_burst": same_burst, "cause_first": cause_first}


# -- the job as a whole ----------------------------------------------------------------------------

def job_not_completed(context: JudgeContext) -> bool:
    """Slurm did not record the job COMPLETED."""
    return context.job.state != "COMPLETED"


HANG_TYPES = frozenset({"collective_timeout", "collective_failure", "watchdog_hang"})  # as correlate.HANG_TYPES


def no_collective_timeout(context: JudgeContext) -> bool:
    """No collective timed out: a task that exits after its collectives stalled was ended by the
    watchdog, and the hang is the story (judged without a cause)."""
    return not any(e.type in HANG_TYPES and e.role != "context" for e in context.events)


JOB_CHECKS: dict[str, Callable[[JudgeContext], bool]] = {"job_not_completed": job_not_completed,
                                                         "no_collective_timeout": no_collective_timeout}


def check_problem(kind: str, check: dict[str, dict], only_if: list[str]) -> str | None:
    """Why a relation's named checks cannot run (unknown name, a parameter the check does not
    take), or None."""
    table = {"suppress": SUPPRESS_CHECKS, "explains": EXPLAINS_CHECKS, "aggregate": {}}[kind]
    for name, parameters in check.items():
        if name not in table:
            return f"unknown {kind} check {name!r}; known: {', '.join(sorted(table)) or 'none'}"
        accepted = set(list(inspect.signature(table[name]).parameters)[3 if kind == "explains" else 2:])
        extra = sorted(set(parameters) - accepted)
        if extra:
            return f"check {name!r} takes no parameter(s) {extra}; it takes {sorted(accepted) or 'none'}"
    unknown = sorted(set(only_if) - set(JOB_CHECKS))
    if unknown:
        return f"unknown job check(s) {unknown}; known: {', '.join(sorted(JOB_CHECKS))}"
    return None
