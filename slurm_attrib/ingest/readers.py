"""Safe, bounded reading of one evidence file.

- Never follows symbolic links (O_NOFOLLOW) and reads regular files only (FIFOs, sockets and
  devices would block or never end).
- gzip is recognised by its magic bytes (`1f 8b`), whatever the name; concatenated members are
  read; a truncated or corrupt stream yields what could be decompressed, status `truncated`.
  It is decompressed as a stream and stopped (status `truncated`, what was decompressed kept)
  past MAX_DECOMPRESSED bytes or, beyond the first MAX_GZIP_KEPT bytes, past MAX_GZIP_RATIO times
  the compressed bytes read: a 2 MB gzip bomb costs a fraction of a second and tens of MB, not
  minutes and gigabytes.  One that decompresses to more than SMALL_FILE bytes is never held:
  probe_file decompresses it once for its size and samples, and iter_windows again, window by
  window, when it is analysed (the newest `cap` bytes kept, as for a plain file).
- A file larger than the cap keeps its newest bytes (the tail), cut at a line start, status
  `truncated`; the number of lines dropped before the kept part is counted so that line numbers
  can be reported against the original file.
- Errors (permission denied, I/O errors) become status `unreadable`, never an exception.
"""

from __future__ import annotations

import errno
import os
import stat
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path

MiB = 1 << 20
GiB = 1 << 30
MAX_FILE_BYTES = 512 * MiB  # per file, after decompression
MAX_TOTAL_BYTES = 2 * GiB  # whole evidence
CHUNK = 4 * MiB
# Lines dropped before a kept tail are counted by reading the dropped part; beyond this many
# bytes the count is not attempted (line_offset None: numbers are relative to the kept data).
MAX_COUNTED_SKIP = 8 * GiB
# Decompression is stopped after this much output (gzip bombs); the tail kept is then that of
# the decompressed prefix, status `truncated`.
MAX_DECOMPRESSED = 2 * GiB
# read_file holds at most this much of a gzip file's content (its newest); probe_file streams larger ones.
MAX_GZIP_KEPT = 64 * MiB
# Text logs compress 5-20:1, very repetitive ones a few hundred; deflate's limit is ~1030:1.
MAX_GZIP_RATIO = 200
GZIP_MAGIC = b"\x1f\x8b"
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


@dataclass
class ReadResult:
    data: bytes
    status: str  # ok | empty | truncated | unreadable | skipped
    detail: str = ""
    compressed: bool = False
    line_offset: int | None = 0  # lines of the original (decompressed) file before data's first


def _describe(error: OSError) -> str:
    if error.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if error.errno == errno.ELOOP:
        return "symbolic link (not followed)"
    return error.strerror or type(error).__name__


def _file_type(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISLNK(mode):
        return "symbolic link"
    return "special file"


def read_file(path: Path | str, cap: int = MAX_FILE_BYTES) -> ReadResult:
    """Read one file safely: at most `cap` bytes of (decompressed) content, the newest kept."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return ReadResult(b"", "skipped", "symbolic link (not followed)")
        return ReadResult(b"", "unreadable", _describe(error))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return ReadResult(b"", "skipped", f"not a regular file ({_file_type(info.st_mode)})")
        if cap <= 0:
            return ReadResult(b"", "skipped", "evidence size limit reached")
        with os.fdopen(fd, "rb", buffering=0, closefd=False) as stream:
            magic = stream.read(2)
            stream.seek(0)
            if magic == GZIP_MAGIC:
                return _read_gzip(stream, cap)
            return _read_plain(stream, info.st_size, cap)
    except OSError as error:
        return ReadResult(b"", "unreadable", _describe(error))
    finally:
        os.close(fd)


def _read_exact(stream, size: int) -> bytes:
    parts = []
    remaining = size
    while remaining > 0:
        chunk = stream.read(min(remaining, CHUNK * 4))
        if not chunk:
            break
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


def _count_newlines(stream, size: int) -> int:
    count = 0
    remaining = size
    while remaining > 0:
        chunk = stream.read(min(remaining, CHUNK * 4))
        if not chunk:
            break
        count += chunk.count(b"\n")
        remaining -= len(chunk)
    return count


def _cut_to_line(data: bytes, dropped_lines: int | None, at_line_start: bool) -> tuple[bytes, int | None]:
    """Drop the partial first line of a kept tail; return the data and the lines before it."""
    if at_line_start:
        return data, dropped_lines
    cut = data.find(b"\n")
    if 0 <= cut < len(data) - 1:
        data = data[cut + 1:]
        return data, None if dropped_lines is None else dropped_lines + 1
    return data, dropped_lines  # one huge line: keep its tail as is


def _read_plain(stream, size: int, cap: int) -> ReadResult:
    if size <= cap:
        data = _read_exact(stream, cap)
        more = stream.read(1)
        if not data:
            return ReadResult(b"", "empty")
        if more:  # the file grew while being read: keep what was read
            return ReadResult(data, "truncated", f"file grew while reading; first {len(data)} bytes kept")
        return ReadResult(data, "ok")
    skipped = size - cap
    dropped: int | None = None
    if skipped <= MAX_COUNTED_SKIP:
        dropped = _count_newlines(stream, skipped)
    stream.seek(skipped - 1)
    at_line_start = stream.read(1) == b"\n"
    data = _read_exact(stream, cap)
    data, offset = _cut_to_line(data, dropped, at_line_start)
    return ReadResult(data, "truncated", f"{size} bytes; only the last {len(data)} bytes kept", False, offset)


def _over_ratio(produced: int, consumed: int) -> bool:
    return produced > MAX_GZIP_KEPT and produced > MAX_GZIP_RATIO * max(consumed, 1)


class _Gunzip:
    """The decompressed chunks of a gzip stream (concatenated members read in turn).  Stops at
    corrupt or truncated data, after MAX_DECOMPRESSED bytes and, beyond the first MAX_GZIP_KEPT
    bytes, past MAX_GZIP_RATIO times the compressed bytes read; `problem` then says why (after
    the last chunk), and `produced` counts the bytes given."""

    def __init__(self, stream):
        self._stream = stream
        self.problem = ""
        self.produced = 0

    def __iter__(self):
        stream, consumed = self._stream, 0  # compressed bytes read (those in `pending` not yet decompressed)
        decomp = zlib.decompressobj(wbits=31)
        pending = b""
        stream_done = False
        try:
            while True:
                if not pending and not stream_done:
                    pending = stream.read(CHUNK)
                    consumed += len(pending)
                    stream_done = not pending
                flushed = False
                if pending:
                    out = decomp.decompress(pending, CHUNK)
                    pending = decomp.unconsumed_tail
                else:  # no more input: whatever zlib still holds
                    out = decomp.flush()
                    flushed = True
                self.produced += len(out)
                if out:
                    yield out
                if decomp.eof:
                    rest = decomp.unused_data + pending
                    pending = b""
                    if not rest and not stream_done:
                        rest = stream.read(CHUNK)
                        consumed += len(rest)
                        stream_done = not rest
                    if rest and rest.startswith(GZIP_MAGIC[: len(rest)]):
                        decomp = zlib.decompressobj(wbits=31)  # next member
                        pending = rest
                        continue
                    return  # complete (trailing garbage after the last member is ignored)
                if flushed:
                    self.problem = "gzip stream truncated"
                    return
                if self.produced > MAX_DECOMPRESSED:
                    self.problem = f"decompression stopped after {self.produced} bytes"
                    return
                if _over_ratio(self.produced, consumed - len(pending)):
                    self.problem = (f"decompression stopped after {self.produced} bytes: over {MAX_GZIP_RATIO} times"
                                    f" the {consumed - len(pending)} compressed bytes read (a gzip bomb?)")
                    return
        except zlib.error as error:
            self.problem = f"corrupt gzip data ({error})"


def _read_gzip(stream, cap: int) -> ReadResult:
    cap = min(cap, MAX_GZIP_KEPT)
    kept: deque[bytes] = deque()
    kept_size = 0
    dropped_lines = 0
    last_dropped = b"\n"
    gunzip = _Gunzip(stream)
    for chunk in gunzip:
        kept.append(chunk)
        kept_size += len(chunk)
        while kept and kept_size - len(kept[0]) >= cap:
            old = kept.popleft()
            kept_size -= len(old)
            dropped_lines += old.count(b"\n")
            last_dropped = old[-1:]
    problem, produced = gunzip.problem, gunzip.produced
    data = b"".join(kept)
    kept.clear()
    offset: int | None = 0
    if len(data) > cap:
        head = len(data) - cap
        dropped_lines += data.count(b"\n", 0, head)
        last_dropped = data[head - 1:head]
        data = data[head:]
    if produced > len(data):
        data, offset = _cut_to_line(data, dropped_lines, last_dropped == b"\n")
        problem = problem or f"{produced} bytes decompressed; only the last {len(data)} bytes kept"
    if not data:
        if problem:
            return ReadResult(b"", "unreadable", problem, True)
        return ReadResult(b"", "empty", "gzip", True)
    if problem:
        return ReadResult(data, "truncated", problem, True, offset)
    return ReadResult(data, "ok", "gzip", True, offset)


# ------------------------------------------------------------------------------------ streaming
# Large files are not held in memory: `probe_file` reads what ingest needs up front (a head and a
# tail sample, the size, where the kept part starts) and `iter_windows` reads the kept part again,
# window by window, when the file is analysed.

SMALL_FILE = 1 * MiB  # files up to this size (of content, for gzip) are read whole
SAMPLE = 256 * 1024  # head and tail kept by the probe of a large file
BLOCK = 8 * MiB  # the bodies of the windows SourceFile.blocks() joins for a whole read


@dataclass
class Probe:
    result: ReadResult  # data: the whole content (small or gzip) or head + tail samples
    whole: bool  # result.data is the whole kept content
    start: int = 0  # plain, not whole: file offset of the kept part's first byte
    size: int = 0  # bytes kept (before CRLF normalisation)


def normalise_crlf(data: bytes) -> bytes:
    # find(b"\r") is a memchr; `b"\r\n" in data` is a much slower two-byte search
    return data.replace(b"\r\n", b"\n") if data.find(b"\r") >= 0 and b"\r\n" in data else data


def probe_file(path: Path | str, cap: int = MAX_FILE_BYTES) -> Probe:
    """Like read_file, but a large plain file yields only head and tail samples (CRLF already
    normalised): each SAMPLE bytes of the normalised kept content, joined."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        info = None
    if info is None or not stat.S_ISREG(info.st_mode) or cap <= 0:
        return _whole(path, cap)
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:
        return _whole(path, cap)
    try:
        if os.pread(fd, 2, 0) == GZIP_MAGIC:
            probe = _probe_gzip(fd, cap)
            return probe if probe is not None else _whole(path, cap)
        if info.st_size <= SMALL_FILE:
            return _whole(path, cap)
        size = os.fstat(fd).st_size
        status, detail, offset, start = "ok", "", 0, 0
        if size > cap:
            skipped = size - cap
            dropped: int | None = None
            if skipped <= MAX_COUNTED_SKIP:
                dropped = 0
                for position in range(0, skipped, BLOCK):
                    dropped += os.pread(fd, min(BLOCK, skipped - position), position).count(b"\n")
            start = skipped
            offset = dropped
            if os.pread(fd, 1, skipped - 1) != b"\n":
                cut = _find_newline(fd, skipped, size)
                if 0 <= cut < size - 1:
                    start, offset = cut + 1, None if dropped is None else dropped + 1
            status, detail = "truncated", f"{size} bytes; only the last {size - start} bytes kept"
        kept = size - start
        raw = min(_SAMPLE_READ, kept)
        head = normalise_crlf(os.pread(fd, raw, start))[:SAMPLE]
        tail = normalise_crlf(os.pread(fd, raw, size - raw))[-SAMPLE:]
        return Probe(ReadResult(head + tail, status, detail, False, offset), False, start, kept)
    except OSError as error:
        return Probe(ReadResult(b"", "unreadable", _describe(error)), True)
    finally:
        if fd >= 0:
            os.close(fd)


_SAMPLE_READ = 2 * SAMPLE + 2  # bytes read for a sample: it is cut to SAMPLE once CRLF is normalised


def _whole(path: Path | str, cap: int) -> Probe:
    result = read_file(path, cap)
    result.data = normalise_crlf(result.data)
    return Probe(result, True, 0, len(result.data))


def _probe_gzip(fd: int, cap: int) -> Probe | None:
    """A gzip file, decompressed once to learn its size, problems and samples: None when it
    decompresses to at most SMALL_FILE bytes (read it whole); else it is streamed when analysed
    (iter_windows decompresses it again), its newest `cap` bytes kept."""
    with os.fdopen(fd, "rb", buffering=0, closefd=False) as stream:
        gunzip, head, tail = _Gunzip(stream), bytearray(), b""
        for chunk in gunzip:
            if len(head) < _SAMPLE_READ:
                head += chunk[:_SAMPLE_READ - len(head)]
            tail = (tail + chunk)[-_SAMPLE_READ:]
    produced = gunzip.produced
    if produced <= SMALL_FILE:
        return None
    start, dropped = 0, 0
    if produced > cap:
        os.lseek(fd, 0, os.SEEK_SET)
        start, dropped, head = _gzip_kept_start(fd, produced - cap)
    status, detail = "ok", "gzip"
    if gunzip.problem:
        status, detail = "truncated", gunzip.problem
    elif start:
        status, detail = "truncated", f"{produced} bytes decompressed; only the last {produced - start} bytes kept"
    samples = normalise_crlf(bytes(head))[:SAMPLE] + normalise_crlf(tail)[-SAMPLE:]
    return Probe(ReadResult(samples, status, detail, True, dropped), False, start, produced - start)


def _gzip_kept_start(fd: int, skip: int) -> tuple[int, int | None, bytes]:
    """The first line start at or after decompressed byte `skip`, the lines before it and the
    first bytes from there: a second decompression, for a file larger than the cap only."""
    position, dropped, start, head = 0, 0, None, bytearray()
    with os.fdopen(fd, "rb", buffering=0, closefd=False) as stream:
        for chunk in _Gunzip(stream):
            if start is None:
                # the line start at or after `skip` follows the first line end at or after skip - 1
                local = max(skip - 1 - position, 0)
                found = chunk.find(b"\n", local) if local < len(chunk) else -1
                if found < 0:
                    dropped += chunk.count(b"\n")
                else:
                    dropped += chunk.count(b"\n", 0, found) + 1
                    start = position + found + 1
                    head += chunk[found + 1:found + 1 + _SAMPLE_READ]
            elif len(head) < _SAMPLE_READ:
                head += chunk[:_SAMPLE_READ - len(head)]
            else:
                break
            position += len(chunk)
    if start is None:  # no line end after `skip`: the kept part begins inside a line
        return skip, None, b""
    return start, dropped, bytes(head)


def _find_newline(fd: int, begin: int, end: int) -> int:
    position = begin
    while position < end:
        block = os.pread(fd, min(BLOCK, end - position), position)
        if not block:
            break
        found = block.find(b"\n")
        if found >= 0:
            return position + found
        position += len(block)
    return -1


# Windows: what the scanner reads.  Each window is one pread into a bytearray holding the body
# (whole lines, about WINDOW_BLOCK bytes) with up to CONTEXT_LINES lines of its neighbours on each
# side, so that look-backs and look-aheads cross body ends; nothing is copied or joined again.
WINDOW_BLOCK = 2 * MiB  # the body's target size: small enough that every pass over it hits the cache
CONTEXT_LINES = 256
CONTEXT_BYTES = 4 * MiB  # neither context is longer than this
AFTER_READ = 64 * 1024  # bytes read past the body as a first guess of the after context


@dataclass(slots=True)
class Window:
    data: bytes | bytearray  # before context + body + after context, CRLF normalised; valid until the next window
    begin: int  # the body: data[begin:end], whole lines
    end: int
    offset: int  # offset of data[0] in the file's (normalised) content
    last: bool
    at: int = -1  # offset of data[0] in the file itself when data are its own bytes (plain, no CR removed)


def whole_window(data: bytes, at: int = -1) -> Window:
    return Window(data, 0, len(data), 0, True, at)


def read_at(path: Path | str, position: int, size: int, identity: int | None = None) -> bytes:
    """At most `size` bytes of a plain file from `position` (a line read again: Window.at).
    identity: the file's file_identity() when it was read; another file at `path` now (a log
    rotated away during the analysis) is an error, not its bytes."""
    fd = os.open(path, _READ_FLAGS)
    try:
        if identity is not None and file_identity(os.fstat(fd)) != identity:
            raise OSError(errno.ESTALE, "another file is there now")
        return os.pread(fd, size, position)
    finally:
        os.close(fd)


def file_identity(info: os.stat_result) -> int:
    """The file's device and inode, as one int (an event's file keeps it: a tuple of two would take 1 MB
    at 8,194 files)."""
    return info.st_dev << 64 | info.st_ino


def iter_windows(path: Path | str, start: int, size: int, block: int | None = None, compressed: bool = False):
    """Windows over bytes [start, start + size) of a large plain file, or of a gzip file's
    decompressed content (decompressed again, as a stream: see _GunzipReader); bodies of about
    `block` bytes (WINDOW_BLOCK)."""
    block = block or WINDOW_BLOCK
    reader = _GunzipReader(path) if compressed else _FileReader(path)
    try:
        yield from _windows(reader, start, size, block)
    finally:
        reader.close()


def _windows(reader, start: int, size: int, block: int):
    read = reader.read
    stop = start + size
    body = context = start  # offsets in the content: the next body, and where its before context starts
    crlf_before_body = 0  # CR bytes normalisation removed in [start, body)
    while body < stop:
        reader.release(context)  # no window reads before its before context
        requested = min(body + block + AFTER_READ, stop) - context
        data = bytearray(read(context, requested))
        if len(data) < requested:
            stop = context + len(data)  # the file shrank while being read
        if body >= stop:
            break
        begin = body - context
        end = _body_end(read, data, context, begin, min(body + block, stop) - context, stop)
        del data[_after_end(read, data, context, end, stop):]
        last = context + end >= stop
        next_body, next_context = context + end, context + _before_start(data, end)
        offset = context - start - crlf_before_body
        at = context if isinstance(reader, _FileReader) else -1
        if data.find(b"\r") >= 0:
            at = -1
            crlf_head, crlf_body = data.count(b"\r\n", 0, begin), data.count(b"\r\n", begin, end)
            offset += crlf_head
            crlf_before_body += crlf_body
            data = data.replace(b"\r\n", b"\n")
            begin, end = begin - crlf_head, end - crlf_head - crlf_body
        yield Window(data, begin, end, offset, last, at)
        del data
        body, context = next_body, next_context


class _FileReader:
    """read(position, size) of a plain file."""

    def __init__(self, path: Path | str):
        self._fd = os.open(path, _READ_FLAGS)

    def read(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position) if size > 0 else b""

    def release(self, position: int) -> None:
        pass  # nothing is held

    def close(self) -> None:
        os.close(self._fd)


class _GunzipReader:
    """read(position, size) of a gzip file's decompressed content, decompressed as a stream:
    only the bytes from the last position released on are held (_windows releases each window's
    before context: a window and its contexts are held, whatever the file's size)."""

    def __init__(self, path: Path | str):
        fd = os.open(path, _READ_FLAGS)
        self._stream = os.fdopen(fd, "rb", buffering=0)
        self._chunks = iter(_Gunzip(self._stream))
        self._held = bytearray()
        self._base = 0  # content offset of self._held[0]
        self._floor = 0  # bytes before it are never read again

    def read(self, position: int, size: int) -> bytes:
        while self._base + len(self._held) < position + size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._held += chunk
            self.release(self._floor)  # a skipped head (over the cap) is never held whole
        begin = position - self._base
        return bytes(self._held[begin:begin + size])

    def release(self, position: int) -> None:
        self._floor = max(self._floor, position)
        drop = min(self._floor - self._base, len(self._held))
        if drop > 0:
            del self._held[:drop]
            self._base += drop

    def close(self) -> None:
        self._stream.close()


def _extend(read, data: bytearray, context: int, stop: int, amount: int) -> bool:
    """Append up to `amount` more bytes of the content to data; False at the end of the part."""
    position = context + len(data)
    if position >= stop:
        return False
    more = read(position, min(amount, stop - position))
    data.extend(more)
    return bool(more)


def _body_end(read, data: bytearray, context: int, begin: int, want: int, stop: int) -> int:
    """End of the body begun at data[begin] (relative to data): the last line end before `want`,
    else (one line longer than the block) the first one after it, else the end of the part."""
    if context + want >= stop:
        return len(data)  # the span read reaches the end of the part
    cut = data.rfind(b"\n", begin, want) + 1
    if cut > 0:
        return cut
    searched = want
    while True:
        found = data.find(b"\n", searched)
        if found >= 0:
            return found + 1
        searched = len(data)
        if not _extend(read, data, context, stop, CHUNK):
            return len(data)


def _after_end(read, data: bytearray, context: int, end: int, stop: int) -> int:
    """End of the after context: CONTEXT_LINES lines past `end` within CONTEXT_BYTES (the rest
    of the part when shorter), reading more of the file when data holds too few."""
    position, lines = end - 1, 0
    while lines < CONTEXT_LINES:
        found = data.find(b"\n", position + 1)
        if found < 0:
            if len(data) - end < CONTEXT_BYTES and _extend(read, data, context, stop, AFTER_READ):
                continue
            if context + len(data) >= stop and len(data) - end <= CONTEXT_BYTES:
                return len(data)  # the part's last line, without a line end
            break
        if found + 1 - end > CONTEXT_BYTES:
            break
        position, lines = found, lines + 1
    return position + 1


def _before_start(data: bytearray, end: int) -> int:
    """Start of the before context of the body that follows data[:end]: its last CONTEXT_LINES
    lines within CONTEXT_BYTES."""
    position = end - 1
    for _ in range(CONTEXT_LINES):
        found = data.rfind(b"\n", 0, max(position, 0))
        if found < 0:
            return 0 if end <= CONTEXT_BYTES else position + 1
        if end - found - 1 > CONTEXT_BYTES:
            break
        position = found
    return position + 1
