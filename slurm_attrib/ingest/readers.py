"""Safe, bounded reading of one evidence file.

- Never follows symbolic links (O_NOFOLLOW) and reads regular files only (FIFOs, sockets and
  devices would block or never end).
- gzip is recognised by its magic bytes (`1f 8b`), whatever the name; concatenated members are
  read; a truncated or corrupt stream yields what could be decompressed, status `truncated`.
  It is decompressed as a stream, holding at most MAX_GZIP_KEPT bytes (its newest), and stopped
  (status `truncated`, the tail of what was decompressed kept) past MAX_DECOMPRESSED bytes or,
  beyond the first MAX_GZIP_KEPT bytes, past MAX_GZIP_RATIO times the compressed bytes read: a
  2 MB gzip bomb costs a fraction of a second and tens of MB, not minutes and gigabytes.
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
# gzip content is held in memory (plain files are streamed from disk): at most this much of it.
MAX_GZIP_KEPT = 64 * MiB
# Text logs compress 5-20:1, very repetitive ones a few hundred; deflate's limit is ~1030:1.
MAX_GZIP_RATIO = 200
GZIP_MAGIC = b"\x1f\x8b"


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
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
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


def _read_gzip(stream, cap: int) -> ReadResult:
    cap = min(cap, MAX_GZIP_KEPT)
    kept: deque[bytes] = deque()
    kept_size = 0
    dropped_lines = 0
    last_dropped = b"\n"
    produced = 0
    consumed = 0  # compressed bytes read (those still in `pending` are not decompressed yet)
    problem = ""

    def keep(chunk: bytes) -> None:
        nonlocal kept_size, dropped_lines, last_dropped
        if not chunk:
            return
        kept.append(chunk)
        kept_size += len(chunk)
        while kept and kept_size - len(kept[0]) >= cap:
            old = kept.popleft()
            kept_size -= len(old)
            dropped_lines += old.count(b"\n")
            last_dropped = old[-1:]

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
            produced += len(out)
            keep(out)
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
                break  # complete (trailing garbage after the last member is ignored)
            if flushed:
                problem = "gzip stream truncated"
                break
            if produced > MAX_DECOMPRESSED:
                problem = f"decompression stopped after {produced} bytes"
                break
            if _over_ratio(produced, consumed - len(pending)):
                problem = (f"decompression stopped after {produced} bytes: over {MAX_GZIP_RATIO} times"
                           f" the {consumed - len(pending)} compressed bytes read (a gzip bomb?)")
                break
    except zlib.error as error:
        problem = f"corrupt gzip data ({error})"
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
# Large plain files are not held in memory: `probe_file` reads what ingest needs up front (a head
# and a tail sample, the size, where the kept part starts) and `iter_blocks` reads the kept part
# again, block by block, when the file is analysed.

SMALL_FILE = 1 * MiB  # plain files up to this size, and gzip files, are read whole
SAMPLE = 256 * 1024  # head and tail kept by the probe of a large file
BLOCK = 8 * MiB


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
    if info is None or not stat.S_ISREG(info.st_mode) or info.st_size <= SMALL_FILE or cap <= 0:
        result = read_file(path, cap)
        result.data = normalise_crlf(result.data)
        return Probe(result, True, 0, len(result.data))
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        result = read_file(path, cap)
        result.data = normalise_crlf(result.data)
        return Probe(result, True, 0, len(result.data))
    try:
        if os.pread(fd, 2, 0) == GZIP_MAGIC:
            os.close(fd)
            fd = -1
            result = read_file(path, cap)
            result.data = normalise_crlf(result.data)
            return Probe(result, True, 0, len(result.data))
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
        raw = 2 * SAMPLE + 2
        head = normalise_crlf(os.pread(fd, min(raw, kept), start))[:SAMPLE]
        tail = normalise_crlf(os.pread(fd, min(raw, kept), size - min(raw, kept)))[-SAMPLE:]
        return Probe(ReadResult(head + tail, status, detail, False, offset), False, start, kept)
    except OSError as error:
        return Probe(ReadResult(b"", "unreadable", _describe(error)), True)
    finally:
        if fd >= 0:
            os.close(fd)


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


def iter_blocks(path: Path | str, start: int, size: int, block: int = BLOCK):
    """The kept part of a large plain file in blocks that end at a line end (the last one at the
    end of the part), CRLF normalised."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        position, end, carry = start, start + size, b""
        while position < end:
            piece = os.pread(fd, min(block, end - position), position)
            if not piece:
                break
            position += len(piece)
            piece = carry + piece if carry else piece
            cut = piece.rfind(b"\n") + 1
            if position >= end or cut == 0:
                if position >= end:
                    carry = b""
                    yield normalise_crlf(piece)
                else:
                    carry = piece
                continue
            carry = piece[cut:]
            yield normalise_crlf(piece[:cut] if carry else piece)
        if carry:
            yield normalise_crlf(carry)
    finally:
        os.close(fd)


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


def whole_window(data: bytes) -> Window:
    return Window(data, 0, len(data), 0, True)


def iter_windows(path: Path | str, start: int, size: int, block: int | None = None):
    """Windows over bytes [start, start + size) of a large plain file (see Window); bodies of
    about `block` bytes (WINDOW_BLOCK)."""
    block = block or WINDOW_BLOCK
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        stop = start + size
        body = context = start  # file offsets: the next body, and where its before context starts
        crlf_before_body = 0  # CR bytes normalisation removed in [start, body)
        while body < stop:
            requested = min(body + block + AFTER_READ, stop) - context
            data = _read_span(fd, context, requested)
            if len(data) < requested:
                stop = context + len(data)  # the file shrank while being read
            if body >= stop:
                break
            begin = body - context
            end = _body_end(fd, data, context, begin, min(body + block, stop) - context, stop)
            del data[_after_end(fd, data, context, end, stop):]
            last = context + end >= stop
            next_body, next_context = context + end, context + _before_start(data, end)
            offset = context - start - crlf_before_body
            if data.find(b"\r") >= 0:
                crlf_head, crlf_body = data.count(b"\r\n", 0, begin), data.count(b"\r\n", begin, end)
                offset += crlf_head
                crlf_before_body += crlf_body
                data = data.replace(b"\r\n", b"\n")
                begin, end = begin - crlf_head, end - crlf_head - crlf_body
            yield Window(data, begin, end, offset, last)
            del data
            body, context = next_body, next_context
    finally:
        os.close(fd)


def _read_span(fd: int, position: int, size: int) -> bytearray:
    buffer = bytearray(size)
    got = os.preadv(fd, [buffer], position) if size > 0 else 0
    del buffer[got:]
    return buffer


def _extend(fd: int, data: bytearray, context: int, stop: int, amount: int) -> bool:
    """Append up to `amount` more bytes of the file to data; False at the end of the part."""
    position = context + len(data)
    if position >= stop:
        return False
    more = os.pread(fd, min(amount, stop - position), position)
    data.extend(more)
    return bool(more)


def _body_end(fd: int, data: bytearray, context: int, begin: int, want: int, stop: int) -> int:
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
        if not _extend(fd, data, context, stop, CHUNK):
            return len(data)


def _after_end(fd: int, data: bytearray, context: int, end: int, stop: int) -> int:
    """End of the after context: CONTEXT_LINES lines past `end` within CONTEXT_BYTES (the rest
    of the part when shorter), reading more of the file when data holds too few."""
    position, lines = end - 1, 0
    while lines < CONTEXT_LINES:
        found = data.find(b"\n", position + 1)
        if found < 0:
            if len(data) - end < CONTEXT_BYTES and _extend(fd, data, context, stop, AFTER_READ):
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
