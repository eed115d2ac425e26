"""Line times: the leading timestamp of a log line, normalised to UNIX seconds (UTC).

A line carries a wall-clock time (`wall`, UNIX seconds UTC), a kernel monotonic stamp (`mono`,
seconds since boot), both (syslog/journal kernel lines such as
`Dec  2 13:04:06 host kernel: [12345.678901] ...`) or neither.

Only a *leading* timestamp counts, after optional prefixes: an `srun --label` task prefix
(`12: `), a PyTorch `[rankN]:` prefix, a syslog `<PRI>` and RFC 5424 version, a `dmesg -x`
facility/level prefix (`kern  :err   : `) and leading blanks.  A time inside the message (Slurm's
`CANCELLED AT 2024-04-20T09:09:37`) is not the line's time.

Conventions:
- A time without a zone is UTC.  Zoned times (ISO 8601 `+01:00`, `+0100`, `Z`) are converted.
- Formats without a year (RFC 3164 `Dec  2 13:04:06`, journalctl short/short-precise, glog
  `E1202 13:04:06.123456`) take the year from `year_hint`; with no hint their `wall` is None
  (guessing a year would make the output depend on when it runs).  A kernel mono stamp on the
  same line is still returned.
- The `dmesg` delta format `[  +0.000316]` carries no absolute time: LineTime(None, None).
- Impossible dates (month 13, Feb 30, hour 25) give no wall time, and so do times outside
  timebounds' sane range (years 1970..2199; a mono stamp over a century): a hostile stamp such
  as `9999-12-31T23:59:59-12:00` is ignored, never passed on to date arithmetic.
"""

from __future__ import annotations

import calendar
import re
import statistics
import time
from dataclasses import dataclass
from functools import lru_cache

import re2

from slurm_attrib.ingest.types import Evidence, JobContext
from slurm_attrib.timebounds import sane_time, sane_uptime, sane_year


@dataclass(frozen=True, slots=True)
class LineTime:
    wall: float | None = None  # UNIX seconds, UTC
    mono: float | None = None  # seconds since boot (kernel ring-buffer stamp)


NO_TIME = LineTime(None, None)

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_MON = r"(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DOW = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_HMS = r"(?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d)"
_FRAC = r"(?:[.,](?P<frac>\d{1,9}))?"
_ZONE = r"(?P<zone>Z|[+-]\d\d(?::?\d\d)?)?"

# Prefixes stripped before looking for the leading timestamp.
_PREFIX = re.compile(
    r"\s*(?:\d{1,6}: )?"  # srun --label
    r"(?:\[default\d+\]:)?"  # torchrun --tee / log-line prefix (local rank)
    r"(?:\[(?:rank|RANK)\d+\]:)?"  # PyTorch [rankN]:
    r"(?:<\d{1,3}>(?:1 )?)?"  # syslog <PRI>, RFC 5424 version
    r"(?:[a-z]{2,8} *:[a-z]{2,7} *: )?"  # dmesg -x "kern  :err   : "
    r"\s*"
)

# ISO 8601 / RFC 3339 / RFC 5424 / journalctl short-iso(-precise) / dmesg --time-format iso /
# Python logging (`2024-12-02 13:04:06,123`) / slurmd `[2024-12-02T13:04:06.123]` / IBM Storage
# Scale's mmfs.log (`2024-12-02_13:04:06.123+0100: [E] ...`: a colon may end the stamp, zone and all).
_ISO = re.compile(
    r"(?P<y>\d{4})-(?P<m>\d\d)-(?P<d>\d\d)[T _]" + _HMS + _FRAC + r" ?" + _ZONE + r"(?!\d|:\d)"
)
# RFC 3164 and journalctl short / short-precise: `Dec  2 13:04:06`, `Dec 02 13:04:06.123456`.
_BSD = re.compile(_MON + r" +(?P<d>\d{1,2}) " + _HMS + _FRAC + r"(?: (?P<y>\d{4})(?= ))?(?![\d:])")
# Month, day and year before the time, in brackets: NVIDIA Fabric Manager's log
# (`[Jul 23 2024 07:53:55] [ERROR] [tid 841] ...`).
_MDY = re.compile(_MON + r" +(?P<d>\d{1,2}) (?P<y>\d{4}) " + _HMS + _FRAC + r"\]")
# ctime style: `Tue Apr  9 01:21:38 2024` (dmesg -T, inside brackets) or without a year; older
# GPFS logs put a colon after the year (`Mon Jun 25 22:23:36.298 2018: Close connection ...`).
_CTIME = re.compile(
    _DOW + r" " + _MON + r" +(?P<d>\d{1,2}) " + _HMS + _FRAC + r"(?: (?P<y>\d{4})(?!\d|:\d)|(?![\d:]))"
)
# journalctl short-full: `Mon 2024-12-02 13:04:06 UTC`.
_FULL = re.compile(
    _DOW + r" (?P<y>\d{4})-(?P<m>\d\d)-(?P<d>\d\d) " + _HMS + _FRAC + r"(?: (?P<abbr>[A-Z]{1,5}))?(?![\d:])"
)
# glog: `E1202 13:04:06.123456` (severity letter, MMDD).
_GLOG = re.compile(r"[IWEFD](?P<m>\d\d)(?P<d>\d\d) " + _HMS + _FRAC + r"(?![\d:])")
# dmesg mono stamp: `[  123.456789]`.  Ten digits or more before the point are no uptime (that is
# over 31 years) but a UNIX time, as UCX and other tools print gettimeofday: `[1668693503.473099]`.
_MONO = re.compile(r"\[\s*(?P<mono>\d+\.\d+)\]")
UNIX_TIME_DIGITS = 10
_DELTA = re.compile(r"\[\s*[+-]\d+\.\d+\]")
# torchrun elastic error block: `time      : 2022-02-26_22:02:07`.
_ELASTIC = re.compile(r"time\s*: (?P<y>\d{4})-(?P<m>\d\d)-(?P<d>\d\d)_" + _HMS + r"(?![\d:])")
# After a syslog header: `host prog[pid]: [12345.678901] ...` (kernel mono inside a syslog line).
_AFTER_HEADER_MONO = re.compile(r" +\S+ +kernel: +\[\s*(?P<mono>\d+\.\d+)\]")
_UTC_ABBR = {"UTC", "GMT", "Z", "UT"}


def _frac(text: str | None) -> float:
    return float("0." + text) if text else 0.0


@lru_cache(maxsize=4096)  # a log's stamps name one or two zones
def _zone_offset(zone: str | None) -> int:
    if not zone or zone == "Z":
        return 0
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    hours = int(digits[:2])
    minutes = int(digits[2:4]) if len(digits) >= 4 else 0
    return sign * (hours * 3600 + minutes * 60)


def _wall(year: int, month: int, day: int, hour: int, minute: int, second: int, frac: float,
          offset: int = 0) -> float | None:
    whole = _whole_seconds(year, month, day, hour, minute, second)
    return None if whole is None else sane_time(whole + frac - offset)


def _whole_seconds(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int | None:
    """UNIX seconds of a time of day, before its fraction and zone (None: no such time)."""
    if not (hour <= 23 and minute <= 59 and second <= 60):
        return None
    midnight = _midnight(year, month, day)
    if midnight is None:
        return None
    return midnight + hour * 3600 + minute * 60 + second


# The whole seconds of the stamps read so far, by their text from the year (ISO) or month (glog,
# with the year it is read in) to the second: a log's lines share a few seconds (every rank of a
# job times out within one), and reading the numbers was most of reading a stamp.
_SECONDS_OF_TEXT: dict[tuple, int | None] = {}
MAX_SECONDS_KEPT = 16384  # about 2.5 MB at most
_UNREAD = object()


def _seconds_of(m: re.Match, first_group: str, year: int | None) -> int | None:
    key = (year, m.string[m.start(first_group):m.end("S")])
    whole = _SECONDS_OF_TEXT.get(key, _UNREAD)
    if whole is _UNREAD:
        if len(_SECONDS_OF_TEXT) >= MAX_SECONDS_KEPT:
            _SECONDS_OF_TEXT.clear()
        whole = _whole_seconds(year if year is not None else int(m["y"]), int(m["m"]), int(m["d"]),
                               int(m["H"]), int(m["M"]), int(m["S"]))
        _SECONDS_OF_TEXT[key] = whole
    return whole


@lru_cache(maxsize=4096)
def _midnight(year: int, month: int, day: int) -> int | None:
    """UNIX seconds of the day's start (UTC), None for no such day: a log's lines share a few days."""
    if not (1 <= month <= 12 and 1 <= day <= 31) or not sane_year(year) or day > calendar.monthrange(year, month)[1]:
        return None
    return calendar.timegm((year, month, day, 0, 0, 0, 0, 0, 0))


def _mono(text: str) -> float | None:
    return sane_uptime(float(text))


def _from_iso(m: re.Match) -> float | None:
    whole = _seconds_of(m, "y", None)
    return None if whole is None else sane_time(whole + _frac(m["frac"]) - _zone_offset(m["zone"]))


def _glog_time(m: re.Match, year_hint: int | None) -> LineTime:
    """A glog stamp's time (it names no year: none without the year the log is read in)."""
    if year_hint is None:
        return NO_TIME
    whole = _seconds_of(m, "m", year_hint)
    return LineTime(None if whole is None else sane_time(whole + _frac(m["frac"])), None)


def _from_month_name(m: re.Match, year_hint: int | None) -> float | None:
    year = int(m["y"]) if m["y"] else year_hint
    if year is None:
        return None
    return _wall(year, _MONTHS[m["mon"]], int(m["d"]), int(m["H"]), int(m["M"]), int(m["S"]),
                 _frac(m["frac"]))


def _syslog_mono(text: str, pos: int) -> float | None:
    """The kernel mono stamp after a syslog header ending at pos, if any."""
    found = _AFTER_HEADER_MONO.match(text, pos)
    return _mono(found["mono"]) if found else None


def parse_line_time(text: str, year_hint: int | None) -> LineTime:
    """The leading time of one log line (see the module docstring for the formats)."""
    if not text:
        return NO_TIME
    if len(text) > 512:
        text = text[:512]
    pos = _PREFIX.match(text).end()
    if pos >= len(text):
        return NO_TIME
    first = text[pos]
    if first == "[":
        return _bracketed(text, pos, year_hint)
    if first.isdigit():
        m = _ISO.match(text, pos)
        if m is None:
            return NO_TIME
        # dmesg --time-format iso (`,123456+00:00`) has no host field; syslog ISO lines may carry
        # a kernel mono stamp after `host kernel:`.
        mono = None if "," in m.group(0) else _syslog_mono(text, m.end())
        return LineTime(_from_iso(m), mono)
    if first in "JFMASOND":
        m = _BSD.match(text, pos)
        if m is not None:
            return LineTime(_from_month_name(m, year_hint), _syslog_mono(text, m.end()))
    if first in "IWEFD":
        m = _GLOG.match(text, pos)
        if m is not None:
            return _glog_time(m, year_hint)
    if first in "MTWFS":
        m = _CTIME.match(text, pos)
        if m is not None:
            return LineTime(_from_month_name(m, year_hint), None)
        m = _FULL.match(text, pos)
        if m is not None:
            abbr = m["abbr"]
            if abbr and abbr not in _UTC_ABBR:
                return NO_TIME  # a zone abbreviation we cannot resolve
            wall = _wall(int(m["y"]), int(m["m"]), int(m["d"]), int(m["H"]), int(m["M"]),
                         int(m["S"]), _frac(m["frac"]))
            return LineTime(wall, _syslog_mono(text, m.end()))
    if first == "t":
        m = _ELASTIC.match(text, pos)
        if m is not None:
            return LineTime(_wall(int(m["y"]), int(m["m"]), int(m["d"]), int(m["H"]), int(m["M"]),
                                  int(m["S"]), 0.0), None)
    return NO_TIME


def _bracketed(text: str, pos: int, year_hint: int | None) -> LineTime:
    m = _MONO.match(text, pos)
    if m is not None:
        if m["mono"].index(".") >= UNIX_TIME_DIGITS:
            return LineTime(sane_time(float(m["mono"])), None)
        return LineTime(None, _mono(m["mono"]))
    if _DELTA.match(text, pos):
        return NO_TIME
    inner = pos + 1
    if inner >= len(text):
        return NO_TIME
    first = text[inner]
    if first.isdigit():  # [2024-12-02 13:04:06] (NCCL 2.26+), [2024-12-02T13:04:06.123] (slurmd)
        m = _ISO.match(text, inner)
        if m is not None and text.startswith("]", m.end()):
            return LineTime(_from_iso(m), None)
        return NO_TIME
    if first in "MTWFS":  # dmesg -T: [Tue Apr  9 01:21:38 2024]
        m = _CTIME.match(text, inner)
        if m is not None:
            return LineTime(_from_month_name(m, year_hint), None)
    if first in "IWEFD":  # PyTorch glog: [E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629]
        m = _GLOG.match(text, inner)
        if m is not None:
            return _glog_time(m, year_hint)
    if first in "JFMASOND":  # [Dec  2 13:04:06] and similar; Fabric Manager's [Dec 02 2026 13:04:06]
        m = _BSD.match(text, inner) or _MDY.match(text, inner)
        if m is not None:
            return LineTime(_from_month_name(m, year_hint), None)
    return NO_TIME


# Every format above holds hh:mm:ss or a bracketed mono stamp: a line without either has no time.
# RE2: the look for an inherited time may read most of a long untimed job output (NCCL INFO
# start-up), where Python's re, with no literal to skip to, reads 70 MB/s and RE2 600.
_STAMP_MARK = re2.compile(rb"\d\d:\d\d:\d\d|\[[ \t\n\r\f\v]*\d+\.\d+\]")


def _line_text(data: bytes, start: int, end: int) -> str:
    return data[start:min(end, start + 512)].decode("utf-8", errors="replace")


def time_before(data: bytes, offset: int, year_hint: int | None, max_lines: int = 30, floor: int = 0) -> LineTime:
    """The time of the nearest line *before* the line starting at `offset` that carries one.

    Looks back at most `max_lines` lines, and not at lines that start before `floor`;
    LineTime(None, None) when none of them has a time.  The line at `offset` itself is not
    considered (parse it with parse_line_time).
    """
    offset = max(0, min(offset, len(data)))
    line_start = data.rfind(b"\n", 0, offset) + 1  # tolerant of offsets inside a line
    if line_start == 0:
        return NO_TIME
    region = _reach_back(data, line_start, max_lines, floor)
    # One search over the region finds the lines that may hold a time (a mark); they are read
    # nearest first.
    marked = []
    for mark in _STAMP_MARK.finditer(data, region, line_start - 1):
        start = data.rfind(b"\n", 0, mark.start()) + 1
        if not marked or marked[-1] != start:
            marked.append(start)
    for start in reversed(marked):
        end = data.find(b"\n", start, line_start)
        found = parse_line_time(_line_text(data, start, line_start - 1 if end < 0 else end), year_hint)
        if found.wall is not None or found.mono is not None:
            return found
    return NO_TIME


def _reach_back(data: bytes, line_start: int, max_lines: int, floor: int) -> int:
    """The start of the farthest line time_before reads: at most max_lines lines before
    line_start, none starting before floor."""
    first = floor if floor == 0 or data[floor - 1:floor] == b"\n" else data.find(b"\n", floor, line_start) + 1 or line_start
    if data.count(b"\n", first, line_start) <= max_lines:
        return first  # the usual case: hits close together (one count, no loop)
    region = line_start
    for _ in range(max_lines):
        if region == 0:
            break
        start = data.rfind(b"\n", 0, region - 1) + 1
        if start < floor:
            break
        region = start
    return region


def time_after(data: bytes, offset: int, year_hint: int | None, max_lines: int = 30) -> tuple[LineTime, int]:
    """The time of the nearest line *after* the line starting at `offset` that carries one, and
    the offset where the search stopped (that line's start, or the end of the lines searched)."""
    first = data.find(b"\n", max(0, min(offset, len(data))))
    if first < 0:
        return NO_TIME, len(data)
    # The stamped line is most often a few lines down: it is looked for in the next NEAR_BYTES
    # first, and the end of the `max_lines` lines (a newline search per line) is found only when
    # it is not there; a 32,768-rank cascade looks ahead 44,000 times.
    position, bound, limit = first + 1, min(len(data), first + 1 + NEAR_BYTES), None
    while True:
        mark = _STAMP_MARK.search(data, position, bound)
        if mark is None:
            if limit is None:
                limit = _end_of_lines(data, first, max_lines)
                if limit > bound:
                    bound = limit
                    continue
            return NO_TIME, limit
        start = data.rfind(b"\n", 0, mark.start()) + 1
        if limit is None and data.count(b"\n", first + 1, start) >= max_lines:
            return NO_TIME, _end_of_lines(data, first, max_lines)
        end = data.find(b"\n", mark.start())
        found = parse_line_time(_line_text(data, start, len(data) if end < 0 else end), year_hint)
        if found.wall is not None or found.mono is not None:
            return found, start
        if end < 0:
            return NO_TIME, len(data) if limit is None else limit
        position = end + 1


NEAR_BYTES = 8192


def _end_of_lines(data: bytes, first: int, max_lines: int) -> int:
    """The end of the `max_lines` lines after the newline at `first` (the end of data when fewer)."""
    stop = first
    for _ in range(max_lines):
        stop = data.find(b"\n", stop + 1)
        if stop < 0:
            return len(data)
    return stop


def last_time(data: bytes, year_hint: int | None, max_lines: int = 50) -> LineTime:
    """The time of the last line of `data` that carries one (how long a source kept writing)."""
    end = len(data)
    while end > 0 and data[end - 1] == 0x0A:  # trailing newlines, without copying the data
        end -= 1
    last_start = data.rfind(b"\n", 0, end) + 1
    found = parse_line_time(_line_text(data, last_start, end), year_hint)
    if found.wall is not None or found.mono is not None:
        return found
    return time_before(data, last_start, year_hint, max_lines=max_lines)


def year_hint(job: JobContext) -> int | None:
    """The year of the job (from its start, else its end), for year-less timestamps."""
    for value in (job.start, job.end):
        if sane_time(value) is not None:
            return time.gmtime(value).tm_year
    return None


# Each starts with the year's literal "20" (a fast search) and checks what precedes it by a
# look-behind: `2024-12-02T13:` / `2024-12-02 13:` and the ctime year of `[... 10:00:00 2024]`.
_ISO_YEAR = re.compile(rb"(20\d\d)(?<=\b20\d\d)-[01]\d-[0-3]\d[T ][0-2]\d:")
_CTIME_YEAR = re.compile(rb"(20\d\d)(?<=\b\d\d:\d\d:\d\d 20\d\d)\]")
_YEAR_SAMPLE = 65536


def sample_years(data: bytes) -> list[int]:
    """The distinct years that full-date timestamps in the head and tail of data carry."""
    found: set[bytes] = set()
    samples = (data,) if len(data) <= 2 * _YEAR_SAMPLE else (data[:_YEAR_SAMPLE], data[-_YEAR_SAMPLE:])
    for sample in samples:  # a small file whole, once
        found.update(_ISO_YEAR.findall(sample), _CTIME_YEAR.findall(sample))
    return sorted(int(year) for year in found)


def evidence_year(evidence: Evidence) -> int | None:
    """The year for year-less timestamps: the job's, else the latest year that full-date
    timestamps in the evidence carry (read from the head and tail of each file)."""
    hint = year_hint(evidence.job)
    if hint is not None:
        return hint
    years = [
        year
        for source in evidence.files
        for year in (source.years if source.years is not None else sample_years(source.data))
    ]
    return max(years) if years else None


_KERNEL_PAIR = re.compile(rb"kernel: +\[\s*\d+\.\d+\]")
_MAX_PAIRS_PER_NODE = 2000


def boot_observations(data: bytes, begin: int, end: int, node: str | None, hint: int | None,
                      observations: dict[str, list[float]]) -> None:
    """Add the (wall - mono) of the lines in data[begin:end] that carry both stamps, per node
    (the file's node, else the host a job-level syslog line names), at most _MAX_PAIRS_PER_NODE."""
    from slurm_attrib.ingest.origin import line_origin

    if node is not None and len(observations.get(node, ())) >= _MAX_PAIRS_PER_NODE:
        return
    for found in _KERNEL_PAIR.finditer(data, begin, end):
        start = data.rfind(b"\n", 0, found.start()) + 1
        stop = data.find(b"\n", found.end())
        text = _line_text(data, start, len(data) if stop < 0 else stop)
        stamp = parse_line_time(text, hint)
        if stamp.wall is None or stamp.mono is None:
            continue
        owner = node if node is not None else line_origin(text).host
        if owner is None:
            continue
        seen = observations.setdefault(owner, [])
        if len(seen) < _MAX_PAIRS_PER_NODE:
            seen.append(stamp.wall - stamp.mono)


def merge_observations(into: dict[str, list[float]], more: dict[str, list[float]]) -> None:
    """Add one file's observations to those of the files before it, at most _MAX_PAIRS_PER_NODE."""
    for node, values in more.items():
        seen = into.setdefault(node, [])
        seen.extend(values[: max(_MAX_PAIRS_PER_NODE - len(seen), 0)])


def boot_times_from(observations: dict[str, list[float]]) -> dict[str, float]:
    return {node: statistics.median(values) for node, values in sorted(observations.items()) if values}


def estimate_boot_times(evidence: Evidence) -> dict[str, float]:
    """Per node, the boot time (wall - mono, UNIX seconds) from lines carrying both stamps.

    Observations come from the node's own files and from job-level files whose syslog host
    field names a node; the median of the observations is taken (robust to syslog daemons that
    stamp early boot messages with their receive time).  Nodes without such lines are absent.
    """
    hint = evidence_year(evidence)
    observations: dict[str, list[float]] = {}
    for source in evidence.files:
        if source.kind not in ("kernel", "syslog"):
            continue
        for block in source.blocks():
            boot_observations(block, 0, len(block), source.node, hint, observations)
    return boot_times_from(observations)
