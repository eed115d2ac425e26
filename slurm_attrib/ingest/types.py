"""What ingest hands to the engine: the job's context and its source files, with coverage."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from slurm_attrib.provenance import Provenance


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
    # Slurm's own record (daemon) when root or the operator wrote it; a user's job.json is a claim
    provenance: Provenance = Provenance.USER


@dataclass
class SourceFile:
    """One readable source: a log file of the logs layout or one source of a capture bundle."""

    rel: str  # posix path relative to the evidence root: the contract's evidence `source`
    node: str | None  # the node the file belongs to; None for job-level files
    kind: str  # one of vocab.SOURCE_KINDS, recognised from content
    provenance: Provenance  # who could have written it (only trusted provenance may act)
    data: bytes  # decompressed content, possibly capped
    # Lines of the original file before data's first line (the head dropped by the size cap):
    # original line number = line_offset + line number in data.  None: not counted (huge file).
    line_offset: int | None = 0
    compressed: bool = False  # the file was gzip-compressed on disk
    # Streaming: a large file is not held (data empty); its kept part is bytes [start, start +
    # size) of `path` (of its decompressed content when compressed), read again window by window
    # (windows(), blocks()) when analysed.
    path: Path | None = None
    start: int = 0  # -1: read the whole file again (readers.read_file with `cap`), e.g. gzip
    cap: int = 0
    size: int = -1  # bytes of content (of the kept part on disk for a streamed file)
    years: tuple[int, ...] | None = None  # full-date years in its head and tail (see evidence_year)
    # Every line was sent by root (the epilog's journal of root's services, SourceConfig.senders):
    # a line filed under one of provenance.ROOT_DAEMONS is that daemon's own report.
    root_senders: bool = False

    @property
    def trusted(self) -> bool:
        return self.provenance.trusted

    def original_line(self, lineno: int) -> int:
        """The real source's number for line `lineno` of `data` (data may hold only the tail).
        The same int when nothing was cut: an event keeps both (a tenth of a 4,096-node job's ints)."""
        return lineno + self.line_offset if self.line_offset else lineno

    @property
    def streamed(self) -> bool:
        return self.path is not None

    def content_size(self) -> int:
        return self.size if self.size >= 0 else len(self.__dict__.get("_data", b""))

    def blocks(self):
        """The content in blocks ending at line ends: one block when held in memory."""
        if self.path is None:
            yield self.__dict__.get("_data", b"")
            return
        from slurm_attrib.ingest import readers

        if self.start < 0:
            yield readers.normalise_crlf(readers.read_file(self.path, self.cap).data)
            return
        for window in readers.iter_windows(self.path, self.start, self.size, readers.BLOCK, self.compressed):
            yield bytes(window.data[window.begin:window.end])

    def windows(self):
        """The content as readers.Window objects: one window when held in memory or read whole.
        A window's `at` says where its bytes lie for bytes_at (-1: nowhere they can be read again
        as they are: decompressed, or CRLF normalised)."""
        from slurm_attrib.ingest import readers

        if self.path is None:
            yield readers.whole_window(self.__dict__.get("_data", b""), 0)
        elif self.start < 0:
            result = readers.read_file(self.path, self.cap)
            data = readers.normalise_crlf(result.data)
            as_is = result.status == "ok" and not result.compressed and data is result.data
            yield readers.whole_window(data, 0 if as_is else -1)
        else:
            yield from readers.iter_windows(self.path, self.start, self.size, compressed=self.compressed)

    def bytes_at(self, where: int, size: int, identity: int | None = None) -> bytes:
        """At most `size` bytes from `where`, a position a window's `at` gave: in the data held,
        else in the file (read again: a line an event shows, Event.text), when it is still the
        file of that `identity` (identity())."""
        from slurm_attrib.ingest import readers

        if self.path is None:
            return self.__dict__.get("_data", b"")[where:where + size]
        return readers.read_at(self.path, where, size, identity)

    def identity(self) -> int | None:
        """The file's device and inode now (readers.file_identity; None: held in memory, or gone)."""
        from slurm_attrib.ingest import readers

        if self.path is None:
            return None
        try:
            return readers.file_identity(os.stat(self.path, follow_symlinks=False))
        except OSError:
            return None

    def read_all(self) -> bytes:
        """The whole content (reads a streamed file whole: avoid for large files)."""
        return b"".join(self.blocks())


def _get_data(self: SourceFile) -> bytes:
    """The content: held in memory, or (a streamed file) read again whole on each access, not
    kept; the analysis reads streamed files through blocks() instead."""
    held = self.__dict__.get("_data", b"")
    if held or self.__dict__.get("path") is None:
        return held
    return self.read_all()


def _set_data(self: SourceFile, value: bytes) -> None:
    self.__dict__["_data"] = value


SourceFile.data = property(_get_data, _set_data)  # after @dataclass: __init__ assigns through it


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
