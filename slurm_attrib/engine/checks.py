"""The named checks relations use (rules/relations/*.yaml `check:` and `only_if:`).

A relation says which events and what changes; a check is the one piece of reasoning it cannot say
in a matcher: a time window, a burst, a count over the job.  Each is small, takes its parameters
by name (checked when the relations load) and is tested through the relations that use it.

- suppress checks: (event, JudgeContext, **parameters) -> the reason (a short text) or None
- explains checks: (ordered events of one scope, the relation's matchers, **parameters) -> [(cause, effect)]
- aggregate checks: (one group's events, JudgeContext, **parameters) -> None (the group promotes nothing) or
  (the events it may promote, values its `says` may name)
- job checks (`only_if`): (JudgeContext) -> bool
"""

from __future__ import annotations

import bisect
import inspect
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from slurm_attrib.engine.correlate import EXPLAIN_HORIZON, HANG_TYPES, INHERITED_SKEW, SKEW, explains
from slurm_attrib.engine.events import Event, is_failed_task, ranks_of
from slurm_attrib.engine.jobwindow import BEFORE, INSIDE, WINDOW_SLACK_AFTER, WINDOW_SLACK_BEFORE, window_side
from slurm_attrib.engine.reconcile import SIGTERM, agreeing_states, exit_signal, job_state
from slurm_attrib.ingest.types import Evidence, JobContext
from slurm_attrib.vocab import DRAINABLE_DOMAINS


@dataclass
class JudgeContext:
    job: JobContext
    events: list[Event]
    memo: dict[tuple, Any] = field(default_factory=dict)  # what a check computes once over all events
    kernel_logged: frozenset[str] = frozenset()  # nodes whose own kernel log or syslog is in the evidence
    evidence: Evidence | None = None  # the files, for a check that reads lines around an event

    def once(self, key: tuple, compute: Callable[[], Any]) -> Any:
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]


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


def after_in_same_file(event: Event, context: JudgeContext, types: list[str],
                       restarts: list[str] | None = None) -> str | None:
    """The event's line comes after an event of one of `types` in the same file, with no event of
    the `restarts` types between the nearest such line and it: a run that started again after its
    end (a second step's processes joining) is no longer past its end."""
    ends = _lines_of(context, types).get(event.order[0], [])
    line = event.order[1]
    before = bisect.bisect_left(ends, line)
    if not before:
        return None
    end = ends[before - 1]
    starts = _lines_of(context, restarts).get(event.order[0], []) if restarts else []
    if starts and bisect.bisect_right(starts, end) < bisect.bisect_left(starts, line):
        return None  # a restart lies between the end and the event
    return f"after line {end}"


def _lines_of(context: JudgeContext, types: list[str], rules: list[str] | None = None) -> dict[int, list[int]]:
    """Per file (index), the lines of the events of these types or rules, in order."""
    def compute() -> dict[int, list[int]]:
        found: dict[int, list[int]] = defaultdict(list)
        for event in context.events:
            if event.type in types or (rules and event.rule_id in rules):
                found[event.order[0]].append(event.order[1])
        return {index: sorted(lines) for index, lines in found.items()}

    return context.once(("lines_of", tuple(types), tuple(rules or ())), compute)


def before_in_same_file(event: Event, context: JudgeContext, types: list[str]) -> str | None:
    """The event's line comes before the last event of one of `types` in the same file, or is
    that line (a progress line a logger files under ERROR carries its own error word)."""
    lines = _lines_of(context, types).get(event.order[0])
    return f"before line {lines[-1]}" if lines and event.order[1] <= lines[-1] else None


def before_a_quiet_end(event: Event, context: JudgeContext, rules: list[str]) -> str | None:
    """The event's line comes before the last line of one of `rules` in the same file (where the
    run said it ended; not on it: a line may carry what came after), nothing after that line fails
    (a cause, a symptom, a traceback: the processes' output interleaves, so one worker's failure
    may print around another's end), and srun reports no failed task in the file (independent
    tasks end apart: one's end says nothing of another's)."""
    file, line = event.order
    ends = _lines_of(context, [], rules).get(file)
    if not ends or line >= ends[-1] or any(report.order[0] == file for report in _failed_tasks(context)):
        return None
    def compute() -> dict[int, int]:
        last: dict[int, int] = {}
        for other in context.events:
            if other.role in ("cause", "symptom") or other.type == "traceback":
                last[other.order[0]] = max(last.get(other.order[0], 0), other.order[1])
        return last

    failing = context.once(("last_failing_line",), compute).get(file, 0)
    return f"before line {ends[-1]}, where the run ended" if failing <= ends[-1] else None


def _failed_tasks(context: JudgeContext) -> list[Event]:
    """srun's reports of the job's tasks that failed (events.is_failed_task)."""
    return context.once(("failed_tasks",), lambda: [e for e in context.events if is_failed_task(e)])


def no_failed_task_on_its_node(event: Event, context: JudgeContext) -> str | None:
    """srun reports the job's failed tasks, on nodes it names, and none on the event's node: what
    happened there did not end a task."""
    failed_on = {report.node for report in _failed_tasks(context) if report.node}
    if not failed_on or event.node is None or event.node in failed_on:
        return None
    return f"srun reports the failed tasks on {', '.join(sorted(failed_on))}, none on {event.node}"


def closes_a_block_of(event: Event, context: JudgeContext, types: list[str], lines: int,
                      after: list[str] | None = None) -> str | None:
    """The event's line is the first of its type after an event of `types` in the same file, at
    most `lines` lines below it: the end of the block that line opens (the exception a traceback
    under Python's `Exception ignored in:` ends with).  With `after`: only a block opened after an
    event of those types in the same file (the run's own end)."""
    if after and after_in_same_file(event, context, after) is None:
        return None
    def compute() -> dict[int, list[tuple[int, str]]]:
        found: dict[int, list[tuple[int, str]]] = defaultdict(list)
        for other in context.events:
            found[other.order[0]].append((other.order[1], other.type))
        for entries in found.values():
            entries.sort()
        return found

    entries = context.once(("lines_and_types",), compute).get(event.order[0], [])
    line = event.order[1]
    for other_line, other_type in reversed(entries[:bisect.bisect_left(entries, (line, ""))]):
        if other_type in types:
            return f"ends the block of line {other_line}" if line - other_line <= lines else None
        if other_type == event.type:
            return None  # an earlier line of its type closed that block
    return None


def recovered_before_failure(event: Event, context: JudgeContext, recoveries: list[str], connection: dict[str, str],
                             grace: float, besides: dict[str, str] | None = None,
                             says: str = "the filesystem came back before anything failed") -> str | None:
    """The node saw the outage end (an event of `recoveries`) and nothing failed (a cause or
    symptom, besides the outage's own kind: `besides`, an event attribute and its value, storage
    by default) from the loss until `grace` seconds after it ended.  A loss naming its connection
    (the field `connection` gives for its type) ends at that connection's first recovery on the
    node after it; a loss naming none at the node's last recovery."""
    if event.node is None or event.time is None:
        return None
    (own, value), = (besides or {"domain": "storage"}).items()
    by_connection = context.once(("recoveries", tuple(recoveries), tuple(sorted(connection.items()))),
                                 lambda: _recoveries(context.events, recoveries, connection))
    failures = context.once(("failure_times", own, value), lambda: sorted(
        e.time for e in context.events
        if e.role in ("cause", "symptom") and e.time is not None and getattr(e, own) != value))
    ended = _recovered_at(by_connection, event.node, _connection(event, connection), event.time)
    if ended is None:
        return None
    index = bisect.bisect_left(failures, event.time)
    if index < len(failures) and failures[index] <= ended + grace:
        return None
    return says


def _connection(event: Event, connection: dict[str, str]) -> str | None:
    field_name = connection.get(event.type)
    return (event.fields.get(field_name) or None) if field_name else None


def _recoveries(events: list[Event], types: list[str], connection: dict[str, str]) -> dict[tuple, list[float]]:
    """Recovery times by (node, connection), sorted; (node, None) holds every recovery of the node."""
    found: dict[tuple, list[float]] = defaultdict(list)
    for event in events:
        if event.type in types and event.node and event.time is not None:
            found[(event.node, None)].append(event.time)
            named = _connection(event, connection)
            if named:
                found[(event.node, named)].append(event.time)
    for times in found.values():
        times.sort()
    return found


def _recovered_at(recoveries: dict[tuple, list[float]], node: str, connection: str | None, lost_at: float) -> float | None:
    """When the loss ended: its connection's first recovery after it, or the node's last one."""
    times = recoveries.get((node, connection), [])
    if connection is None:
        return times[-1] if times and times[-1] >= lost_at else None
    index = bisect.bisect_left(times, lost_at)
    return times[index] if index < len(times) else None


def noted_on_its_node(event: Event, context: JudgeContext, noted: str, at_least: int, not_noted: str = "") -> str | None:
    """At least `at_least` events of the event's node carry the note `noted` (and not `not_noted`)."""
    def count() -> Counter:
        return Counter(e.node for e in context.events if noted in e.notes and not (not_noted and not_noted in e.notes))

    found = context.once(("noted_on_its_node", noted, not_noted), count)[event.node]
    return f"{found} events of its node are noted {noted}" if found >= at_least else None


def not_in_own_kernel_log(event: Event, context: JudgeContext) -> str | None:
    """A kernel message printed among the job's lines (kernel-side, untrusted) that the node's own
    kernel log, present in the evidence, does not hold (no trusted event of the same rule there;
    for a line naming no node: no node's, when every node's log is present): a forgery or a copy."""
    if event.trusted or not event.kernel_side:
        return None
    confirmed = context.once(("kernel_confirmed",), lambda: {(e.node, e.rule_id) for e in context.events if e.trusted})
    if event.node in context.kernel_logged:
        return None if (event.node, event.rule_id) in confirmed else f"not in {event.node}'s own kernel log"
    every_node_logged = bool(context.job.nodes) and set(context.job.nodes) <= context.kernel_logged
    if event.node is None and every_node_logged and event.rule_id not in {rule for _, rule in confirmed}:
        return "in no node's own kernel log"
    return None


def job_state_disagrees(event: Event, context: JudgeContext) -> str | None:
    """Slurm's own job state is authoritative over a scheduler cause read from a banner or notice:
    a 'CANCELLED' step banner in a FAILED job is teardown, unless the job's exit code says it
    died of the SIGTERM such a banner announces (engine/reconcile.py agreeing_states)."""
    state = job_state(context.job)
    agreeing = agreeing_states(event.category)
    if not state or agreeing is None or state in agreeing:
        return None
    if event.category == "cancelled" and state == "FAILED" and exit_signal(context.job) == SIGTERM:
        return None
    return f"job state {state} disagrees"


def after_the_collectives_stalled(event: Event, context: JudgeContext) -> str | None:
    """A fault later, beyond clock skew, than every collective timeout of the job: the collectives
    had stalled before it, so it cannot be where the hang began (a timeout whose stall it could
    have caused would end after it)."""
    stalled = context.once(("last_timeout",), lambda: max(
        (e.time for e in context.events if e.type in HANG_TYPES and e.role == "symptom" and e.time is not None),
        default=None))
    if event.time is None or stalled is None or event.time <= stalled + SKEW:
        return None
    return "began after the collectives had stalled: it cannot explain them"


SUPPRESS_CHECKS: dict[str, Callable[..., str | None]] = {"outside_job_window": outside_job_window,
                                                         "after_the_collectives_stalled": after_the_collectives_stalled,
                                                         "recovered_before_failure": recovered_before_failure,
                                                         "noted_on_its_node": noted_on_its_node,
                                                         "after_in_same_file": after_in_same_file,
                                                         "before_in_same_file": before_in_same_file,
                                                         "before_a_quiet_end": before_a_quiet_end,
                                                         "no_failed_task_on_its_node": no_failed_task_on_its_node,
                                                         "closes_a_block_of": closes_a_block_of,
                                                         "not_in_own_kernel_log": not_in_own_kernel_log,
                                                         "job_state_disagrees": job_state_disagrees}


# -- explains --------------------------------------------------------------------------------------

def _first_cause_of_each(ordered: list[Event], causes: list[Event], is_effect: Callable[[Event], bool],
                         explains_it: Callable[[Event, Event], bool]) -> list[tuple[Event, Event]]:
    """Each effect (in `ordered`) with the first of `causes`, in their order, that is another
    event and for which explains_it(cause, effect) holds: the shape of most explains checks."""
    edges = []
    for effect in ordered:
        if is_effect(effect):
            cause = next((c for c in causes if c is not effect and explains_it(c, effect)), None)
            if cause is not None:
                edges.append((cause, effect))
    return edges


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
    return _first_cause_of_each(ordered, causes, lambda e: is_effect(e) and e.time is not None,
                                lambda c, effect: c.time <= effect.time + skew)


def nearest_lines(ordered: list[Event], is_cause: Callable[[Event], bool], is_effect: Callable[[Event], bool],
                  reach: int, only_before: bool = False, only_after: bool = False) -> list[tuple[Event, Event]]:
    """Each effect is explained by the first cause (in line order) of its file at most `reach` lines
    before or after it (`only_before`: before it; `only_after`: after it): lines printed together,
    whatever their times."""
    causes = sorted((e for e in ordered if is_cause(e)), key=lambda e: e.order)
    return _first_cause_of_each(ordered, causes, is_effect, lambda c, effect: (
        c.order[0] == effect.order[0] and abs(c.order[1] - effect.order[1]) <= reach
        and not (only_before and c.order[1] >= effect.order[1]) and not (only_after and c.order[1] <= effect.order[1])))


def near_in_time(ordered: list[Event], is_cause: Callable[[Event], bool], is_effect: Callable[[Event], bool],
                 seconds: float) -> list[tuple[Event, Event]]:
    """Each effect is explained by the first cause in line order (files in their order: the first
    record of a fault dmesg and syslog both hold) at most `seconds` before or after it; an untimed
    cause or effect counts as near (the same fault reported twice, its times unknown)."""
    causes = sorted((e for e in ordered if is_cause(e)), key=lambda e: e.order)
    return _first_cause_of_each(ordered, causes, is_effect, lambda c, effect: (
        c.time is None or effect.time is None or abs(c.time - effect.time) <= seconds))


def any_time(ordered: list[Event], is_cause: Callable[[Event], bool],
             is_effect: Callable[[Event], bool]) -> list[tuple[Event, Event]]:
    """Each effect is explained by the first cause in line order, whenever either came (a wait
    that may last the whole job)."""
    return near_in_time(ordered, is_cause, is_effect, float("inf"))


def tolerance(a: Event, b: Event) -> float:
    """How close two times must be to count as simultaneous: clock skew, or more when a line only
    inherited its time from a neighbouring line."""
    return INHERITED_SKEW if a.time_inherited or b.time_inherited else SKEW


def _clearly_earlier(c: Event, later: Event) -> bool:
    """c happened before `later`, clearly (beyond clock skew, which two lines of one file with their
    own stamps do not have: one clock wrote both) and recently enough to explain it."""
    if c.time is None or later.time is None:
        return False
    one_clock = c.order[0] == later.order[0] and not (c.time_inherited or later.time_inherited)
    return later.time - EXPLAIN_HORIZON <= c.time < later.time - (0.0 if one_clock else tolerance(c, later))


def _earlier_in_the_same_file(c: Event, later: Event, reach: int) -> bool:
    """Neither line has a wall-clock time, c comes first in the same file, and soon enough before
    `later` to explain it: by seconds since boot when both have them, else within `reach` lines."""
    if c.time is not None or later.time is not None or c.order[0] != later.order[0] or c.order >= later.order:
        return False
    if c.mono is not None and later.mono is not None:
        return later.mono - EXPLAIN_HORIZON <= c.mono <= later.mono
    return later.order[1] - c.order[1] <= reach


def _same_component(a: Event, b: Event) -> bool:
    """The same GPU when both name one by PCI address, else the same domain of hardware."""
    pci_a, pci_b = a.fields.get("pci"), b.fields.get("pci")
    if pci_a and pci_b:
        return pci_a == pci_b
    return a.domain == b.domain


def earlier_on_the_same_component(ordered: list[Event], is_cause: Callable[[Event], bool],
                                  is_effect: Callable[[Event], bool], reach: int = 20) -> list[tuple[Event, Event]]:
    """Time before strength: each effect is explained by the first cause on the same component that
    came clearly before it (or, neither timed, earlier in the same file within `reach` lines), from
    sources no less trusted."""
    return _first_cause_of_each(ordered, [e for e in ordered if is_cause(e)], is_effect, lambda c, effect: (
        c.trusted >= effect.trusted and _same_component(c, effect)
        and (_clearly_earlier(c, effect) or _earlier_in_the_same_file(c, effect, reach))))


def crash_after_the_fault(ordered: list[Event], is_cause: Callable[[Event], bool],
                          is_effect: Callable[[Event], bool], reach: int = 20) -> list[tuple[Event, Event]]:
    """Each effect (a process killed by a signal) is explained by the first cause before it: by time,
    or at the same time and earlier in the same file, or (untimed) within `reach` lines before it."""
    return _first_cause_of_each(ordered, [e for e in ordered if is_cause(e)], is_effect,
                                lambda c, effect: _crash_followed(c, effect, reach))


def _crash_followed(c: Event, crash: Event, reach: int) -> bool:
    same_file_earlier = c.order[0] == crash.order[0] and c.order < crash.order
    if c.time is not None and crash.time is not None:
        simultaneous = abs(c.time - crash.time) <= tolerance(c, crash)
        return _clearly_earlier(c, crash) or (simultaneous and same_file_earlier)
    return same_file_earlier and crash.order[1] - c.order[1] <= reach


def follows_the_cause(ordered: list[Event], is_cause: Callable[[Event], bool],
                      is_effect: Callable[[Event], bool]) -> list[tuple[Event, Event]]:
    """The chosen cause explains each effect not yet explained that it can by time
    (correlate.explains: it came first, within skew and an hour, or inside a timeout's stall),
    except causes that stand on their own: on other nodes a stronger one and one at strength 3 (a
    kernel-recorded hardware fault there is a rival or an alternative), and anywhere a
    kernel-recorded hardware fault after a program's failure (which does not break a DIMM or a
    GPU; a filesystem's LBUG may well panic the kernel)."""
    chosen = [e for e in ordered if is_cause(e)]
    if len(chosen) != 1:
        return []
    cause = chosen[0]
    edges = []
    for effect in ordered:
        if effect is cause or effect.explained_by is not None or not is_effect(effect):
            continue
        if effect.role == "cause" and effect.node != cause.node and (
                effect.strength > cause.strength or (effect.strength >= 3 and effect.node is not None and cause.node is not None)):
            continue  # stronger, or at strength 3 on another node: it stands on its own
        if effect.role == "cause" and effect.trusted and effect.domain in DRAINABLE_DOMAINS and cause.domain == "application":
            continue
        if explains(cause, effect):
            edges.append((cause, effect))
    return edges


EXPLAINS_CHECKS: dict[str, Callable[..., list[tuple[Event, Event]]]] = {"same_burst": same_burst, "cause_first": cause_first,
                                                                        "nearest_lines": nearest_lines,
                                                                        "near_in_time": near_in_time, "any_time": any_time,
                                                                        "earlier_on_the_same_component": earlier_on_the_same_component,
                                                                        "crash_after_the_fault": crash_after_the_fault,
                                                                        "follows_the_cause": follows_the_cause}


# -- aggregate -------------------------------------------------------------------------------------

def values_differ(members: list[Event], context: JudgeContext, field: str,
                  odd_one_out: bool = False) -> tuple[list[Event], dict] | None:
    """The group's events carry at least two values of `field` (compared case-blind): `each` names
    the ranks (else the nodes) of each value ('ALLREDUCE on rank(s) 0, 1; BROADCAST on rank(s) 5').
    With `odd_one_out`, a value fewer events carry than every other comes first: its first event
    is the one promoted (one node running another library version than the rest)."""
    by_value: dict[str, list[Event]] = defaultdict(list)
    for event in members:
        by_value[str(event.fields[field]).upper()].append(event)
    if len(by_value) < 2:
        return None
    each = "; ".join(f"{value} on {_where(group)}" for value, group in sorted(by_value.items()))
    if odd_one_out:
        sizes = sorted(len(group) for group in by_value.values())
        if sizes[0] < sizes[1]:
            rarest = next(group for group in by_value.values() if len(group) == sizes[0])
            chosen = {id(e) for e in rarest}  # events compare by value: two alike are not one
            return rarest + [e for e in members if id(e) not in chosen], {"each": each}
    return members, {"each": each}


def _where(group: list[Event]) -> str:
    ranks = [str(rank) for e in group for rank in ranks_of(e)]
    if ranks:
        return f"rank(s) {', '.join(ranks)}"
    nodes = sorted({e.node for e in group if e.node})
    return f"node(s) {', '.join(nodes)}" if nodes else "?"


def _joined(members: list[Event], size: str) -> tuple[list[Event], int, Counter] | None:
    """The members that name their rank and the group's size, the size (the largest value of
    `size`), and how often each rank joined."""
    ranked = [e for e in members if e.rank is not None and e.fields.get(size)]
    if not ranked:
        return None
    return ranked, max(e.fields[size] for e in ranked), Counter(e.rank for e in ranked)


def repeated_ranks(members: list[Event], context: JudgeContext, size: str = "world") -> tuple[list[Event], dict] | None:
    """A global rank joined more than once while fewer distinct ranks joined than the job's size
    (the largest value of `size`): too many tasks for what the trainer expects.  A restart repeats
    every rank, so it does not hold.  The events of the repeated ranks may be promoted."""
    joined = _joined(members, size)
    if joined is None:
        return None
    ranked, world, seen = joined
    repeated = sorted(rank for rank, count in seen.items() if count > 1)
    if not repeated or len(seen) >= world:
        return None
    return [e for e in ranked if e.rank in repeated], {"repeated": ", ".join(map(str, repeated)), "joined": len(seen),
                                                       "world": world}


PROGRESS_TYPES = ("job_progress", "job_progress_done", "work_progress")  # the run got past its start


def missing_ranks(members: list[Event], context: JudgeContext, size: str = "world") -> tuple[list[Event], dict] | None:
    """Fewer distinct ranks joined than the job's size (the largest value of `size`), none twice,
    and the run printed no progress at all: the other processes were never started, and the ones
    that were wait for them.  The members may be promoted."""
    joined = _joined(members, size)
    if joined is None or any(e.type in PROGRESS_TYPES for e in context.events):
        return None
    ranked, world, seen = joined
    if len(seen) >= world or max(seen.values()) > 1:
        return None
    return ranked, {"joined": len(seen), "world": world}


def waiting_for_rank_zero(members: list[Event], context: JudgeContext, max_seq: int, reach: int,
                          max_bytes: int) -> tuple[list[Event], dict] | None:
    """Ranks that timed out in one of their first collectives (sequence number at most `max_seq`)
    while rank 0 reports no timeout, and a progress bar short of 100 % within `reach` lines of one
    of them (files up to `max_bytes`, each read once): rank 0 was still setting up.  `ranks` and
    `seq` name them."""
    ranked = [e for e in members if e.rank is not None]
    early = [e for e in ranked if isinstance(e.fields.get("seq"), int) and e.fields["seq"] <= max_seq]
    if not early or len(early) != len(ranked) or any(0 in ranks_of(e) for e in ranked):
        return None
    if context.evidence is None or not _progress_nearby(context.evidence, early, reach, max_bytes):
        return None  # no sign that rank 0 was still working: a hang at the first collective
    first = min(early, key=lambda e: e.sort_key)
    return early, {"ranks": ", ".join(str(r) for r in sorted({r for e in early for r in ranks_of(e)})), "seq": first.fields["seq"]}


# A tqdm progress bar still counting (`Running tokenizer on dataset:   9%|███| 280000/2969526 [29:55<...`).
PROGRESS_BAR = re.compile(rb"\b\d{1,2}%\|[^|\n]*\| *\d+/\d+ \[\d")


def _progress_nearby(evidence: Evidence, events: list[Event], reach: int, max_bytes: int) -> bool:
    by_source: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        by_source[event.source].append(event)
    for source in evidence.files:
        near = by_source.get(source.rel)
        if not near or source.content_size() > max_bytes:
            continue
        lines = source.read_all().split(b"\n")
        for event in near:
            at = event.line - (source.line_offset or 0) - 1
            if any(PROGRESS_BAR.search(line) for line in lines[max(0, at - reach): at + reach + 1]):
                return True
    return False


AGGREGATE_CHECKS: dict[str, Callable[..., tuple[list[Event], dict] | None]] = {"values_differ": values_differ,
                                                                                "repeated_ranks": repeated_ranks,
                                                                                "missing_ranks": missing_ranks,
                                                                                "waiting_for_rank_zero": waiting_for_rank_zero}


# -- the job as a whole ----------------------------------------------------------------------------

def job_completed(context: JudgeContext) -> bool:
    """Slurm recorded the job COMPLETED: every step exited 0."""
    return context.job.state == "COMPLETED"


def job_not_completed(context: JudgeContext) -> bool:
    """Slurm did not record the job COMPLETED."""
    return not job_completed(context)


def job_failed(context: JudgeContext) -> bool:
    """Slurm recorded how the job ended, and not as COMPLETED."""
    return bool(context.job.state) and not job_completed(context)


def no_job_state(context: JudgeContext) -> bool:
    """The bundle holds no record of how Slurm ended the job (no job.json state, no sacct row)."""
    return not context.job.state


def job_ran_to_its_end(context: JudgeContext) -> bool:
    """A positive end: Slurm recorded the job COMPLETED, or, with no state recorded, the program
    said it finished (progress done, its own exit line)."""
    return job_completed(context) or (not context.job.state and not no_completion_marker(context))


def no_collective_timeout(context: JudgeContext) -> bool:
    """No collective timed out: a task that exits after its collectives stalled was ended by the
    watchdog, and the hang is the story (judged without a cause)."""
    return not any(e.type in HANG_TYPES and e.role != "context" for e in context.events)


COMPLETION_MARKERS = ("job_progress_done", "program_exit", "elastic_run_finished", "run_finished")  # the job said it finished


def said_it_finished(events: list[Event]) -> bool:
    """The program said it finished (progress done, a normal exit, the elastic agent's finish, the
    run's own end record)."""
    return any(e.type in COMPLETION_MARKERS for e in events)


def no_completion_marker(context: JudgeContext) -> bool:
    """The program never said it finished (said_it_finished)."""
    return not said_it_finished(context.events)


def stalled_progress(events: list[Event]) -> Event | None:
    """The last progress line (the latest in time; a line without one counts as its file's last),
    when it stopped short of its planned end (k < N), nothing follows it on its line (a shell's
    `Killed` after a bar) and the program never said it finished: a run that stalled, which is
    no success (issue 20: success needs a positive end)."""
    progress = [e for e in events if e.type == "job_progress" and isinstance(e.fields.get("total"), int)]
    if not progress or said_it_finished(events):
        return None
    last = max(progress, key=lambda e: e.sort_key)
    stopped_short = last.fields.get("done", 0) < last.fields["total"]
    return last if stopped_short and not str(last.fields.get("after") or "").strip() else None


def no_cause_but_the_scheduler(context: JudgeContext) -> bool:
    """Nothing failed: no event is a cause but the scheduler's end (a cancel, a time limit)."""
    return not any(e.role == "cause" and e.domain != "scheduler" for e in context.events)


JOB_CHECKS: dict[str, Callable[[JudgeContext], bool]] = {"job_not_completed": job_not_completed,
                                                         "job_completed": job_completed,
                                                         "job_failed": job_failed,
                                                         "no_job_state": no_job_state,
                                                         "job_ran_to_its_end": job_ran_to_its_end,
                                                         "no_cause_but_the_scheduler": no_cause_but_the_scheduler,
                                                         "no_collective_timeout": no_collective_timeout,
                                                         "no_completion_marker": no_completion_marker}


def check_problem(kind: str, check: dict[str, dict], only_if: list[str]) -> str | None:
    """Why a relation's named checks cannot run (unknown name, a parameter the check does not
    take), or None."""
    table = {"suppress": SUPPRESS_CHECKS, "explains": EXPLAINS_CHECKS, "aggregate": AGGREGATE_CHECKS, "origin": {}}[kind]
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
