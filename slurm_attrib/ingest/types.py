"""What ingest hands to the engine: the job's context and its source files, with coverage."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class JobContext:
    """Job facts; every field may be unknown.  Times are UNIX seconds (UTC)."""

    job_id: str | None = None
    user: str | None = None
    state: str | None = None  # Slurm job state name, upper case (COMPLETED, FAILED, NODE_FAIL, ...)
    exit_code: str | None = None  # "N:S" as Slurm prints it
    start: float | None = None
    end: float | None = None
    nodes: tuple[str, ...] = ()
    source: str | None = None  # file the context came from, relative to the evidence root


@dataclass
class SourceFile:
    """One readable source: a log file of the logs layout or one source of a capture bundle."""

    rel: str  # posix path relative to the evidence root: the contract's evidence `source`
    node: str | None  # the node the file belongs to; None for job-level files
    kind: str  # one of vocab.SOURCE_KINDS, recognised from content
    trusted: bool  # written by the kernel, system daemons or Slurm, never by the job's user
    data: bytes  # decompressed content, possibly capped
    # Lines of the original file before data's first line (the head dropped by the size cap):
    # original line number = line_offset + line number in data.  None: not counted (huge file).
    line_offset: int | None = 0
    compressed: bool = False  # the file was gzip-compressed on disk

    def original_line(self, lineno: int) -> int:
        """The real source's number for line `lineno` of `data` (data may hold only the tail)."""
        return lineno + (self.line_offset or 0)


@dataclass(frozen=True)
class CoverageEntry:
    """What was found for one source: present, empty, unreadable, truncated or skipped."""

    node: str | None
    source: str
    kind: str | None
    status: str  # ok | empty | unreadable | truncated | skipped | missing
    detail: str = ""
    whole_node: bool = False  # the entry stands for a node of the job that left no logs at all


@dataclass
class Evidence:
    root: Path
    job: JobContext
    files: list[SourceFile] = field(default_factory=list)
    coverage: list[CoverageEntry] = field(default_factory=list)

    def nodes_without_logs(self) -> list[str]:
        """Nodes of the job that left no logs at all (a crashed node never runs its epilog)."""
        return sorted({c.node for c in self.coverage if c.whole_node and c.node})
