"""Capture sources: built-in defaults, bounded reading of commands and files, the pre-filter.

Every source has its own timeout and byte cap (SourceConfig.timeout / .max_bytes) and never
raises: its outcome is a result dict with a status

    ok | empty | missing | forbidden | timeout | truncated | error | skipped

and the kept lines with their ORIGINAL line numbers.

Reading rules:
  * commands run from an argv list (no shell), in their own session (process group), with a
    minimal environment, and are read to their end: a command cannot skip its oldest output the
    way a file read can, and the end of a job (where failures are) is the end of its journal.
    On timeout the whole process group gets SIGKILL (a command that ignores SIGTERM cannot
    stretch the bound) and what came until then is kept;
  * files: only the newest max_bytes are scanned (the newlines of the skipped prefix are counted
    so line numbers stay those of the real file);
  * kept lines are held in a bounded deque that drops the OLDEST kept lines when the source's
    share of the bundle (or its max_bytes) is used up: the newest lines survive; the lines that
    map ranks and addresses to hosts (the first of each, NCCL `Init COMPLETE` ...) are kept
    apart in up to a quarter of that share;
  * a line longer than MAX_LINE_SCAN is cut for matching; a kept line is cut at MAX_LINE_KEEP.

Pre-filter: a line is kept when it holds a literal (`match.contains`) of a rule the analyzer
tries on this kind of source (`sources`; `ignore_case` rules make the grep pass
case-insensitive, a superset), plus `context_lines` before and
max(context_lines, largest match.following) after, plus the first and the last line of the
scanned window (time anchoring).  The matching runs in GNU grep (`grep -a -n -F`, LC_ALL=C)
fed through a pipe: the same speed as a shell `... | grep` capture; without grep, or with
SATTRIB_FILTER_ENGINE=python, an in-process matcher gives the same result.

Several SourceConfig entries with the same name are alternatives tried in order (the kernel
source: journalctl -k, else dmesg, else /var/log/kern.log): the next one is tried when one is
missing, fails without output, or yields no lines.  Placeholders in command arguments and paths:
%N node, %j job id, %% percent, {start} / {end} job window (UNIX seconds, integers).

Special names (their path may be left empty):
  job_stdout / job_stderr   path from SLURM_JOB_STDOUT/ERR with Slurm's %-patterns; read only on
                            the batch host; the file must be a regular file owned by the job's
                            uid, opened with O_NOFOLLOW
  flight_recorder           glob (default /tmp/nccl_trace_rank_*) of PyTorch flight-recorder dumps:
                            files modified inside the job window (a minute's slack), at most
                            max_files of them (newest first) and max_bytes in all, owned by the
                            job's uid, are summarised on the node into `sattrib-fr ...` text lines
                            (capture.frdump, restricted unpickler: no code runs); presence, size
                            and mtime of every matching file are listed too
  ib_counters               sysfs InfiniBand port counters and state (deltas vs the prolog)
  fabricmanager             /var/log/fabricmanager.log (NVSwitch systems): the root daemon's own log
Any other app-kind path source is user-written and gets the same ownership checks as job output.

Provenance (slurm_attrib.provenance): every result says who can write its source.  Commands and
probes run as root are what their kind says; a file is too only when root owns it and nobody else
may write it; the syslog source reads journald's root services only (`_UID=0`), and the plain
/var/log/syslog and /var/log/messages fallbacks, which any user's `logger` writes, are `user`.
"""

from __future__ import annotations

import glob
import heapq
import os
import re
import selectors
import signal
import stat
import subprocess
import threading
import time
from collections import deque

from slurm_attrib.capture.common import CaptureError, KeptLines, expand_output_pattern, find_executable
from slurm_attrib.config import SourceConfig
from slurm_attrib.provenance import Provenance, vouched

# Reads stay under glibc's 128 KiB mmap threshold: freeing a larger buffer raises that threshold
# (up to 32 MiB) and the trim threshold with it, and every thread's malloc arena then keeps
# megabytes it has freed (peak RSS +20 MB on a node with a 200 MB job output).
CHUNK = 64 * 1024
PIPE_SIZE = 1 << 20
MAX_LINE_SCAN = 64 * 1024
MAX_LINE_KEEP = 4096
MAX_GLOB_FILES = 32
MAP_SHARE = 4  # at most a 1/MAP_SHARE of a source's kept bytes hold its rank and address map lines
CMD_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C", "SYSTEMD_PAGER": "", "PAGER": "cat"}

_J = "journalctl"


def default_sources() -> list[SourceConfig]:
    """The built-in capture sources (used when the config lists none; a config entry with the
    same name replaces the built-in one(s), `enabled: false` turns one off)."""
    return [
        SourceConfig(
            name="kernel",
            kind="kernel",
            command=(_J, "-k", "--since", "@{start}", "--until", "@{end}", "-o", "short-iso-precise", "--no-pager", "-q"),
            timeout=4.0,
        ),
        SourceConfig(name="kernel", kind="kernel", command=("dmesg", "--time-format", "iso"), timeout=3.0),
        # rsyslog writes kern.log: the syslog daemon's copy of the kernel's lines, not the ring buffer
        SourceConfig(name="kernel", kind="kernel", path="/var/log/kern.log", timeout=3.0, provenance="daemon"),
        SourceConfig(
            name="syslog",
            kind="syslog",
            # root's services only: journald sets _UID from the sender's socket credentials, so a
            # user's `logger` line (any tag, `-t kernel` too) is not among them
            command=(
                _J, "--since", "@{start}", "--until", "@{end}", "-o", "short-iso-precise", "--no-pager", "-q",
                "_TRANSPORT=syslog", "_TRANSPORT=journal", "_TRANSPORT=stdout", "_UID=0",
            ),
            timeout=4.0,
            senders="root",
        ),
        # without journald every user's `logger` lines are in these files, under any tag
        SourceConfig(name="syslog", kind="syslog", path="/var/log/syslog", timeout=3.0, provenance="user"),
        SourceConfig(name="syslog", kind="syslog", path="/var/log/messages", timeout=3.0, provenance="user"),
        # NVSwitch systems: Fabric Manager's own log (root's nv-fabricmanager, LOG_FILE_NAME of its
        # fabricmanager.cfg), which repeats the switches' SXids and says why the fabric failed; a
        # node without NVSwitches has none (status missing)
        SourceConfig(name="fabricmanager", kind="app", path="/var/log/fabricmanager.log", timeout=2.0,
                     max_bytes=1024 * 1024, provenance="daemon"),
        SourceConfig(name="job_stdout", kind="app", timeout=4.0, max_bytes=64 * 1024 * 1024),
        SourceConfig(name="job_stderr", kind="app", timeout=4.0, max_bytes=64 * 1024 * 1024),
        SourceConfig(name="nccl_debug", kind="app", path="", timeout=2.0),
        SourceConfig(
            name="flight_recorder", kind="app", path="/tmp/nccl_trace_rank_*", timeout=3.0,
            max_bytes=64 * 1024 * 1024, max_files=16, prefilter=False,
        ),
        SourceConfig(
            name="nvidia_smi",
            kind="nvidia_smi",
            command=("nvidia-smi", "-q", "-d", "ECC,ROW_REMAPPER,PAGE_RETIREMENT"),
            timeout=5.0,
            max_bytes=1024 * 1024,
            prefilter=False,
        ),
        SourceConfig(name="ib_counters", kind="sysfs", timeout=1.0, prefilter=False),
    ]


def effective_sources(configured: tuple[SourceConfig, ...]) -> list[list[SourceConfig]]:
    """Groups of alternatives, in order.  Configured names replace built-in groups."""
    groups: dict[str, list[SourceConfig]] = {}
    for src in default_sources():
        groups.setdefault(src.name, []).append(src)
    replaced: dict[str, list[SourceConfig]] = {}
    for src in configured:
        replaced.setdefault(src.name, []).append(src)
    for name, alts in replaced.items():
        groups[name] = alts
    out = []
    for alts in groups.values():
        enabled = [a for a in alts if a.enabled]
        if enabled:
            out.append(enabled)
    return out


# --------------------------------------------------------------------------- kept lines


class KeepBuffer:
    """Kept lines, bounded in bytes; drops the oldest when full.  Held as blocks of `N:text`
    lines (grep -n's output as it comes), split only at the end: the many lines that a full
    share drops again are never split and parsed one by one.  The lines that map ranks and
    addresses to hosts (MapLines) are held apart, inside the same budget: NCCL prints them at
    start-up, so they are the oldest lines of a job's output, the first dropped."""

    def __init__(self, budget: int, maps=()):
        self.budget = max(budget, 4096)
        self.blocks: deque[bytes] = deque()
        self.size = 0
        self.dropped = 0
        self.maps = MapLines(maps, self.budget // MAP_SHARE) if maps else None

    def add(self, lineno: int, text: bytes) -> None:
        self.add_block(b"%d:%s\n" % (lineno, text))

    def add_block(self, block: bytes) -> None:
        """Complete `N:text` (or grep's context `N-text`) lines, numbers increasing."""
        if self.maps is not None:
            self.maps.add_block(block)
        self.blocks.append(block)
        self.size += _cost(block)
        limit = self.budget - (self.maps.size if self.maps is not None else 0)
        while len(self.blocks) > 1 and self.size - _cost(self.blocks[0]) >= limit:
            old = self.blocks.popleft()
            self.size -= _cost(old)
            self.dropped += old.count(b"\n")

    def take(self):
        """The kept lines (line number, text), oldest first, long ones cut, within the budget
        that the map lines leave: yielded as the buffer empties, so that they are never all held
        as Python objects at once."""
        limit = self.budget - (self.maps.size if self.maps is not None else 0)
        sizes = [_taken_size(block) for block in self.blocks]
        size, count = sum(s for s, _ in sizes), sum(n for _, n in sizes)
        for block_size, block_count in sizes:
            block = self.blocks.popleft()
            if size - block_size > limit and count > block_count:  # every line of it is dropped
                size, count = size - block_size, count - block_count
                self.dropped += block_count
                continue
            for lineno, text in _numbered(block):
                if size > limit and count > 1:
                    size, count = size - len(text) - 16, count - 1
                    self.dropped += 1
                else:
                    yield lineno, text


def _taken_size(block: bytes) -> tuple[int, int]:
    """(bytes the lines of a block count for once taken, number of lines)."""
    size = count = 0
    for _, text in _numbered(block):
        size += len(text) + 16
        count += 1
    return size, count


def _cost(block: bytes) -> int:
    """Bytes a block of kept lines counts for (its text and a few bytes per line in the bundle)."""
    return len(block) + 8 * block.count(b"\n")


_NUMBERED = re.compile(rb"(\d+)[:-]")


def _numbered(block: bytes):
    """(line number, text) of each `N:text` line of a block, a long text cut."""
    for line in block.split(b"\n"):
        m = _NUMBERED.match(line)
        if m:
            yield int(m[1]), _cut(line[m.end() :])


def _cut(text: bytes) -> bytes:
    return text[:MAX_LINE_KEEP] + b" [...line cut by sattrib]" if len(text) > MAX_LINE_KEEP else text


class MapLines:
    """The first line of each rank or address of the map rules (literals.MapRule), in at most
    `budget` bytes: with the first lines of a rank map kept, every later line of the rank names
    its node."""

    def __init__(self, rules, budget: int):
        self.rules = [(rule, _bytes_regex(rule.regex)) for rule in rules]
        self.literals = sorted({lit for rule in rules for lit in rule.literals})
        self.budget = budget
        self.items: list[tuple[int, bytes]] = []
        self.size = 0
        self.seen: set[tuple] = set()
        self.full = False

    def add_block(self, block: bytes) -> None:
        """Offer the map lines of a block of `N:text` lines, in order."""
        if self.full or not any(lit in block for lit in self.literals):
            return
        starts = set()
        for lit in self.literals:
            at = block.find(lit)
            while at >= 0:
                starts.add(block.rfind(b"\n", 0, at) + 1)
                at = block.find(lit, at + len(lit))
        for start in sorted(starts):
            end = block.find(b"\n", start)
            for lineno, text in _numbered(block[start : end if end >= 0 else len(block)]):
                self.add(lineno, text)

    def add(self, lineno: int, text: bytes) -> bool:
        """Whether the line was taken (the first of its rank or address, and room left)."""
        if self.full or not any(lit in text for lit in self.literals):
            return False
        key = self._key(text)
        if key is None or key in self.seen:
            return False
        cost = len(text) + 16
        if self.size + cost > self.budget:
            self.full = True
            return False
        self.seen.add(key)
        self.items.append((lineno, text))
        self.size += cost
        return True

    def rebase(self, base: int | None) -> None:
        """Map lines found in a file's skipped prefix carry their line numbers in the file; the
        window's are counted from its start (base lines later).  None: the base is not known,
        so the prefix's lines are left out."""
        if base is None:
            self.items, self.size, self.seen, self.full = [], 0, set(), False
        else:
            self.items = [(lineno - base, text) for lineno, text in self.items]

    def _key(self, text: bytes) -> tuple | None:
        for i, (rule, regex) in enumerate(self.rules):
            if not any(lit in text for lit in rule.literals):
                continue
            if regex is None:  # not a Python regex: every such line counts as its own
                return (i, text)
            m = regex.search(text)
            if m:
                return (i, *(m.group(name) for name in rule.key))
        return None


class _MapsOnly:
    """The keep side of the pre-filter run over a file's skipped prefix: map lines only."""

    def __init__(self, maps: MapLines):
        self.maps = maps
        self.dropped = 0

    def add(self, lineno: int, text: bytes) -> None:
        self.maps.add(lineno, _cut(text))

    def add_block(self, block: bytes) -> None:
        self.maps.add_block(block)


def _prefix_engine(maps: MapLines):
    """A pre-filter that hands the map rules' lines of a skipped prefix to `maps`."""
    from slurm_attrib.capture.literals import Literals

    return make_engine(_MapsOnly(maps), True, Literals(exact=list(maps.literals)), 0, 0)


def _bytes_regex(regex: str):
    try:
        return re.compile(regex.encode("utf-8"))
    except (re.error, UnicodeEncodeError):
        return None


# --------------------------------------------------------------------------- engines


class PassEngine:
    """No pre-filter: every line is kept (the KeepBuffer keeps the newest)."""

    name = "none"

    def __init__(self, keep: KeepBuffer):
        self.keep = keep
        self.carry = b""
        self.lineno = 0
        self.error = ""

    def _complete_lines(self, chunk: bytes) -> bytes | None:
        """The chunk's complete lines (joined, without the last newline); the rest is carried."""
        data = self.carry + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self.carry = data
            return None
        self.carry = data[cut + 1 :]
        return data[:cut]

    def feed(self, chunk: bytes) -> None:
        body = self._complete_lines(chunk)
        if body is None:
            return
        for line in body.split(b"\n"):
            self.lineno += 1
            self.keep.add(self.lineno, line)

    def close(self, deadline: float) -> None:
        if self.carry:
            self.lineno += 1
            self.keep.add(self.lineno, self.carry)
            self.carry = b""


class PyEngine(PassEngine):
    """In-process literal pre-filter with context (fallback when grep is missing)."""

    name = "python"

    def __init__(self, keep: KeepBuffer, exact: list[bytes], folded: list[bytes], before: int, after: int):
        super().__init__(keep)
        self.exact, self.folded = exact, folded
        self.before: deque[tuple[int, bytes]] = deque(maxlen=max(before, 0) or None)
        self.nbefore = before
        self.after = after
        self.after_left = 0

    def _hit(self, data: bytes) -> bool:
        """Whether a line (or a whole chunk of lines) holds a rule literal."""
        if any(lit in data for lit in self.exact):
            return True
        if self.folded:
            low = data.lower()
            return any(lit in low for lit in self.folded)
        return False

    def _lines(self, lines: list[bytes]) -> None:
        for line in lines:
            self.lineno += 1
            if self._hit(line):
                while self.before:
                    self.keep.add(*self.before.popleft())
                self.keep.add(self.lineno, line)
                self.after_left = self.after
            elif self.after_left:
                self.keep.add(self.lineno, line)
                self.after_left -= 1
            elif self.nbefore:
                self.before.append((self.lineno, line))

    def feed(self, chunk: bytes) -> None:
        body = self._complete_lines(chunk)
        if body is None:
            return
        if self.after_left == 0 and not self._hit(body):
            count = body.count(b"\n") + 1
            if self.nbefore:
                tail = body.rsplit(b"\n", self.nbefore)[-self.nbefore :]
                first = self.lineno + count - len(tail) + 1
                for i, line in enumerate(tail):
                    self.before.append((first + i, line))
            self.lineno += count
            return
        self._lines(body.split(b"\n"))

    def close(self, deadline: float) -> None:
        if self.carry:
            self._lines([self.carry])
            self.carry = b""


def _grep_path() -> str | None:
    for path in ("/usr/bin/grep", "/bin/grep"):
        if os.access(path, os.X_OK):
            return path
    return None


class GrepEngine:
    """GNU grep as the matcher (`grep -a -n -F -e LIT... -B n -A m`), fed through a pipe."""

    name = "grep"

    def __init__(self, grep: str, keep: KeepBuffer, literals: list[bytes], ignore_case: bool, before: int, after: int):
        self.keep = keep
        self.error = ""
        self.lineno = 0
        argv = [grep, "-a", "-n", "-F", "--no-group-separator"]
        if ignore_case:
            argv.append("-i")
        if before:
            argv += ["-B", str(before)]
        if after:
            argv += ["-A", str(after)]
        for lit in literals:
            argv += ["-e", os.fsdecode(lit)]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=CMD_ENV,
            start_new_session=True,
        )
        _grow_pipe(self.proc.stdin)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        carry = b""
        try:
            fd = self.proc.stdout.fileno()
            while True:
                data = os.read(fd, CHUNK)
                if not data:
                    break
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    carry += data
                    continue
                self.keep.add_block(carry + data[:cut] if carry else data[:cut])
                carry = data[cut:]
            if carry:
                self.keep.add_block(carry + b"\n")
        except (OSError, ValueError) as exc:
            self.error = f"pre-filter read failed: {exc}"

    def feed(self, chunk: bytes) -> None:
        if self.error:
            return
        try:
            self.proc.stdin.write(chunk)
        except (BrokenPipeError, OSError) as exc:
            self.error = f"pre-filter (grep) failed: {exc}"

    def close(self, deadline: float) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.reader.join(max(0.05, deadline - time.monotonic()))
        if self.reader.is_alive():
            kill_group(self.proc)
            self.reader.join(0.5)
            self.error = self.error or "pre-filter did not finish in time"
        try:
            rc = self.proc.wait(max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_group(self.proc)
            rc = -9
        if rc not in (0, 1) and not self.error:
            self.error = f"pre-filter (grep) exit status {rc}"


def _grow_pipe(f) -> None:
    """Fewer context switches per MB: a 1 MB pipe instead of 64 KB (Linux; best effort)."""
    try:
        import fcntl

        fcntl.fcntl(f.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
    except (OSError, ImportError):
        pass


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass


def make_engine(keep: KeepBuffer, prefilter: bool, literals, before: int, after: int):
    if not prefilter or literals is None or literals.empty:
        return PassEngine(keep)
    grep = None if os.environ.get("SATTRIB_FILTER_ENGINE") == "python" else _grep_path()
    if grep:
        try:
            return GrepEngine(grep, keep, literals.all_literals(), bool(literals.folded), before, after)
        except OSError:
            pass
    return PyEngine(keep, literals.exact, literals.folded, before, after)


# --------------------------------------------------------------------------- the raw stream


class Sink:
    """Everything one source yields passes here: bytes and lines are counted, the first and last
    lines remembered, over-long lines cut for matching, the rest handed to the engine."""

    def __init__(self, engine):
        self.engine = engine
        self.bytes = 0
        self.newlines = 0
        self.head = b""
        self.tail = b""
        self.cur_len = 0  # length of the current (unterminated) line so far

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.bytes += len(chunk)
        n = chunk.count(b"\n")
        self.newlines += n
        if len(self.head) <= MAX_LINE_KEEP and b"\n" not in self.head:
            self.head += chunk[: MAX_LINE_KEEP + 1]
        self.tail = (self.tail + chunk[-(MAX_LINE_KEEP + 1) :])[-(MAX_LINE_KEEP + 1) :]
        if n == 0:
            room = MAX_LINE_SCAN - self.cur_len
            self.cur_len += len(chunk)
            if room > 0:
                self.engine.feed(chunk[:room])
            return
        first_nl = chunk.find(b"\n")
        if self.cur_len + first_nl > MAX_LINE_SCAN:
            room = max(MAX_LINE_SCAN - self.cur_len, 0)
            self.engine.feed(chunk[:room])
            chunk = chunk[first_nl:]
        last_nl = chunk.rfind(b"\n")
        self.cur_len = len(chunk) - last_nl - 1
        if self.cur_len > MAX_LINE_SCAN:
            chunk = chunk[: last_nl + 1 + MAX_LINE_SCAN]
        self.engine.feed(chunk)

    def finish(self, base: int, deadline: float) -> tuple[KeptLines, int]:
        """Close the engine; (kept lines, total lines).  base = lines before the window."""
        self.engine.close(deadline)
        total = self.newlines + (1 if self.tail and not self.tail.endswith(b"\n") else 0)
        keep = self.engine.keep
        maps = sorted(keep.maps.items, key=_lineno) if keep.maps is not None else []
        ends = []  # the first and the last line of the window (time anchoring)
        if total:
            body = self.tail[:-1] if self.tail.endswith(b"\n") else self.tail
            ends = [(1, self.head.split(b"\n", 1)[0]), (total, body.rsplit(b"\n", 1)[-1])]
        merged = heapq.merge(maps, keep.take(), ends, key=_lineno)  # each in line order
        lines = KeptLines((base + ln, text[:MAX_LINE_KEEP]) for ln, text in merged)
        return lines, total


def _lineno(item: tuple[int, bytes]) -> int:
    return item[0]


# --------------------------------------------------------------------------- one source


def new_result(src: SourceConfig, name: str | None = None) -> dict:
    return {
        "name": name or src.name,
        "kind": src.kind,
        "provenance": declared_provenance(src).value,
        **({"senders": src.senders} if src.senders else {}),
        "origin": "",
        "status": "error",
        "detail": "",
        "bytes_read": 0,
        "lines_total": 0,
        "lines_kept": 0,
        "line_base_known": True,
        "filter": "",
        "duration": 0.0,
        "lines": [],
    }


def declared_provenance(src: SourceConfig) -> Provenance:
    """Who can write the source, before it is opened: as configured, else (a command run as root,
    a probe) what its kind says; job output and every other user-written source is `user`."""
    if src.provenance:
        return Provenance(src.provenance)
    return vouched(src.kind)


def file_provenance(src: SourceConfig, st: os.stat_result) -> Provenance:
    """A file vouches for its kind only when root owns it and nobody else may write it."""
    if src.provenance or (st.st_uid == 0 and not st.st_mode & 0o022):
        return declared_provenance(src)
    return Provenance.USER


def _expand(text: str, ctx: dict) -> str:
    out = text
    for key in ("start", "end"):
        out = out.replace("{" + key + "}", str(int(ctx.get(key) or 0)))
    out = out.replace("{node}", ctx["node"]).replace("{job}", ctx["job_id"])
    from slurm_attrib.capture.common import expand_path_template

    return expand_path_template(out, ctx["node"], ctx["job_id"])


def run_command(src: SourceConfig, argv: list[str], res: dict, sink: Sink, deadline: float, procs: list) -> None:
    exe = find_executable(argv[0])
    res["origin"] = " ".join(argv)
    if exe is None:
        res["status"], res["detail"] = "missing", f"command not found: {argv[0]}"
        return
    try:
        proc = subprocess.Popen(
            [exe, *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=CMD_ENV,
            start_new_session=True,
        )
    except PermissionError as exc:
        res["status"], res["detail"] = "forbidden", f"cannot run {exe}: {exc.strerror}"
        return
    except OSError as exc:
        res["status"], res["detail"] = "error", f"cannot run {exe}: {exc.strerror or exc}"
        return
    procs.append(proc)
    _grow_pipe(proc.stdout)
    err_tail = b""
    timed_out = False
    sel = selectors.DefaultSelector()
    try:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        out_fd = proc.stdout.fileno()
        while sel.get_map() and not timed_out:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(min(remaining, 0.5)):
                data = os.read(key.fd, CHUNK)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                if key.fd == out_fd:
                    sink.feed(data)
                else:
                    err_tail = (err_tail + data)[-2048:]
    finally:
        sel.close()
        if proc.poll() is None and timed_out:
            kill_group(proc)
        try:
            rc = proc.wait(timeout=max(0.2, min(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            kill_group(proc)
            rc = None
        for f in (proc.stdout, proc.stderr):
            try:
                f.close()
            except OSError:
                pass
    err = err_tail.decode("utf-8", "replace").strip().splitlines()
    err_msg = err[-1][:300] if err else ""
    if timed_out:
        res["status"] = "timeout"
        res["detail"] = f"no end of output within {src.timeout:g}s (or the epilog bound); process group killed; later output not read"
    elif rc not in (0, None):
        res["status"] = "error"
        res["detail"] = f"exit status {rc}" + (f": {err_msg}" if err_msg else "")
    else:
        res["status"] = "ok"


def _open_checked(path: str, src: SourceConfig, ctx: dict, res: dict) -> int | None:
    user_written = src.kind == "app"
    flags = os.O_RDONLY | os.O_NONBLOCK | (os.O_NOFOLLOW if user_written else 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        res["status"], res["detail"] = "missing", f"no such file: {path}"
        return None
    except PermissionError as exc:
        res["status"], res["detail"] = "forbidden", f"{path}: {exc.strerror}"
        return None
    except OSError as exc:
        # ELOOP from O_NOFOLLOW: the final component is a symlink
        status = "forbidden" if exc.errno == 40 else "error"
        res["status"], res["detail"] = status, f"{path}: {exc.strerror or exc}" + (
            " (symlink refused)" if exc.errno == 40 else ""
        )
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        res["status"], res["detail"] = "forbidden", f"{path}: not a regular file"
        return None
    uid = ctx.get("uid")
    if user_written and uid not in (None, "") and str(st.st_uid) != str(uid) and st.st_uid != 0:
        os.close(fd)
        res["status"], res["detail"] = "forbidden", f"{path}: owned by uid {st.st_uid}, not the job's uid {uid}"
        return None
    res["provenance"] = file_provenance(src, st).value
    return fd


def read_file(src: SourceConfig, path: str, ctx: dict, res: dict, sink_factory, deadline: float) -> None:
    res["origin"] = path
    fd = _open_checked(path, src, ctx, res)
    if fd is None:
        return
    sink = sink_factory()
    base = 0
    truncated = timed_out = read_failed = False
    try:
        size = os.fstat(fd).st_size
        if size > src.max_bytes:
            truncated = True
            start = size - src.max_bytes
            maps = sink.engine.keep.maps if isinstance(sink.engine.keep, KeepBuffer) else None
            prefix_maps = Sink(_prefix_engine(maps)) if maps is not None else None
            # count newlines of the skipped prefix, so line numbers stay the real ones, and
            # pick its rank/address map lines (printed at start-up: the oldest lines)
            pos = 0
            while pos < start:
                if time.monotonic() > deadline:
                    res["line_base_known"] = False
                    break
                data = os.pread(fd, min(CHUNK, start - pos), pos)
                if not data:
                    break
                base += data.count(b"\n")
                pos += len(data)
                if prefix_maps is not None:
                    prefix_maps.feed(data)
            # start at the first full line of the window (head[0] is the byte before it)
            head = os.pread(fd, MAX_LINE_SCAN, start - 1)
            nl = head.find(b"\n")
            if nl < 0:
                nl = 0
                res["line_base_known"] = False
            base += 1 if nl >= 1 else 0
            os.lseek(fd, start + nl, os.SEEK_SET)
            if prefix_maps is not None:
                prefix_maps.feed(head[1 : nl + 1])
                prefix_maps.engine.close(deadline)
                maps.rebase(base if res["line_base_known"] else None)
            if not res["line_base_known"]:
                base = 0
        remaining_bytes = src.max_bytes
        while remaining_bytes > 0:
            if time.monotonic() > deadline:
                timed_out = True
                break
            data = os.read(fd, min(CHUNK, remaining_bytes))
            if not data:
                break
            remaining_bytes -= len(data)
            sink.feed(data)
    except OSError as exc:
        res["status"], res["detail"] = "error", f"{path}: read failed: {exc.strerror or exc}"
        read_failed = True
    finally:
        os.close(fd)
    _finish(res, sink, base, deadline)
    if read_failed:
        return
    notes, res["detail"] = res["detail"], ""
    if timed_out:
        res["status"], res["detail"] = "timeout", f"read not finished within {src.timeout:g}s (or the epilog bound)"
    elif truncated:
        res["status"] = "truncated"
        res["detail"] = f"file has {size} bytes; scanned the newest {src.max_bytes}" + (
            "" if res["line_base_known"] else "; line numbers count from the start of the scanned window"
        )
    else:
        res["status"] = "ok"
    res["detail"] = "; ".join(filter(None, [res["detail"], notes]))


def _finish(res: dict, sink: Sink, base: int, deadline: float) -> None:
    lines, total = sink.finish(base, deadline + 0.5)
    engine = sink.engine
    res["bytes_read"] = sink.bytes
    res["lines_total"] = base + total
    res["lines"] = lines
    res["lines_kept"] = len(lines)
    res["filter"] = engine.name
    notes = []
    if engine.error:
        notes.append(engine.error)
    if engine.keep.dropped:
        notes.append(f"{engine.keep.dropped} older kept lines dropped (bundle share full)")
        if engine.keep.maps is not None and engine.keep.maps.items:
            notes.append(f"{len(engine.keep.maps.items)} rank/address map lines kept apart")
    if notes:
        res["detail"] = "; ".join([res["detail"], *notes] if res["detail"] else notes)
        res.setdefault("notes", []).extend(notes)


def capture_group(alts: list[SourceConfig], ctx: dict, literals, deadline: float, procs: list, keep_budget: int) -> list[dict]:
    """Run one source (trying alternatives); returns one result per captured file/command."""
    attempts: list[str] = []
    last: list[dict] = []
    for src in alts:
        t0 = time.monotonic()
        src_deadline = min(deadline, t0 + src.timeout)
        results = _capture_one(src, ctx, literals, src_deadline, procs, keep_budget)
        for r in results:
            r["duration"] = round(time.monotonic() - t0, 3)
        usable = [r for r in results if r["status"] in ("ok", "truncated", "timeout") and _content(r)]
        if usable or src.name in ("flight_recorder", "ib_counters", "job_stdout", "job_stderr"):
            if attempts:
                for r in results:
                    r["detail"] = "; ".join(filter(None, [r["detail"], "fell back after: " + " | ".join(attempts)]))
            return results
        for r in results:
            attempts.append(f"{r['origin'] or r['name']}: {r['status']}" + (f" ({r['detail']})" if r["detail"] else ""))
        last = results
        if time.monotonic() >= deadline:
            break
    if last and len(alts) > 1:
        for r in last:
            r["detail"] = " | ".join(attempts)
            if r["status"] == "ok":
                r["status"] = "empty"
    return last


def _content(res: dict) -> bool:
    return any(not text.startswith("-- ") for _, text in res["lines"]) or res["lines_total"] > 2


def _capture_one(src, ctx, literals, deadline, procs, keep_budget) -> list[dict]:
    from slurm_attrib.capture.common import valid_node

    before = ctx.get("context_lines", 2)
    literals = literals.for_kind(src.kind) if literals is not None else None
    after = max(before, literals.following if literals is not None else 0)

    def sink_factory():
        keep = KeepBuffer(min(keep_budget, src.max_bytes), literals.maps if literals is not None else ())
        return Sink(make_engine(keep, src.prefilter, literals, before, after))

    res = new_result(src)
    try:
        if src.name in ("job_stdout", "job_stderr") and not src.command:
            return [_job_output(src, ctx, res, sink_factory, deadline)]
        if src.name == "flight_recorder":
            return [_flight_recorder(src, ctx, res, deadline)]
        if src.name == "ib_counters":
            return [ctx["ib_source"](src, res)]
        if src.command:
            argv = [_expand(a, ctx) for a in src.command]
            sink = sink_factory()
            run_command(src, argv, res, sink, deadline, procs)
            if res["status"] not in ("missing", "forbidden") or sink.bytes:
                status = res["status"]
                _finish(res, sink, 0, deadline)
                if status == "ok" and not sink.bytes:
                    status = "empty"
                res["status"] = status
            return [res]
        if not src.path:
            res["status"], res["detail"] = "skipped", "no path configured"
            return [res]
        path = _expand(src.path, ctx)
        if glob.has_magic(path):
            files = sorted(glob.glob(path), key=_mtime, reverse=True)[: max(1, min(src.max_files, 256))]
            if not files:
                res["status"], res["detail"], res["origin"] = "missing", f"no file matches {path}", path
                return [res]
            out = []
            for f in files:
                base = os.path.basename(f)
                sub = new_result(src, f"{src.name}/{base}" if valid_node(base) else src.name)
                read_file(src, f, ctx, sub, sink_factory, deadline)
                _empty(sub)
                out.append(sub)
            return out
        read_file(src, path, ctx, res, sink_factory, deadline)
        _empty(res)
        return [res]
    except Exception as exc:  # a source never breaks the capture
        res["status"], res["detail"] = "error", f"{type(exc).__name__}: {exc}"
        return [res]


def _empty(res: dict) -> None:
    if res["status"] == "ok" and res["bytes_read"] == 0:
        res["status"] = "empty"


def _mtime(path: str) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def _job_output(src, ctx, res, sink_factory, deadline) -> dict:
    env_name = "stdout" if src.name == "job_stdout" else "stderr"
    batch_host = ctx.get("batch_host")
    if batch_host and batch_host != ctx["node"]:
        res["status"], res["detail"] = "skipped", f"read on the batch host {batch_host} only"
        return res
    pattern = src.path or ctx.get(env_name)
    if not pattern:
        res["status"], res["detail"] = "missing", f"SLURM_JOB_{env_name.upper()} not set (Slurm < 21.08?)"
        return res
    try:
        path = expand_output_pattern(pattern, ctx, ctx["node"])
    except CaptureError as exc:
        res["status"], res["detail"], res["origin"] = "error", str(exc), pattern
        return res
    if not os.path.isabs(path) and ctx.get("work_dir"):
        path = os.path.join(ctx["work_dir"], path)
    if env_name == "stderr":
        other = ctx.get("stdout_path")
        if other and os.path.normpath(other) == os.path.normpath(path):
            res["status"], res["detail"], res["origin"] = "skipped", "same file as job_stdout", path
            return res
    else:
        ctx["stdout_path"] = path
    read_file(src, path, ctx, res, sink_factory, deadline)
    _empty(res)
    return res


FR_WINDOW_SLACK = 60.0  # seconds around the job window for a dump's mtime
# One dump is loaded whole: a 5 MB dump (2,000 entries with stack traces, torch's default
# buffer) takes ~0.1 s and ~18 MB; larger ones are listed, not read (epilog time and memory).
FR_MAX_FILE_BYTES = 16 * 1024 * 1024


def _flight_recorder(src, ctx, res, deadline: float) -> dict:
    """Summarise the flight-recorder dumps of this job into text lines (never raises, bounded:
    max_files newest files modified in the job window, max_bytes read in all, the deadline
    checked before each file; a corrupt or refused dump is listed with its status)."""
    pattern = _expand(src.path or "/tmp/nccl_trace_rank_*", ctx)
    res["origin"] = pattern
    res["filter"] = "none"
    start, end = ctx.get("start"), ctx.get("end")
    lo = float(start) - FR_WINDOW_SLACK if isinstance(start, (int, float)) and ctx.get("start_from") != "boot" else None
    hi = float(end) + FR_WINDOW_SLACK if isinstance(end, (int, float)) else None
    found = []
    for path in glob.glob(pattern)[:4096]:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        found.append((path, st))
    found.sort(key=lambda item: (-item[1].st_mtime, item[0]))
    files, lines = [], []
    budget = max(0, int(src.max_bytes))
    taken = 0
    for path, st in found[:256]:
        entry = {"path": path, "size": st.st_size, "mtime": st.st_mtime, "uid": st.st_uid}
        files.append(entry)
        if (lo is not None and st.st_mtime < lo) or (hi is not None and st.st_mtime > hi):
            entry["status"] = "skipped: modified outside the job window"
            continue
        if taken >= max(1, int(src.max_files)):
            entry["status"] = f"skipped: more than {src.max_files} files"
            continue
        if time.monotonic() > deadline:
            entry["status"] = "skipped: source time bound reached"
            continue
        if st.st_size > min(budget, FR_MAX_FILE_BYTES):
            entry["status"] = f"skipped: {st.st_size} bytes over the byte budget left ({budget})"
            continue
        taken += 1
        entry["status"] = _summarise_dump(path, st.st_size, src, ctx, lines)
        budget -= st.st_size
        res["bytes_read"] += st.st_size
    res["files"] = files
    res["lines"] = [[i + 1, text] for i, text in enumerate(lines)]
    res["lines_total"] = res["lines_kept"] = len(lines)
    if not files:
        res["status"], res["detail"] = "missing", f"no file matches {pattern}"
    else:
        res["status"] = "ok"
        res["detail"] = f"{len(files)} file(s), {taken} summarised, {len(lines)} summary line(s)"
    return res


def _fr():
    from slurm_attrib.capture import frdump

    return frdump


def _summarise_dump(path: str, size: int, src, ctx, lines: list) -> str:
    frdump = _fr()
    rank = frdump.rank_from_name(os.path.basename(path))
    if rank is None:
        return "skipped: no rank in the file name"
    probe = {"status": "", "detail": ""}
    fd = _open_checked(path, src, ctx, probe)
    if fd is None:
        return f"{probe['status']}: {probe['detail']}"
    try:
        chunks, total = [], 0
        while total <= size:
            data = os.read(fd, CHUNK)
            if not data:
                break
            chunks.append(data)
            total += len(data)
    except OSError as exc:
        return f"error: read failed: {exc.strerror or exc}"
    finally:
        os.close(fd)
    dump = frdump.load_dump(b"".join(chunks))
    del chunks
    if dump is None:
        return "unreadable: not a flight-recorder dump (corrupt, truncated or refused content)"
    summary = frdump.summary_lines(rank, dump)
    lines.extend(summary)
    return f"ok: rank {rank}, {len(summary)} line(s)"
