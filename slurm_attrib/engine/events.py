"""From scanner hits to events: each hit placed in time and on a node."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from slurm_attrib.ingest.origin import line_origin
from slurm_attrib.ingest.timestamps import (
    NO_TIME,
    LineTime,
    last_time,
    parse_line_time,
    time_after,
    time_before,
    evidence_year,
)
from slurm_attrib.ingest.types import Evidence, JobContext, SourceFile
from slurm_attrib.ruleset.scanner import Hit, Scanner


@dataclass(slots=True)
class Event:
    rule_id: str
    title: str
    type: str
    domain: str
    category: str | None
    role: str
    severity: str
    strength: int
    source: str
    line: int
    text: str
    kind: str
    trusted: bool
    kernel_side: bool  # the rule reads kernel messages: in job output such a line is only a claim
    order: tuple[int, int]  # (file index, line): the order of lines that have no time
    time: float | None = None  # UNIX seconds, UTC
    time_inherited: bool = False  # taken from a nearby line of the same file
    mono: float | None = None  # seconds since boot, for kernel lines not yet placed on the wall clock
    body: str = ""  # the message without its time and host prefix, to find the same line elsewhere
    node: str | None = None
    host: str | None = None  # host named by the line itself (prefix, syslog field, Slurm banner)
    rank: int | None = None
    task: int | None = None  # srun task number (`srun --label` prefix, `srun: error: node: task N`)
    fields: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    explained_by: "Event | None" = None

    @property
    def sort_key(self) -> tuple:
        return (self.time if self.time is not None else float("inf"), self.order)


INHERIT_LINES = 200


def last_seen(evidence: Evidence, boot_times: dict[str, float]) -> dict[str, float]:
    """Per node, the latest time any of its own files wrote a line: when it was last alive."""
    year = evidence_year(evidence)
    seen: dict[str, float] = {}
    for source in evidence.files:
        if not source.node:
            continue
        stamp = last_time(source.data, year)
        moment = stamp.wall
        if moment is None and stamp.mono is not None and source.node in boot_times:
            moment = boot_times[source.node] + stamp.mono
        if moment is not None:
            seen[source.node] = max(moment, seen.get(source.node, moment))
    return seen


def extract_events(evidence: Evidence, scanner: Scanner, boot_times: dict[str, float]) -> list[Event]:
    year = evidence_year(evidence)
    events: list[Event] = []
    for index, source in enumerate(evidence.files):
        clock = FileClock(source, year, boot_times.get(source.node) if source.node else None)
        file_events = [_event_from_hit(hit, source, index, clock) for hit in scanner.scan(source.data, source.kind)]
        _date_from_later_events(file_events)
        events.extend(file_events)
    return events


def _date_from_later_events(file_events: list[Event]) -> None:
    """Lines with no time take the time of the next dated event in the same file (a Slurm banner
    states its moment): they happened no later, and line order is the file's own clock."""
    later: float | None = None
    for event in reversed(file_events):
        if event.time is None and event.mono is None and later is not None:
            event.time, event.time_inherited = later, True
        elif event.time is not None:
            later = event.time


class FileClock:
    """Times of the lines of one file; lines without a time inherit one from a nearby line.

    An error printed without a time (a traceback, an NCCL WARN) comes in a burst that the next
    stamped line closes; the previous stamped line may be minutes older, so it is the fallback.
    Hits come in file order, so one look-ahead serves every hit of a burst.
    """

    def __init__(self, source: SourceFile, year: int | None, boot: float | None):
        self.source, self.year, self.boot = source, year, boot
        self._ahead: tuple[int, LineTime] = (-1, NO_TIME)  # (offset the look-ahead covered to, result)
        self._behind: tuple[int, LineTime] = (-1, NO_TIME)  # (offset of the last look-back, result)

    def time_of(self, text: str, offset: int) -> tuple[float | None, float | None, bool]:
        """(wall time, seconds since boot, inherited) of the line at `offset`."""
        stamp = parse_line_time(text, self.year)
        inherited = False
        if stamp.wall is None and stamp.mono is None:
            stamp = self._inherited(offset)
            inherited = True
        if stamp.wall is not None:
            return stamp.wall, None, inherited
        if stamp.mono is not None and self.boot is not None:
            return self.boot + stamp.mono, stamp.mono, inherited
        return None, stamp.mono, inherited

    def _inherited(self, offset: int) -> LineTime:
        covered_to, found = self._ahead
        if offset >= covered_to:
            found, covered_to = time_after(self.source.data, offset, self.year, max_lines=INHERIT_LINES)
            self._ahead = (covered_to, found)
        if found.wall is None and found.mono is None:
            return self._behind_of(offset)
        return found

    def _behind_of(self, offset: int) -> LineTime:
        """Nearest stamped line above; only the lines since the previous look-back are read again."""
        previous_offset, previous = self._behind
        lines = INHERIT_LINES
        if 0 <= previous_offset <= offset:
            lines = min(lines, self.source.data.count(b"\n", previous_offset, offset) + 1)
        found = time_before(self.source.data, offset, self.year, max_lines=lines)
        if found.wall is None and found.mono is None and previous_offset >= 0:
            found = previous
        self._behind = (offset, found)
        return found


def _event_from_hit(hit: Hit, source: SourceFile, index: int, clock: FileClock) -> Event:
    first_line = hit.text.split("\n", 1)[0]
    event = Event(
        rule_id=hit.rule.id,
        title=hit.rule.title,
        type=hit.rule.event.type,
        domain=hit.domain,
        category=hit.category,
        role=hit.role,
        severity=hit.severity,
        strength=hit.strength,
        source=source.rel,
        line=source.original_line(hit.lineno),
        text=hit.text,
        kind=source.kind,
        trusted=source.trusted,
        kernel_side="kernel" in hit.rule.sources,
        order=(index, hit.lineno),
        fields=hit.fields,
        notes=dict(hit.notes),
    )
    event.time, event.mono, event.time_inherited = clock.time_of(first_line, hit.offset)
    if event.time_inherited and hit.fields.get("at"):
        # A Slurm banner states its own moment: `CANCELLED AT 2026-12-02T13:00:00`.
        stated = parse_line_time(str(hit.fields["at"]), None).wall
        if stated is not None:
            event.time, event.time_inherited = stated, False
    event.body = _body(first_line, hit.rule.match.contains)
    origin = line_origin(first_line)
    event.host = hit.fields.get("node") or hit.fields.get("host") or origin.host
    event.rank = hit.fields.get("rank", origin.rank)
    if isinstance(event.rank, str):
        event.rank = int(event.rank) if event.rank.isdigit() else None
    task = hit.fields.get("task")
    event.task = origin.task if origin.task is not None else (int(task) if str(task).isdigit() else None)
    event.node = source.node
    return event


def _body(line: str, literals: list[str]) -> str:
    starts = [line.find(lit) for lit in literals if lit in line]
    return line[min(starts):] if starts else line


def anchor_boot_clock(events: list[Event]) -> None:
    """Place seconds-since-boot lines on the wall clock through a second copy of the same lines.

    The same kernel message often sits in dmesg (seconds since boot) and in syslog or the journal
    (wall clock); each such pair on one node gives that node's boot time.
    """
    walls: dict[tuple, list[float]] = defaultdict(list)
    for event in events:
        if event.mono is None and event.time is not None and event.node and not event.time_inherited:
            walls[(event.node, event.rule_id, event.body)].append(event.time)
    offsets: dict[str, list[float]] = defaultdict(list)
    for event in events:
        if event.time is None and event.mono is not None and not event.time_inherited:
            matches = walls.get((event.node, event.rule_id, event.body), [])
            if len(matches) == 1:
                offsets[event.node].append(matches[0] - event.mono)
    boots = {node: sorted(values)[len(values) // 2] for node, values in offsets.items()}
    for event in events:
        if event.time is None and event.mono is not None and event.node in boots:
            event.time = boots[event.node] + event.mono
            event.notes["time_from"] = "boot time from the same line in another log"


def resolve_nodes(events: list[Event], job: JobContext) -> None:
    """Give job-level events a node: from the host they name, else their rank or srun task.

    Ranks map to nodes through NCCL's init lines and torchrun's root-cause table; srun tasks
    through any line that shows both a task label and a host.
    """
    known = set(job.nodes) | {e.node for e in events if e.node}
    # Job output is stored on one node (the batch host) but its lines come from every node:
    # what a line says about its origin wins; the file's node is only the fallback.
    stored_on = {id(e): e.node for e in events if e.kind == "app"}
    matched: dict[str, str] = {}
    for event in events:
        if event.kind == "app":
            event.node = None
        if event.node is None and event.host:
            if event.host not in matched:
                matched[event.host] = match_host(event.host, known)
            event.node = matched[event.host]
    rank_to_node: dict[int, str] = {}
    task_to_node: dict[int, str] = {}
    for event in sorted(events, key=lambda e: e.order):
        if event.node and event.rank is not None and event.type in ("nccl_rank", "elastic_root_cause"):
            rank_to_node.setdefault(event.rank, event.node)
        if event.node and event.task is not None:
            task_to_node.setdefault(event.task, event.node)
    for event in events:
        if event.node is None and event.rank is not None:
            event.node = rank_to_node.get(event.rank)
        if event.node is None and event.task is not None:
            event.node = task_to_node.get(event.task)
        if event.node is None:
            event.node = stored_on.get(id(event))


def match_host(host: str, known: set[str]) -> str:
    """A host as printed ('gpu03', 'gpu03.cluster', 'gpu03-ib0') matched to a known node name."""
    if host in known or not known:
        return host
    short = host.split(".", 1)[0]
    if short in known:
        return short
    for node in sorted(known, key=lambda name: (-len(name), name)):
        if short.startswith(node) and not short[len(node) : len(node) + 1].isalnum():
            return node
        if node.split(".", 1)[0] == short:
            return node
    return host
