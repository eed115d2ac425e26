"""From scanner hits to events: each hit placed in time and on a node."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slurm_attrib.ingest.origin import line_origin
from slurm_attrib.ingest.timestamps import estimate_boot_times, parse_line_time, time_before, year_hint
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
    order: tuple[int, int]  # (file index, line): the order of lines that have no time
    time: float | None = None  # UNIX seconds, UTC
    time_inherited: bool = False  # taken from an earlier line of the same file
    node: str | None = None
    host: str | None = None  # host named by the line itself (prefix, syslog field, Slurm banner)
    rank: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    explained_by: "Event | None" = None

    @property
    def sort_key(self) -> tuple:
        return (self.time if self.time is not None else float("inf"), self.order)


def extract_events(evidence: Evidence, scanner: Scanner) -> list[Event]:
    year = year_hint(evidence.job)
    boot_times = estimate_boot_times(evidence)
    events: list[Event] = []
    for index, source in enumerate(evidence.files):
        boot = boot_times.get(source.node) if source.node else None
        for hit in scanner.scan(source.data, source.kind):
            events.append(_event_from_hit(hit, source, index, year, boot))
    return events


def _event_from_hit(hit: Hit, source: SourceFile, index: int, year: int | None, boot: float | None) -> Event:
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
        line=_original_line(source, hit.lineno),
        text=hit.text,
        kind=source.kind,
        trusted=source.trusted,
        order=(index, hit.lineno),
        fields=hit.fields,
        notes=dict(hit.notes),
    )
    event.time, event.time_inherited = _line_time(first_line, source, hit.offset, year, boot)
    origin = line_origin(first_line)
    event.host = hit.fields.get("node") or hit.fields.get("host") or origin.host
    event.rank = hit.fields.get("rank", origin.rank)
    if isinstance(event.rank, str):
        event.rank = int(event.rank) if event.rank.isdigit() else None
    event.node = source.node
    return event


def _original_line(source: SourceFile, lineno: int) -> int:
    """Capture bundles keep only some lines; they carry each kept line's number in the real source."""
    numbers = getattr(source, "line_numbers", None)
    if numbers and 0 < lineno <= len(numbers):
        return numbers[lineno - 1]
    return lineno


def _line_time(text: str, source: SourceFile, offset: int, year: int | None, boot: float | None) -> tuple[float | None, bool]:
    stamp = parse_line_time(text, year)
    inherited = False
    if stamp.wall is None and stamp.mono is None:
        stamp = time_before(source.data, offset, year)
        inherited = True
    if stamp.wall is not None:
        return stamp.wall, inherited
    if stamp.mono is not None and boot is not None:
        return boot + stamp.mono, inherited
    return None, False


def resolve_nodes(events: list[Event], job: JobContext) -> None:
    """Give job-level events a node: from the host they name, or their rank or task."""
    known = set(job.nodes) | {e.node for e in events if e.node}
    rank_to_node: dict[int, str] = {}
    for event in events:
        if event.node is None and event.host:
            event.node = match_host(event.host, known)
    for event in sorted(events, key=lambda e: e.order):
        if event.type in ("nccl_rank", "elastic_root_cause") and event.node and event.rank is not None:
            rank_to_node.setdefault(event.rank, event.node)
    for event in events:
        if event.node is None and event.rank is not None:
            event.node = rank_to_node.get(event.rank)


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
