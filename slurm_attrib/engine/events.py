"""From scanner hits to events: each hit placed in time and on a node."""

from __future__ import annotations

import copy
import heapq
import os
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from slurm_attrib.engine.counting import (
    COUNT_FROM_BYTES, COUNTED_KINDS, Count, NoiseCounter, arrow_available, member_offsets,
)
from slurm_attrib.engine.jobwindow import window_side
from slurm_attrib.hostlist import expand
from slurm_attrib.ingest.kinds import SLURM_DAEMON_LINE, name_hint
from slurm_attrib.ingest.origin import Origin, line_origin
from slurm_attrib.ingest.timestamps import (
    NO_TIME,
    LineTime,
    boot_observations,
    boot_times_from,
    last_time,
    merge_observations,
    parse_line_time,
    time_after,
    time_before,
    evidence_year,
)
from slurm_attrib.ingest.types import Evidence, JobContext, SourceFile
from slurm_attrib.provenance import Provenance, supports_verdict
from slurm_attrib.ruleset.scanner import LINE_BYTES, Hit, Scanner, line_text
from slurm_attrib.ruleset.spec import Rule
from slurm_attrib.timebounds import sane_time


@dataclass(slots=True)
class RankShare:
    """The lines of one rank in a cascade's event whose lines name no task or host (its node is
    known only once ranks map to nodes, and the event is split by node then: _cascade_parts): how
    many, and the first one's line number in the file (and in the original, for a merged source),
    time and text."""
    lineno: int
    line: int
    time: float | None  # the first line's time (UNIX seconds, UTC), once placed (scan_evidence)
    mono: float | None  # ... its seconds since boot, while not placed on the wall clock
    text: str
    lines: int = 1


class _SharedNotes(dict):
    """Notes that events share, read-only (Event.note writes a new set): most events have none,
    and the rest a few sets (`outside_window: before the job started`); a dict per event took
    10 MB at 4,096 nodes."""

    __slots__ = ()
    __hash__ = object.__hash__  # a dataclass field's default must be hashable (immutable)

    def _refuse(self, *args, **kwargs):
        raise TypeError("an event's notes are written with Event.note()")

    __setitem__ = __delitem__ = __ior__ = pop = popitem = setdefault = update = clear = _refuse

    def __reduce__(self):
        return _shared_notes, (tuple(self.items()),)


NO_NOTES = _SharedNotes()
MAX_SHARED = 65536  # copies kept per kind: hostile input may hold any number of values (started over then)


def _one_copy(kept: dict, key: Any, value: Any) -> Any:
    """The copy `kept` holds under `key`, `value` itself when it holds none yet."""
    if len(kept) >= MAX_SHARED:
        kept.clear()
    return kept.setdefault(key, value)


_NOTES: dict[tuple, _SharedNotes] = {}


def _shared_notes(items: tuple) -> dict[str, Any]:
    """The one shared copy of these notes (their own dict when a value is unhashable)."""
    if not items:
        return NO_NOTES
    try:
        hash(items)
    except TypeError:
        return dict(items)
    shared = _NOTES.get(items)
    return shared if shared is not None else _one_copy(_NOTES, items, _SharedNotes(items))


# The sequences of relations that decided events, one copy each: the same few decide a many-node
# job's noise (a list per event took 10 MB at 4,096 nodes).
_DECIDED: dict[tuple[str, ...], tuple[str, ...]] = {}


@dataclass(frozen=True, slots=True)
class EventHead:
    """What an event's rule says of every line it reads, shared by the rule's events (a 4,096-node
    job holds 230,000 events of a few dozen rules)."""
    title: str
    type: str
    kernel_side: bool = False  # the rule reads kernel messages: anywhere but the kernel's own log, a claim
    literals: list[str] = field(default_factory=list)  # the rule's match.contains: where its message begins
    fallback: bool = False  # from a second-look rule: a lead, not a finding
    onset: str | None = None  # the rule's event.onset: how the failure the line reports is dated
    reports_on: str | None = None  # the rule's event.reports_on: "named_node" (the node it names) or "job" (some node)
    vendor: str | None = None  # the rule's event.vendor: the GPU's maker when not NVIDIA


@dataclass(frozen=True, slots=True)
class FileHead:
    """What an event's file says of every line it holds, shared by the file's events (a 4,096-node
    job's 230,000 events came from 8,194 files)."""
    rel: str  # the file's path in the evidence: the contract's evidence `source`
    kind: str
    provenance: Provenance
    index: int  # the file's number in the evidence (-1: the job's record): the first part of an event's order
    line_offset: int = 0  # the original's lines before the kept data's first (SourceFile.line_offset)
    source: SourceFile | None = field(default=None, compare=False, repr=False)  # where a line is read again (Event.text)
    identity: int | None = field(default=None, compare=False, repr=False)  # the file's when scanned (SourceFile.identity)

    def __reduce__(self):
        """Without the file: a worker process's events get it back in the parent (_with_its_file)."""
        return FileHead, (self.rel, self.kind, self.provenance, self.index, self.line_offset, None, self.identity)

    def text_at(self, where: int) -> str:
        """The text of the line the file holds at `where` (Window.at), read again as the scan read it."""
        try:
            data = self.source.bytes_at(where, LINE_BYTES, self.identity)
        except OSError as error:  # the file went away or was replaced (a log rotated) during the analysis
            data, why = b"", error.strerror or str(error)
        else:
            why = "the file is shorter now"
        return line_text(data) if data else f"(the line at byte {where} of {self.rel} could not be read again: {why})"


@dataclass(slots=True)
class Event:
    rule_id: str
    head: EventHead
    domain: str
    category: str | None
    role: str
    severity: str
    strength: int
    file: FileHead
    line: int  # in the original file
    # the line's text; or where its file holds it (FileHead.text_at): read again when shown, which
    # most lines never are (the text of a 4,096-node job's 230,000 events took 40 MB)
    line_text: str | int
    trusted: bool  # provenance.supports_verdict: may support a drain, a fleet strike, `confirmed`
    time: float | None = None  # UNIX seconds, UTC
    time_inherited: bool = False  # taken from a nearby line of the same file
    mono: float | None = None  # seconds since boot, for kernel lines not yet placed on the wall clock
    node: str | None = None
    host: str | None = None  # host named by the line itself (prefix, syslog field, Slurm banner)
    rank: int | None = None
    task: int | None = None  # srun task number (`srun --label` prefix, `srun: error: node: task N`)
    fields: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Any] = NO_NOTES  # written with note() (shared sets: _SharedNotes)
    explained_by: "Event | None" = None
    repeats: int = 1  # lines this event stands for (a collapsing rule's hits, event.collapse)
    last_time: float | None = None  # with repeats: the time of the last of them, when it has its own
    last_mono: float | None = None  # ... and its seconds since boot, while not placed on the wall clock
    # a cascade's event (rule event.cascade): its ranks, with their lines when these name no task
    # or host (None: the rank alone, which is all the judgement reads of it; 32,768 ranks' shares
    # were a tenth of a 4,096-node job's memory)
    ranks: dict[int, RankShare | None] | None = None
    decided_by: tuple[str, ...] = ()  # ids of the relations that changed it, in order (decide())
    chosen: bool = False  # the cause the ranking chose: what the link stratum's relations read

    def note(self, key: str, value: Any) -> None:
        notes = dict(self.notes)
        notes[key] = value
        self.notes = _shared_notes(tuple(notes.items()))

    def drop_note(self, key: str) -> None:
        if key in self.notes:
            self.notes = _shared_notes(tuple((k, v) for k, v in self.notes.items() if k != key))

    def decide(self, relation_id: str) -> None:
        """Record that a relation changed the event."""
        decided = (*self.decided_by, relation_id)
        self.decided_by = _one_copy(_DECIDED, decided, decided)

    @property
    def text(self) -> str:
        text = self.line_text
        return text if text.__class__ is str else self.file.text_at(text)

    @text.setter
    def text(self, value: str) -> None:
        self.line_text = value

    @property
    def source(self) -> str:
        return self.file.rel

    @property
    def kind(self) -> str:
        return self.file.kind

    @property
    def provenance(self) -> Provenance:
        return self.file.provenance

    @property
    def order(self) -> tuple[int, int]:
        """(file index, line number in the kept data): the order of lines that have no time."""
        return (self.file.index, self.line - self.file.line_offset)

    @property
    def title(self) -> str:
        return self.head.title

    @property
    def type(self) -> str:
        return self.head.type

    @property
    def kernel_side(self) -> bool:
        return self.head.kernel_side

    @property
    def literals(self) -> list[str]:
        return self.head.literals

    @property
    def fallback(self) -> bool:
        return self.head.fallback

    @property
    def onset(self) -> str | None:
        return self.head.onset

    @property
    def reports_on(self) -> str | None:
        return self.head.reports_on

    @property
    def vendor(self) -> str | None:
        return self.head.vendor

    @property
    def body(self) -> str:
        """The message without its time and host prefix, to find the same line elsewhere."""
        return _body(self.text.split("\n", 1)[0], self.literals)

    @property
    def sort_key(self) -> tuple:
        return (self.time if self.time is not None else float("inf"), self.order)


INHERIT_LINES = 200
# Sources of log lines, where a kernel message may stand beside (or be forged among) other lines;
# probes (nvidia-smi, sysfs, metrics) print formats of their own.
LOG_KINDS = ("kernel", "syslog", "app")
CLOCK_KINDS = ("kernel", "syslog")  # the logs whose lines may set a node's boot clock (its boot time)


def _last_seen_from(stamps: list[tuple[str, LineTime]], boot_times: dict[str, float]) -> dict[str, float]:
    seen: dict[str, float] = {}
    for node, stamp in stamps:
        moment = stamp.wall
        if moment is None and stamp.mono is not None and node in boot_times:
            moment = sane_time(boot_times[node] + stamp.mono)
        if moment is not None:
            seen[node] = max(moment, seen.get(node, moment))
    return seen


@dataclass
class ScanResult:
    events: list[Event]
    boot_times: dict[str, float]
    last_seen: dict[str, float]
    minutes: list[list[Event]]  # per key, a collapsing rule's events of boot-relative lines, one per minute (join_minutes)
    anchored: dict[str, float] = field(default_factory=dict)  # boot times anchored while scanning (anchor_boot_clock)


def scan_evidence(evidence: Evidence, scanner: Scanner, boot_times: dict[str, float] | None = None) -> ScanResult:
    """One pass over the evidence, one file at a time, a large file window by window: the events,
    the nodes' boot times (`boot_times` when given, else estimated from the same pass) and when
    each node was last seen.  Only one window of one file is in memory at a time (per process:
    SATTRIB_SCAN_WORKERS shares the files out to worker processes, see _scan_files).
    When each kernel and syslog file is one node's, a node's files are settled once its last one
    is read (_settle_node): its per-minute events of boot-relative lines are joined then, not held until
    the whole job is read (a quarter of a 4,096-node job's events)."""
    year = evidence_year(evidence)
    files = evidence.files
    nodes_files = _files_of_each_node(files) if _clocks_in_own_files(files) else {}
    scans: list[_FileScan | None] = [None] * len(files)
    later_minutes: list[list[Event]] = []
    anchored: dict[str, float] = {}
    text_later = "settled" if nodes_files else "now"
    for index, scan in _scan_files(evidence, scanner, year, boot_times is None, _scan_order(files), text_later):
        scans[index] = scan
        indexes = nodes_files.get(files[index].node)
        if indexes and indexes[-1] == index:  # a node's files are scanned in their order
            own: dict[str, list[float]] = {}
            for one in indexes:
                merge_observations(own, scans[one].observations)
            boots = boot_times if boot_times is not None else boot_times_from(own)
            later_minutes += _settle_node([scans[one] for one in indexes], boots, evidence.job, anchored)
    observations: dict[str, list[float]] = {}
    for scan in scans:
        merge_observations(observations, scan.observations)  # in file order: at most so many pairs a node
    boots = boot_times if boot_times is not None else boot_times_from(observations)
    settled = {index for indexes in nodes_files.values() for index in indexes}
    later_minutes += _place([scan for index, scan in enumerate(scans) if index not in settled], boots)
    events = [event for scan in scans for event in scan.events]
    stamps = [(source.node, scan.last) for source, scan in zip(files, scans) if source.node]
    return ScanResult(events, boots, _last_seen_from(stamps, boots), later_minutes, anchored)


def _scan_order(files: list[SourceFile]) -> list[int]:
    """The job's own files first (its output, the controller's logs), then the nodes' files, each in
    file order: a job output's scan holds the keys of its events until it ends (40 MB for 32,768
    ranks), which costs least before the nodes' events are held."""
    return ([index for index, source in enumerate(files) if source.node is None]
            + [index for index, source in enumerate(files) if source.node is not None])


def _place(scans: list["_FileScan"], boots: dict[str, float]) -> list[list[Event]]:
    """Place files' events in time by their nodes' boot times; their runs of per-minute events,
    handed over to be joined (join_minutes)."""
    runs = []
    for scan in scans:
        for event in scan.events:
            _place_in_time(event, boots.get(event.node) if event.node else None)
        _date_from_later_events(scan.events)
        runs += scan.minutes.values()
        scan.minutes = {}
    return runs


def _settle_node(scans: list["_FileScan"], boots: dict[str, float], job: JobContext,
                 anchored: dict[str, float]) -> list[list[Event]]:
    """Place one node's files' events, anchor its boot-relative lines through its own logs
    (anchor_boot_clock, into `anchored`) and join the runs of per-minute events whose every event
    is placed now (nothing later moves them: join_minutes gives the same then as after
    resolve_nodes).  The runs left to join."""
    runs = _place(scans, boots)
    events = [event for scan in scans for event in scan.events]
    anchored.update(anchor_boot_clock(events))
    placed = [run for run in runs if all(event.time is not None for event in run)]
    join_minutes(events, placed, job)
    if len(events) < sum(len(scan.events) for scan in scans):
        kept = set(map(id, events))
        for scan in scans:
            scan.events = [event for event in scan.events if id(event) in kept]
    unplaced = any(event.time is None and event.mono is not None for event in events)
    for scan in scans:
        if not unplaced:  # the pipeline's anchor_boot_clock reads no text of this node's lines
            for event, where in scan.text_later:
                event.line_text = where
        scan.text_later = []
    return [run for run in runs if any(event.time is None for event in run)]


def _clocks_in_own_files(files: list[SourceFile]) -> bool:
    """Whether the lines that set a node's clock (its boot time: kernel and syslog lines) are all
    in its own files: no job-level syslog, which may name any node."""
    return all(f.node is not None for f in files if f.kind in CLOCK_KINDS)


def _files_of_each_node(files: list[SourceFile]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = defaultdict(list)
    for index, source in enumerate(files):
        if source.node is not None:
            found[source.node].append(index)
    return found


@dataclass
class _FileScan:
    """One file's events, their times as their lines state them (wall clock or seconds since
    boot: placed once every file's boot-time observations are in, scan_evidence)."""
    events: list[Event]
    observations: dict[str, list[float]]  # boot-time observations (kernel and syslog files)
    last: LineTime  # the time of the file's last stamped line
    # collapsed events of lines with only a boot-relative time, one per minute (_when), by the rest
    # of their key, in file order: joined once placed on the wall clock (join_minutes)
    minutes: dict[tuple, list[Event]] = field(default_factory=dict)
    # events of kernel and syslog lines and where their lines are: they keep only that once their
    # node is settled (_settle_node)
    text_later: list[tuple[Event, int]] = field(default_factory=list)


TextLater = Literal["", "now", "settled"]


def _scan_file(index: int, source: SourceFile, scanner: Scanner, year: int | None, want_boots: bool,
               job: JobContext, counter: NoiseCounter | None = None,
               shared: _Shared | None = None, text_later: TextLater = "") -> _FileScan:
    """text_later: "" (events keep their lines' text), "now" (events keep where their lines are:
    FileHead.text_at) or "settled" (so do events of kernel and syslog lines, once their node is
    settled: anchor_boot_clock reads their text)."""
    clock = FileClock(source, year)
    scan = _FileScan([], {}, NO_TIME)
    file = FileHead(source.rel, source.kind, source.provenance, index, source.line_offset or 0, source,
                    source.identity())
    clock_kind = source.kind in CLOCK_KINDS
    if clock_kind and text_later == "now":
        text_later = ""
    # per key, [its event, and in this window the offset and stamp of its last line so far (-1: none
    # yet)]: a counted group's last line may lie past later hits
    collapsed: dict[tuple, list] = {}
    tail, line, first_window = b"", 1, True
    for window in source.windows():
        clock.enter(window.data, window.offset)
        ends = ("both" if window.last else "first") if first_window else ("last" if window.last else "none")
        counts, candidates = ([], None) if counter is None else counter.split(
            index, window.data, source.kind, window.begin, window.end, line)
        hits = scanner.scan(window.data, source.kind, window.begin, window.end, line, ends, candidates)
        counted, unsure = _checked_counts(counts, window.data, source.kind, scanner, clock, job)
        if unsure:
            hits = sorted(hits + unsure, key=_offset_of)  # stable: a line's hits keep their order
        first_window = False
        joined: list[list] = []  # the entries of `collapsed` whose events more lines joined in this window
        read_at = -1  # the offset of the line read last: the hits on one line share its time and origin
        items = heapq.merge(hits, counted, key=_offset_of) if counted else hits
        for item in items:
            if item.__class__ is _Counted:
                hit, first_line, stamp, origin, inherited, read_at = item.hit, item.text, item.stamp, item.origin, False, -1
            else:
                hit = item
                if hit.offset != read_at:
                    read_at, first_line = hit.offset, hit.text
                    if "\n" in first_line:
                        first_line = first_line.partition("\n")[0]
                    stamp, inherited = clock.stamp_of(first_line, hit.offset)
                    origin = line_origin(first_line)
            key = _event_key(hit, origin, stamp, inherited, job)
            spec = hit.rule.event
            entry = None if key is None else collapsed.get(key)
            if entry is not None:
                event = entry[0]
                event.repeats += 1
                _note_last(joined, entry, hit.offset, stamp)
                if spec.cascade is not None:
                    _join_cascade(event, hit, origin, source, stamp, shared)
            else:
                if shared is not None:
                    hit.fields = shared.fields_of(hit.fields)
                event = _event_from_hit(hit, source, file, first_line, origin, inherited)
                if text_later and window.at >= 0 and "\n" not in hit.text:
                    if clock_kind:
                        scan.text_later.append((event, window.at + hit.offset))
                    else:
                        event.line_text = window.at + hit.offset
                event.time, event.mono = _stated(stamp)
                if shared is not None:
                    event.host, event.rank, event.task = map(shared.value, (event.host, event.rank, event.task))
                scan.events.append(event)
                if key is not None:
                    entry = collapsed[key] = [event, -1, NO_TIME]
                    if spec.collapse is not None and key[5][0] == "mono" and key[5][1] is not None:
                        # _collapse_key's sixth part is the line's minute: the rest keys its run
                        scan.minutes.setdefault(key[:5] + key[6:], []).append(event)
                    if spec.cascade is not None:
                        event.ranks = {}
                        _join_cascade(event, hit, origin, source, stamp, shared)
            if item.__class__ is _Counted and item.lines > 1:  # the group's other lines join it (a key: it collapses)
                event.repeats += item.lines - 1
                _note_last(joined, entry, item.last, item.last_stamp)
        for entry in joined:
            entry[0].last_time, entry[0].last_mono = _stated(entry[2])
            entry[1] = -1
        line += window.data.count(b"\n", window.begin, window.end)
        if want_boots and source.kind in CLOCK_KINDS:
            boot_observations(window.data, window.begin, window.end, source.node, year, scan.observations)
        if window.last:
            tail = window.data
    scan.last = last_time(tail, year) if source.node else NO_TIME
    return scan


# Worker processes (forked from this one, inheriting the compiled rule pack) scan a job's files
# only when SATTRIB_SCAN_WORKERS asks for more than one.  They do not pay by default: every event
# is pickled back to this process, which then holds the workers' copies apart (what the scan
# shares, _Shared, is shared within a worker only; their lines' text stays in the files, as here).
# On the realistic corpora (benchmarks/realistic.py, the twenty-fourth session) two workers took
# 0.83x the wall time for 1.22x the CPU and 2.4x the peak memory of one process at 4,096 nodes
# (25.1 s, 37.0 s, 611 MB against 30.3 s, 30.2 s, 251 MB), 0.83x the wall for 1.19x the CPU on
# 1,024 nodes' NCCL INFO output, and 0.77x the wall for 1.09x the CPU on 32,768 ranks in one job
# output.
MAX_WORKERS = 4
WORKERS_VARIABLE = "SATTRIB_SCAN_WORKERS"  # a number; unset, empty or 1 scans in this process only
_FORKED: tuple | None = None  # what forked workers scan: (files, scanner, year, want_boots, job, text_later)


def _scan_files(evidence: Evidence, scanner: Scanner, year: int | None, want_boots: bool,
                order: list[int], text_later: TextLater) -> Iterator[tuple[int, _FileScan]]:
    """Per file, its number and its scan, the files in `order`: the same whether workers scanned
    it or this process (which gives each as soon as it is read)."""
    workers = _worker_count(evidence)
    if workers > 1:
        scans = _scan_in_workers(evidence, scanner, year, want_boots, workers, text_later)
        if scans is not None:
            yield from ((index, _with_its_file(scans[index], evidence.files[index])) for index in order)
            return
    counter = _counter(evidence, scanner, year)
    shared = _Shared()
    for position, index in enumerate(order):
        if counter is not None:
            counter.prepare(evidence.files, order, position)  # small files: counted many to one batch
        yield index, _scan_file(index, evidence.files[index], scanner, year, want_boots, evidence.job, counter,
                                shared, text_later)


@dataclass
class _Shared:
    """What the events of a scan share, one copy each: field dicts and values.  A node's noise
    names the devices every node has (`0000:3b:00`), so a many-node job's events repeat a few
    thousand field sets, and their values (an operation's name, a timeout, a host) many times
    more (a fifth of the scan's memory at 4,096 nodes).  An event's fields are read, never changed
    (a cascade's part split off for a node gets its own copy, _cascade_parts)."""
    dicts: dict[int, dict] = field(default_factory=dict)  # by the hash of their items (a tuple of them took 20 MB)
    values: dict[tuple, Any] = field(default_factory=dict)  # by type and value: 1, 1.0 and True stay apart

    def fields_of(self, fields: dict) -> dict:
        """The shared dict of these fields, in the same order (a dict whose hash another holds is
        compared item by item, and kept apart if it differs); a new one's values shared."""
        items = tuple(fields.items())
        try:
            key = hash(items)
        except TypeError:  # an unhashable value: its own dict
            return fields
        known = self.dicts.setdefault(key, fields)
        if known is not fields:
            return known if tuple(known.items()) == items else fields
        for name, value in items:
            fields[name] = self.value(value)
        return fields

    def value(self, value: Any) -> Any:
        return _one_copy(self.values, (value.__class__, value), value)


def _counter(evidence: Evidence, scanner: Scanner, year: int | None) -> NoiseCounter | None:
    """Arrow's counting of noise (counting.py), for a job whose kernel and syslog files are large
    enough to pay for loading it; not in worker processes (Arrow's threads and fork do not mix)."""
    noisy = sum(f.content_size() for f in evidence.files if f.kind in COUNTED_KINDS)
    if noisy < COUNT_FROM_BYTES or not arrow_available():
        return None
    job = evidence.job
    return NoiseCounter(scanner, year, lambda stamp: _when(stamp, job), int(COLLAPSE_MONO_SPAN))


def _worker_count(evidence: Evidence) -> int:
    wanted = os.environ.get(WORKERS_VARIABLE, "").strip()
    if not wanted.isdigit() or not hasattr(os, "fork") or threading.active_count() > 1:
        return 1  # forking a threaded process (the service) is unsafe
    return max(1, min(int(wanted), MAX_WORKERS, len(evidence.files)))


def _scan_in_workers(evidence: Evidence, scanner: Scanner, year: int | None, want_boots: bool,
                     workers: int, text_later: TextLater) -> list[_FileScan] | None:
    """None when a worker could not start or died (the caller scans in this process instead)."""
    # Imported here: most jobs are small and never start a worker.
    import multiprocessing
    import pickle
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    global _FORKED
    shares: list[list[int]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for index in sorted(range(len(evidence.files)), key=lambda i: -evidence.files[i].content_size()):
        lightest = loads.index(min(loads))  # largest file first, to the least loaded worker
        shares[lightest].append(index)
        loads[lightest] += evidence.files[index].content_size()
    _FORKED = (evidence.files, scanner, year, want_boots, evidence.job, text_later)
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            done = dict(pair for share in pool.map(_scan_share, shares) for pair in share)
    except (OSError, BrokenProcessPool, pickle.PicklingError):
        return None
    finally:
        _FORKED = None
    return [done[i] for i in range(len(evidence.files))]


def _scan_share(indexes: list[int]) -> list[tuple[int, _FileScan]]:
    files, scanner, year, want_boots, job, text_later = _FORKED
    return [(i, _scan_file(i, files[i], scanner, year, want_boots, job, text_later=text_later)) for i in indexes]


def _with_its_file(scan: _FileScan, source: SourceFile) -> _FileScan:
    """A worker's scan of `source` with its events' FileHead holding the file again (it pickles
    without it), for the lines they show to be read again here."""
    if scan.events:
        here = replace(scan.events[0].file, source=source)
        for event in scan.events:
            event.file = here
    return scan


def _offset_of(item: Hit | _Counted) -> int:
    return item.offset


def _note_last(joined: list[list], entry: list, offset: int, stamp: LineTime) -> None:
    """The offset and stamp of the last line so far that joined an entry's event (_scan_file)."""
    if entry[1] < 0:
        joined.append(entry)
    if offset > entry[1]:
        entry[1], entry[2] = offset, stamp


@dataclass(slots=True)
class _Counted:
    """A group of lines counted in Arrow (counting.py), read the Python way at its first line."""
    offset: int  # the first line's
    hit: Hit
    text: str
    stamp: LineTime
    origin: Origin
    lines: int
    last: int  # the last line's offset
    last_stamp: LineTime


def _checked_counts(counts: list[Count], data: bytes, kind: str, scanner: Scanner, clock: FileClock,
                    job: JobContext) -> tuple[list[_Counted], list[Hit]]:
    """The counted groups whose first and last lines read alike the Python way (their event's key),
    and the hits of the lines of the others, read one by one (counting.py's safety net)."""
    counted: list[_Counted] = []
    unsure: list[Hit] = []
    for count in counts:
        first = _read_alone(scanner, clock, data, kind, count.first, count.first_lineno, count.literal_ids, job)
        last = first if count.last == count.first else _read_alone(
            scanner, clock, data, kind, count.last, count.last_lineno, count.literal_ids, job)
        if first is not None and last is not None and first[0] == last[0]:
            _, hit, text, stamp, origin = first
            counted.append(_Counted(count.first, hit, text, stamp, origin, count.lines, count.last, last[3]))
            continue
        for offset, lineno in member_offsets(count):
            unsure += scanner.match_at(data, offset, lineno, kind, count.literal_ids)
    return counted, unsure


def _read_alone(scanner: Scanner, clock: FileClock, data: bytes, kind: str, offset: int, lineno: int,
                literal_ids: frozenset[int], job: JobContext) -> tuple | None:
    """(event key, hit, line, stamp, origin) of a line with one collapsing hit and a time of its own."""
    hits = scanner.match_at(data, offset, lineno, kind, literal_ids)
    if len(hits) != 1 or hits[0].rule.event.collapse is None:
        return None
    text = hits[0].text.split("\n", 1)[0]
    stamp, inherited = clock.stamp_of(text, offset)
    if inherited:
        return None
    origin = line_origin(text)
    return _event_key(hits[0], origin, stamp, False, job), hits[0], text, stamp, origin


def join_minutes(events: list[Event], minutes: list[list[Event]], job: JobContext) -> None:
    """One event for the lines of a collapsing rule that share a key and a side of the job's window.
    Lines with only a boot-relative time were collapsed per minute (their side was not known while
    scanning); once placed on the wall clock (scan_evidence, anchor_boot_clock), the minutes in a
    row on one side join the first of them.  Every side's count stays what it was, and a node whose
    dmesg prints seconds since boot holds a few events per device instead of one per minute."""
    joined: set[int] = set()
    for run in minutes:
        keeper: Event | None = None
        for event in run:
            if event.time is None:
                keeper = None  # not placed: the node's boot time is unknown
            elif keeper is not None and window_side(event.time, job) == window_side(keeper.time, job):
                keeper.repeats += event.repeats
                keeper.last_time = event.last_time if event.last_time is not None else event.time
                joined.add(id(event))
            else:
                keeper = event
    if joined:
        events[:] = [event for event in events if id(event) not in joined]


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
    Hits come in file order, so one look-ahead serves every hit of a burst.  A streamed file is
    seen through windows (enter()); offsets given to stamp_of are into the current window's data,
    the look-ahead and look-back state is kept in file offsets.
    """

    def __init__(self, source: SourceFile, year: int | None):
        self.year = year
        self._data = b"" if source.streamed else source.data  # streamed: set by enter()
        self._base = 0  # file offset of self._data[0]
        self._ahead: tuple[int, LineTime] = (-1, NO_TIME)  # (file offset the look-ahead covered to, result)
        self._behind: tuple[int, LineTime] = (-1, NO_TIME)  # (file offset of the last look-back, result)

    def enter(self, data: bytes, base: int) -> None:
        self._data, self._base = data, base

    def stamp_of(self, text: str, offset: int) -> tuple[LineTime, bool]:
        """The line's own stamp, else the inherited one; and whether it was inherited."""
        stamp = parse_line_time(text, self.year)
        if stamp.wall is None and stamp.mono is None:
            return self._inherited(offset), True
        return stamp, False

    def _inherited(self, offset: int) -> LineTime:
        covered_to, found = self._ahead
        if offset + self._base >= covered_to:
            found, covered_to = time_after(self._data, offset, self.year, max_lines=INHERIT_LINES)
            covered_to += self._base
            self._ahead = (covered_to, found)
        if found.wall is None and found.mono is None:
            return self._behind_of(offset)
        return found

    def _behind_of(self, offset: int) -> LineTime:
        """Nearest stamped line above; only the lines since the previous look-back are read again."""
        previous_offset, previous = self._behind
        floor = 0
        if 0 <= previous_offset <= offset + self._base:
            floor = max(previous_offset - self._base, 0)
        found = time_before(self._data, offset, self.year, max_lines=INHERIT_LINES, floor=floor)
        if found.wall is None and found.mono is None and previous_offset >= 0:
            found = previous
        self._behind = (offset + self._base, found)
        return found


def _stated(stamp: LineTime) -> tuple[float | None, float | None]:
    """(time, seconds since boot) as a line states them: a wall-clock time, else its seconds since
    boot (placed on the wall clock once its node's boot time is known, _place_in_time)."""
    return (stamp.wall, None) if stamp.wall is not None else (None, stamp.mono)


def _place_in_time(event: Event, boot: float | None) -> None:
    """The event's times (its first line's, its last line's, each rank's first line's) placed on
    the wall clock by the node's boot time."""
    if boot is not None:
        if event.time is None and event.mono is not None:
            event.time = sane_time(boot + event.mono)
        if event.last_time is None and event.last_mono is not None:
            event.last_time = sane_time(boot + event.last_mono)
        for share in (event.ranks or {}).values():
            if share is not None and share.time is None and share.mono is not None:
                share.time = sane_time(boot + share.mono)
    stated_at = event.fields.get("at")
    if event.time_inherited and stated_at:
        # A Slurm banner states its own moment: `CANCELLED AT 2026-12-02T13:00:00`.
        stated = parse_line_time(str(stated_at), None).wall
        if stated is not None:
            event.time, event.time_inherited = stated, False


_HEADS: dict[int, tuple[Rule, EventHead]] = {}  # by id(rule), the rule kept so that its id is not reused


def _head_of(rule: Rule) -> EventHead:
    known = _HEADS.get(id(rule))
    if known is None:  # bounded (_one_copy): rule packs loaded again and again, a service's reloads
        event = rule.event
        head = EventHead(rule.title, event.type, "kernel" in rule.sources, rule.match.contains, event.fallback,
                         event.onset, event.reports_on, event.vendor)
        known = _one_copy(_HEADS, id(rule), (rule, head))
    return known[1]


def _event_from_hit(hit: Hit, source: SourceFile, file: FileHead, first_line: str, origin: Origin,
                    inherited: bool) -> Event:
    """The event of one hit, not yet placed in time (see scan_evidence): its line's first line,
    origin (line_origin) and whether its time is inherited are read once per line by _scan_file."""
    head = _head_of(hit.rule)
    filed_under = _filed_under(origin, first_line, source)
    event = Event(
        rule_id=hit.rule.id,
        head=head,
        domain=hit.domain,
        category=hit.category,
        role=hit.role,
        severity=hit.severity,
        strength=hit.strength,
        file=file,
        line=source.original_line(hit.lineno),
        line_text=hit.text,
        trusted=supports_verdict(source.provenance, head.kernel_side and source.kind in LOG_KINDS, filed_under,
                                 source.root_senders),
        time_inherited=inherited,
        fields=hit.fields,
        notes=_shared_notes(tuple(hit.notes.items())) if hit.notes else NO_NOTES,
    )
    event.host = hit.fields.get("node") or hit.fields.get("host") or origin.host
    event.rank = _rank_of(hit, origin)
    task = hit.fields.get("task")
    event.task = origin.task if origin.task is not None else (int(task) if str(task).isdigit() else None)
    event.node = source.node
    return event


def _rank_of(hit: Hit, origin: Origin) -> int | None:
    """The rank a hit's line names: the rule's field, else the line's prefix."""
    rank = hit.fields.get("rank", origin.rank)
    if isinstance(rank, str):
        return int(rank) if rank.isdigit() else None
    return rank


COLLAPSE_MONO_SPAN = 60.0  # seconds-since-boot lines collapse per minute: their wall time is not known yet


def _event_key(hit: Hit, origin: Origin, stamp: LineTime, inherited: bool, job: JobContext) -> tuple | None:
    """The key of the event the hit joins (None: an event of its own)."""
    spec = hit.rule.event
    if spec.collapse is not None:
        return None if inherited else _collapse_key(hit, origin, stamp, job)
    if spec.cascade is not None:
        return _cascade_key(hit, origin, stamp, job)
    return None


def _collapse_key(hit: Hit, origin: Origin, stamp: LineTime, job: JobContext) -> tuple:
    """What a collapsing rule's hits must share to be one event: the rule, the fields it names,
    the line's own host, rank and program (a line another program wrote, a claim, never joins a
    kernel line's count), and the side of the job's window the line is on, so that the judgement
    counts the lines inside it exactly (a line with only a boot-relative time: its minute)."""
    return (hit.rule.id, origin.host, origin.rank, origin.task, origin.program, _when(stamp, job),
            *map(hit.fields.get, hit.rule.event.collapse))


def _cascade_key(hit: Hit, origin: Origin, stamp: LineTime, job: JobContext) -> tuple:
    """What the lines of a cascade (rule event.cascade) must share to be one event: as
    _collapse_key, but the rank joins the event's set instead of the key."""
    return (hit.rule.id, origin.host, origin.task, origin.program, _when(stamp, job),
            *map(hit.fields.get, hit.rule.event.cascade))


def _when(stamp: LineTime, job: JobContext) -> tuple:
    """The side of the job's window a line is on; a line with only a boot-relative time: its minute."""
    if stamp.wall is not None:
        return ("wall", window_side(stamp.wall, job))
    return ("mono", None if stamp.mono is None else stamp.mono // COLLAPSE_MONO_SPAN)


def _join_cascade(event: Event, hit: Hit, origin: Origin, source: SourceFile, stamp: LineTime,
                  shared: _Shared | None) -> None:
    """Count the hit's line under its rank in the cascade's event (hits come in file order: a
    rank's first line is its first hit).  A line that names no task or host (a host field is in
    the key: schema) may come from any node: its rank keeps its lines' count and its first line,
    for the part of the event split off for the rank's node (resolve_nodes); any other line, only
    its rank."""
    rank = _rank_of(hit, origin)
    if rank is None:
        return
    share = event.ranks.get(rank)
    if share is not None:
        share.lines += 1
    elif rank not in event.ranks:
        if shared is not None:
            rank = shared.value(rank)  # the same ranks in every cascade of the job (290,000 ints at 4,096 nodes)
        placed = origin.task is not None or bool(origin.host or hit.fields.get("host") or hit.fields.get("node"))
        event.ranks[rank] = None if placed else RankShare(
            hit.lineno, source.original_line(hit.lineno), *_stated(stamp), hit.text)


def _filed_under(origin, line: str, source: SourceFile) -> str | None:
    """The program a daemon-kept log files the line under (provenance.supports_verdict); "?" for a
    line of such a log that names none: the further line of a record above (a message's embedded
    newline), whose sender is not on it.  A daemon's own log (a Slurm daemon's, Fabric Manager's
    fabricmanager.log) names none and needs none: only its daemon writes it."""
    if origin.program is not None or source.provenance is not Provenance.DAEMON:
        return origin.program
    if SLURM_DAEMON_LINE.match(line) or _own_log_of_a_daemon(source):
        return None
    return "?"


def _own_log_of_a_daemon(source: SourceFile) -> bool:
    """A source of a daemon's provenance that is neither a log kept for others (syslog, the
    journal, kern.log) nor named like one: a root service's own log file."""
    return source.kind not in ("syslog", "kernel") and name_hint(source.rel) not in ("syslog", "kernel")


def _body(line: str, literals: list[str]) -> str:
    starts = [line.find(lit) for lit in literals if lit in line]
    return line[min(starts):] if starts else line


def anchor_boot_clock(events: list[Event], anchored: dict[str, float] | None = None) -> dict[str, float]:
    """Place seconds-since-boot lines on the wall clock through a second copy of the same lines.

    The same kernel message often sits in dmesg (seconds since boot) and in syslog or the journal
    (wall clock); each such pair on one node gives that node's boot time.  Only lines of the
    kernel's and the daemons' logs pair: a line of the job's output may be anyone's words.
    `anchored`: the boot times of nodes anchored before (scan_evidence, through their own files),
    which place their other lines.  The boot times it anchored by.
    """
    # A pair is one line whose body the seconds-since-boot log holds once: a collapsed event there
    # (repeats > 1) stands for several lines.  A collapsed event of the wall-clock log keeps its
    # first line's text and time, which is one sample: the corrected-error noise of a node's
    # journal pairs with the same lines of its raw dmesg (else their counts would all seem to fall
    # inside the job's window).  The median of a node's pairs outvotes a line dmesg lost.
    boots = {}
    unplaced = [e for e in events if e.time is None and e.mono is not None and not e.time_inherited
                and e.repeats == 1 and e.kind in CLOCK_KINDS]
    if unplaced:
        boots = _boots_from_pairs(events, unplaced)
    boots.update(anchored or {})
    if not boots:
        return boots  # most jobs: every node's boot time was known from its own logs
    for event in events:
        if event.time is None and event.mono is not None and event.node in boots:
            event.time = sane_time(boots[event.node] + event.mono)
            event.note("time_from", "boot time from the same line in another log")
            if event.last_time is None and event.last_mono is not None:
                event.last_time = sane_time(boots[event.node] + event.last_mono)
    return boots


def _boots_from_pairs(events: list[Event], unplaced: list[Event]) -> dict[str, float]:
    wanted = {(e.node, e.rule_id) for e in unplaced}
    copies = Counter((e.node, e.rule_id, e.body) for e in unplaced)
    walls: dict[tuple, list[float]] = defaultdict(list)
    for event in events:
        if (event.mono is None and event.time is not None and event.node and not event.time_inherited
                and event.kind in CLOCK_KINDS and (event.node, event.rule_id) in wanted):
            walls[(event.node, event.rule_id, event.body)].append(event.time)
    offsets: dict[str, list[float]] = defaultdict(list)
    for event in unplaced:
        key = (event.node, event.rule_id, event.body)
        matches = walls.get(key, [])
        if len(matches) == 1 and copies[key] == 1:
            offsets[event.node].append(matches[0] - event.mono)
    return {node: sorted(values)[len(values) // 2] for node, values in offsets.items()}


def date_onsets(events: list[Event], last_seen: dict[str, float]) -> None:
    """A line that reports its node's failure after the fact (rule event.onset `node_last_seen`)
    dates the failure by the node's last stamped line, when that is earlier: Slurm notices a dead
    node SlurmdTimeout late.  After resolve_nodes, which gives the line the node it names."""
    for event in events:
        silent_since = last_seen.get(event.node or "") if event.onset == "node_last_seen" else None
        if silent_since is not None and (event.time is None or silent_since < event.time):
            event.time = silent_since  # still inferred: no line of the node states the moment
            event.note("time_from", "when its node was last seen (the line reports its failure later)")


def resolve_nodes(events: list[Event], job: JobContext, ip_hosts: dict[str, str] | None = None) -> None:
    """Give job-level events a node: from the host they name, else their rank or srun task; and
    name the peer a line blames (`notes["peer_node"]`) through every IP and rank map present.

    Ranks map to nodes through any line that shows both (NCCL init lines with their host prefix,
    torchrun's root-cause table, `[rankN]:` lines with an NCCL prefix); srun tasks through any
    line that shows both a task label and a host; IP addresses through NCCL's interface lines and
    `getent`/`/etc/hosts`/`nslookup`-style output (`ip_hosts`).
    """
    known = set(job.nodes) | {e.node for e in events if e.node}
    # Job output is stored on one node (the batch host) but its lines come from every node:
    # what a line says about its origin wins; the file's node is only the fallback, never for a
    # report on another node or on some node of the job (rule event.reports_on).
    stored_on = {id(e): e.node for e in events if e.kind == "app" and e.reports_on is None}
    _inherit_block_hosts(events)
    job_nodes = frozenset(job.nodes)
    matched: dict[str, str] = {}
    for event in events:
        if event.kind == "app":
            event.node = None
        if event.host and is_placeholder_host(event.host):
            event.host = None
        if event.reports_on == "named_node" and event.node is not None:
            _to_the_node_it_names(event, known, job_nodes)
        elif event.reports_on == "job":
            event.node = event.host = None  # some node of the job: never the one whose log printed it
        if event.node is None and event.host:
            if event.host not in matched:
                matched[event.host] = match_host(event.host, known)
            event.node = _of_the_job(matched[event.host], job_nodes, event)
    rank_to_node: dict[int, str] = {}
    task_to_node: dict[int, str] = {}
    for event in sorted((e for e in events if e.node and (has_ranks(e) or e.task is not None)), key=lambda e: e.order):
        if event.host:
            for rank in ranks_of(event):
                rank_to_node.setdefault(rank, event.node)
        if event.task is not None:
            task_to_node.setdefault(event.task, event.node)
    for event in events:
        if event.node is None and event.rank is not None:
            event.node = rank_to_node.get(event.rank)
        if event.node is None and event.task is not None:
            event.node = task_to_node.get(event.task)
    events[:] = [part for event in events for part in _cascade_parts(event, rank_to_node)]
    _nodes_of_failed_tasks(events)
    for event in events:
        if event.node is None:
            event.node = stored_on.get(id(event))
    known = {e.node for e in events if e.node} | set(job.nodes)
    ip_to_node = {ip: match_host(host, known) for ip, host in (ip_hosts or {}).items()}
    for event in sorted((e for e in events if e.type == "nccl_ip"), key=lambda e: e.order):
        ip = event.fields.get("ip")
        if ip and event.node:
            ip_to_node.setdefault(ip, event.node)
    for event in events:
        if event.node is None and event.reports_on == "named_node" and event.fields.get("ip") in ip_to_node:
            event.node = _of_the_job(ip_to_node[event.fields["ip"]], job_nodes, event)  # a report naming its node by address
        peer = _peer_of(event, ip_to_node, rank_to_node, known)
        if peer and peer != event.node:
            event.note("peer_node", peer)


def has_ranks(event: Event) -> bool:
    """Whether the event stands for some rank's lines (ranks_of is not empty)."""
    return bool(event.ranks) or event.rank is not None


def ranks_of(event: Event) -> list[int]:
    """The ranks whose lines the event stands for: a cascade's ranks, else its own rank."""
    if event.ranks:
        return sorted(event.ranks)
    return [] if event.rank is None else [event.rank]


def _cascade_parts(event: Event, rank_to_node: dict[int, str]) -> list[Event]:
    """A cascade's event of lines that named no task or host, as one event per node its ranks ran
    on (their lines, first line and time; ranks of no known node together); any other event as it is."""
    shares = event.ranks
    if not shares or len(shares) < 2 or next(iter(shares.values())) is None:
        return [event]  # its ranks' lines named their nodes (one key: all of them or none)
    by_node: dict[str | None, dict[int, RankShare]] = defaultdict(dict)
    for rank, share in shares.items():
        by_node[rank_to_node.get(rank)][rank] = share
    if len(by_node) < 2:
        return [event]
    unranked = event.repeats - sum(share.lines for share in shares.values())  # lines that named no rank
    parts = []
    for node, ranks in by_node.items():
        rank, first = min(ranks.items(), key=lambda item: item[1].lineno)
        part = copy.copy(event)
        part.fields = dict(event.fields)
        part.node, part.rank, part.ranks = node, rank, ranks
        part.repeats = sum(share.lines for share in ranks.values()) + (unranked if event.rank in ranks else 0)
        part.line, part.text = first.line, first.text
        if "rank" in part.fields:
            part.fields["rank"] = rank
        times = [share.time for share in ranks.values() if share.time is not None]
        part.time = min(times) if times else event.time
        parts.append(part)
    return sorted(parts, key=lambda part: part.order)


def _to_the_node_it_names(event: Event, known: set[str], job_nodes: frozenset[str]) -> None:
    """A controller's report on a node (rule event.reports_on), read from the log of the host that
    runs it (slurmctld's `Setting node gpu05 state to INVAL ...`, `Killing JobId=... on failed node
    gpu05`), is that node's event, as a node of the job when the job's nodes are known."""
    named = event.fields.get("node") or event.fields.get("host")
    if not isinstance(named, str) or is_placeholder_host(named):
        return
    if "[" in named or "," in named:  # a hostlist (`Nodes gpu[01-02] not responding`)
        try:
            hosts = expand(named)
        except ValueError:
            hosts = []
        if len(hosts) != 1:  # a report on several nodes is no one node's, and never its log host's
            event.node = event.host = None
            return
        named = hosts[0]
    node = match_host(named, known)
    if node != event.node:
        event.node = _of_the_job(node, job_nodes, event) or event.node


def _of_the_job(node: str, job_nodes: frozenset[str], event: Event) -> str | None:
    """A host a line names is the event's node only when it is a node of the job (when the job's
    nodes are known): a line may name any host, and it never makes another node a culprit."""
    if job_nodes and node not in job_nodes:
        event.note("named_outside_job", node)
        return None
    return node


# srun's reports of a task that failed by itself: `<node>: task N: Exited with exit code C`, `...: Aborted`
# (not `Terminated`/`Killed`: those tasks were ended by the step's teardown).
FAILED_TASK_RULES = {"slurm.srun_task_exit", "slurm.srun_task_crash_signal"}
FAILED_TASK_REACH = 40  # lines between a task's last words and srun's report of its exit
# Lines srun's report may come before them: srun forwards task output asynchronously, so its
# report can precede a whole traceback and the lines other tasks printed meanwhile.
FAILED_TASK_LAG = 20


def is_failed_task(event: Event) -> bool:
    return event.rule_id in FAILED_TASK_RULES and event.fields.get("exitcode") != 0


def _nodes_of_failed_tasks(events: list[Event]) -> None:
    """srun forwards a task's output around the time it reports the task's exit: an unlabelled
    line of job output (no host, rank or task) followed within a few lines by srun's first report
    of a failed task on a named node (or, when srun's forwarding lagged, preceded closely by one)
    was most likely printed by that task, not on the batch host that stores the file."""
    reports = sorted((e for e in events if is_failed_task(e) and e.node), key=lambda e: e.order)
    if not reports:
        return
    for event in events:
        if event.node is not None or event.kind != "app" or event.rule_id in FAILED_TASK_RULES:
            continue
        report = _failed_task_report_near(event, reports)
        if report is not None:
            event.node = report.node
            event.note("node_from", f"the task srun reported failing next to it ({report.source}:{report.line})")


def _failed_task_report_near(event: Event, reports: list[Event]) -> Event | None:
    """The first failed-task report after the line within reach, else the last one just before it."""
    same_file = [r for r in reports if r.order[0] == event.order[0]]
    after = next((r for r in same_file if r.order > event.order), None)
    if after is not None and after.order[1] - event.order[1] <= FAILED_TASK_REACH:
        return after
    before = [r for r in same_file if r.order < event.order]
    if before and event.order[1] - before[-1].order[1] <= FAILED_TASK_LAG:
        return before[-1]
    return None


# Lines that open a block of one host's lines, and how many lines the block reaches: a node's
# block in `scontrol show node` output, one entry of torchrun's failure table (`host : X`).
BLOCK_REACH = {"node_block": 60, "failure_entry": 5}


def _inherit_block_hosts(events: list[Event]) -> None:
    """Lines inside a block that names its host (BLOCK_REACH) belong to that host."""
    block: tuple[int, int, str, int] | None = None  # (file, line, host, reach) of the open block
    for event in sorted((e for e in events if e.host is None or e.type in BLOCK_REACH), key=lambda e: e.order):
        if event.type in BLOCK_REACH and event.host:
            block = (event.order[0], event.order[1], event.host, BLOCK_REACH[event.type])
        elif block and event.host is None and event.order[0] == block[0] and event.order[1] - block[1] <= block[3]:
            event.host = block[2]


def _peer_of(event: Event, ip_to_node: dict[str, str], rank_to_node: dict[int, str], known: set[str]) -> str | None:
    """The node at the far end of a failing connection, when the line names it."""
    named = str(event.fields.get("peer_ip") or event.fields.get("peer") or "").strip("[]")
    if named:
        address = named.rsplit(":", 1)[0] if named.count(":") == 1 else named
        if address in ip_to_node:
            return ip_to_node[address]
        if not address[:1].isdigit() and not is_placeholder_host(address):
            host = match_host(address.split(".", 1)[0], known)
            return host if host in known else None
    peer_rank = event.fields.get("peer_rank")
    return rank_to_node.get(int(peer_rank)) if str(peer_rank).isdigit() else None


# Names posters put where they redacted a hostname: `HOSTNAME`, `xxx`, `<node>`, `node`; and log
# levels that a `<time> <level> <program>:` line puts where syslog has its host.
_PLACEHOLDER_HOST = re.compile(
    r"(?i)^[<\[{(]*(?:x+|\*+|host(?:name)?|node(?:name)?|server|machine|redacted|hidden|localhost|your[-_]?\w*|my[-_]?\w*"
    r"|error|warn(?:ing)?|info|debug|trace|fatal|critical|notice)[>\]})]*$"
)


def is_placeholder_host(host: str) -> bool:
    return bool(_PLACEHOLDER_HOST.match(host))


def match_host(host: str, known: set[str]) -> str:
    """A host as printed ('gpu03', 'gpu03.cluster', 'gpu03-ib0', or a poster's shortened
    'node-07' for 'prod-node-07') matched to a known node name."""
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
    # A name shortened to its tail (or the tail of a longer name) names that node when only one fits.
    tails = [n for n in known if _is_tail(short, n) or _is_tail(n, short)]
    return tails[0] if len(tails) == 1 else host


def _is_tail(tail: str, name: str) -> bool:
    return len(tail) >= 3 and len(name) > len(tail) and name.endswith(tail) and name[-len(tail) - 1] in "-_."
