"""A job's kernel noise counted in compiled code (Apache Arrow), not line by line in Python.

Seven in ten lines the rules match in a GPU node's logs are the kernel's corrected-error noise
(PCIe AER, EDAC, mlx5 commands), each one more line of an event that collapses them
(event.collapse): a count per device, program and side of the job's window.  Read one at a time in
Python, a line costs 13-15 us (its decoding, RE2, its fields, its time, its origin, its key); Arrow's
kernels read the same lines a column at a time for a few (benchmarks/README.md).  Here the
candidate lines of a window that such a rule reads are split off, matched by Arrow's RE2 (the engine
the scanner runs the same patterns on) and grouped by what their event's key is made of; the events
layer (_scan_file) reads the first and the last line of each group the Python way, which makes or
joins the event and checks the group, and counts the lines between.  The windows of small files
are counted ahead, many files to one pass (NoiseCounter.prepare): each of Arrow's calls costs
about a millisecond, whatever it reads.

A line is counted only where both ways are sure to read it alike:
- the window is ASCII, with no NUL, CR or escape (the scanner reads such a line's bytes as they are), and
  the line is no longer than the scanner reads;
- its rule set holds one rule that collapses, with no hook, decode, ends, following lines, requires
  or capture, whose regex names all its groups and whose key values can neither be empty nor fail
  to cast; the line matches that regex and none of its `unless`, and no other rule of the set;
- it starts with a stamp whose reading is the same for every line of its group: a dmesg stamp
  (`[  123.456789]`, grouped by the minute the scanner's clock gives it), a syslog header with an
  ISO stamp, or dmesg's own ISO stamp; an ISO stamp's side of the job's window is read once per
  minute (from its first and last stamp: the time rises with the text) and a header's origin once
  per host and program;
- it names no rank (`Rank `), and no bracket follows a syslog header (a kernel stamp there gives
  the line a second time).
A line that matches no rule of its set is no hit either way and is dropped; every other candidate
line is read the Python way, and so is every line of a group whose first and last lines do not
read alike (a safety net: the tests hold it idle), and of a group of one or two lines.

Counting pays where events gather many lines; where they gather few (a many-node job's small
files, each node's dmesg in per-minute buckets), Arrow's passes cost more than they spare: the
counting stops (PER_FILE_LINES, SPARED_SHARE) and the lines are read in Python.  Either way the
events are the same, field for field (tests/test_counting.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import islice
from dataclasses import dataclass, field
from typing import Any

from slurm_attrib.ingest.origin import SYSLOG_HOST_AND_PROGRAM, Origin, line_origin
from slurm_attrib.ingest.timestamps import LineTime, parse_line_time
from slurm_attrib.ruleset.scanner import MAX_LINE_CHARS, CompiledRule, Scanner
from slurm_attrib.ruleset.spec import Rule, anchored, compiled

COUNTED_KINDS = ("kernel", "syslog")
MIN_LINES = 1024  # planned lines (of a window, or of a batch of small files) below which they are read line by line
BATCH_LINES = 16384  # planned lines of small files counted in one batch (their texts are held meanwhile)
BATCH_BYTES = 8 * 1024 * 1024  # ... and at most about this many bytes of them (a line is cut after MAX_LINE_CHARS)
COUNT_FROM_BYTES = 32 * 1024 * 1024  # kernel and syslog bytes of a job from which Arrow is loaded
# The passes so far must have spared the Python reading of at least this share of the lines they
# grouped (a group's lines but its first and last); a job whose noise comes in smaller groups (a
# many-node job's per-minute dmesg buckets, read once per node) is read in Python from then on:
# there Arrow's passes cost 6 % more than they spared (g_32768_rank_cascade, 18 % spared).
SPARED_SHARE = 0.3
# Small files whose planned lines average fewer than this are read in Python, and stop the counting
# before Arrow is loaded: their events hold a few lines each (g: 4,096 nodes, 27 lines a file; h:
# 89, where Arrow spares 3 % of the CPU for 68 MB; a: 145, where it spares 10 % for 75 MB, and d:
# 680, a quarter: benchmarks/README.md, the eighteenth session).
PER_FILE_LINES = 128

# How a counted line starts, read once per line: a dmesg stamp (at most 10^9 s: a sane uptime,
# read exactly); a syslog header with an ISO stamp (journalctl -o short-iso[-precise], rsyslog's
# RFC 3339), by its minute and the rest, and whether a bracket follows the header; or dmesg's own
# ISO stamp (`dmesg --time-format iso`: a comma before the fraction, no host) or ctime stamp
# (`dmesg -T`: `[Wed Dec  2 14:22:05 2026]`).  Each stamp is cut around its seconds: the text
# before them (its minute) and after them (`zone`: its zone, or the year of a ctime stamp).
_START = (r"^(?:\[\s*(?P<seconds>\d{1,9})\.\d{1,6}\]"
          r"|(?P<minute>\d{4}-\d\d-\d\dT\d\d:\d\d):(?P<second>[0-5]\d(?:\.\d{1,9})?)"
          r"(?P<zone>Z|[+-]\d\d:?\d\d)?" + SYSLOG_HOST_AND_PROGRAM + r"(?P<bracket> *\[)?"
          r"|(?P<iso_minute>\d{4}-\d\d-\d\dT\d\d:\d\d):(?P<iso_second>[0-5]\d,\d{1,9})(?P<iso_zone>[+-]\d\d:\d\d) "
          r"|(?P<ctime_minute>\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
          r" +\d{1,2} \d\d:\d\d):(?P<ctime_second>[0-5]\d)(?P<ctime_zone> \d{4}\]) )")


@dataclass(slots=True)
class Count:
    """Candidate lines of one window whose events share one key: the first and the last line
    (offsets into the window's data, and line numbers), how many lines, and which."""
    first: int
    last: int
    first_lineno: int
    last_lineno: int
    lines: int
    literal_ids: frozenset[int]
    file: int  # the file's number in the evidence
    members: Any  # which lines (Arrow columns and the group's row; member_offsets)


def arrow_available() -> bool:
    from importlib.util import find_spec

    return find_spec("pyarrow") is not None


def _arrow():
    try:
        import pyarrow
        import pyarrow.compute
    except ImportError:  # an install without the wheel: every line is read in Python
        return None
    # The C library's allocator gives freed windows back; Arrow's own (mimalloc) kept 60 MB more
    # at the peak of a 200 MB job (benchmarks/README.md).
    pyarrow.set_memory_pool(pyarrow.system_memory_pool())
    pyarrow.set_cpu_count(1)  # one thread: the scan is one process's work, and threads' arenas hold memory
    return pyarrow, pyarrow.compute


def counted_rule(rule: Rule) -> bool:
    """Whether the rule's hits may be counted here (see the module docstring)."""
    event, match = rule.event, rule.match
    if event.collapse is None or event.cascade is not None or event.hook or event.decode is not None:
        return False
    if event.ends or match.following or match.requires or match.capture:
        return False
    if match.anchored or any(map(anchored, match.unless)):
        return False  # read again after a launcher's prefix or an indent (scanner._read), which Arrow does not
    regex = compiled(match.regex, match.ignore_case)
    if regex.groups != len(regex.groupindex):
        return False  # Arrow reads named groups only
    for name in regex.groupindex:
        cast = rule.fields.get(name, "str")
        if cast in ("int", "float") and _digits_only(match.regex, name):
            continue  # digits always cast
        if cast not in ("str", "lower") and name not in event.collapse:
            return False  # a value that may fail to cast must be in the key (one cast per group)
    return all(name not in regex.groupindex or not _may_be_empty(match.regex, name) for name in event.collapse)


def _may_be_empty(pattern: str, name: str) -> bool:
    """Whether the named group may match the empty string when it takes part (Arrow gives a group
    that took no part as empty text: the two must not be confused)."""
    body = _group_body(pattern, name)
    return body is None or _width(body) == 0


def _digits_only(pattern: str, name: str) -> bool:
    """Whether the named group matches one or more ASCII digits and nothing else."""
    from re import _constants as sre_constants

    body = _group_body(pattern, name)
    if body is None or _width(body) == 0:
        return False

    def digits(items) -> bool:
        for op, value in items:
            if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
                if not digits(value[2]):
                    return False
            elif op is sre_constants.IN:
                if value != [(sre_constants.CATEGORY, sre_constants.CATEGORY_DIGIT)] and not all(
                        o is sre_constants.RANGE and 48 <= v[0] <= v[1] <= 57 for o, v in value):
                    return False
            elif not (op is sre_constants.LITERAL and 48 <= value <= 57):
                return False
        return True

    return digits(body)


def _group_body(pattern: str, name: str):
    """The parsed items of the named group (Python's parser reads RE2's syntax of the rules);
    None when it cannot be read: such a rule is not counted."""
    from re import _parser as sre_parser

    try:
        tree = sre_parser.parse(pattern)
        return _find_group(tree.data, tree.state.groupdict[name])
    except Exception:  # noqa: BLE001 - any failure of the parser: not counted
        return None


def _find_group(items, number: int):
    from re import _constants as sre_constants

    for op, value in items:
        if op is sre_constants.SUBPATTERN:
            if value[0] == number:
                return value[-1]  # an optional group that takes part is as wide as its body
            found = _find_group(value[-1], number)
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
            found = _find_group(value[2], number)
        elif op is sre_constants.BRANCH:
            found = next((b for b in (_find_group(branch, number) for branch in value[1]) if b is not None), None)
        else:
            continue
        if found is not None:
            return found
    return None


def _width(items) -> int:
    from re import _parser as sre_parser

    return sre_parser.SubPattern(None, items).getwidth()[0]


@dataclass(slots=True)
class _Plan:
    number: int  # its place among the scan's plans
    counted: CompiledRule  # the rule whose hits are counted
    others: list[CompiledRule]  # the set's other rules: a line they match is read in Python
    literal_ids: frozenset[int]


@dataclass
class _Window:
    """The candidate lines of one window: those planned for counting, as columns, and the rest."""
    file: int
    offsets: list[int] = field(default_factory=list)  # into the window's data
    linenos: list[int] = field(default_factory=list)
    plans: list[int] = field(default_factory=list)
    texts: list[bytes] = field(default_factory=list)
    rest: list[tuple[int, frozenset[int] | None]] = field(default_factory=list)


Split = tuple[list[Count], list[tuple[int, frozenset[int] | None]]]


class NoiseCounter:
    """Splits a job's windows into counted lines and lines read in Python (one per scan).  The
    windows of small files are counted ahead, many files to one batch (prepare): Arrow's calls
    cost about a millisecond each, whatever they read."""

    def __init__(self, scanner: Scanner, year: int | None, when: Callable[[LineTime], tuple | None],
                 mono_span: int):
        self.scanner = scanner
        self.year = year
        self.when = when  # the side of the job's window a time is on (events._when)
        self.mono_span = mono_span
        self._plans: dict[tuple[frozenset[int], str], _Plan | None] = {}
        self._plan_list: list[_Plan] = []
        self._counted_rules: dict[str, bool] = {}
        self._prepared: dict[int, Split] = {}
        self.stopped = False  # the passes so far spared too few lines: counting stopped (SPARED_SHARE)
        self._spared = self._grouped = 0
        self._arrow = None  # loaded by the first batch worth counting

    def split(self, file: int, data: bytes, kind: str, begin: int, end: int, first_line: int) -> Split:
        """The counted groups of data[begin:end] (a window of file number `file`), and the
        candidate lines left to the scanner, in line order."""
        prepared = self._prepared.pop(file, None)
        if prepared is not None and begin == 0 and end == len(data) and first_line == 1:
            return prepared
        if self.stopped:
            return [], self.scanner.candidate_lines(data, begin, end)
        window = self._window(file, data, kind, begin, end, first_line)
        if isinstance(window, list):
            return [], window
        if len(window.offsets) < MIN_LINES:
            return [], sorted(window.rest + self._planned(window), key=_first)
        return self._run([window])[file]

    def prepare(self, files: list, order: Sequence[int], position: int) -> None:
        """Count ahead the small files (one window each) to be scanned from order[position] on
        (`order`: the numbers of `files` in the order they are scanned), together, until
        BATCH_LINES lines are planned."""
        if self.stopped or order[position] in self._prepared or not _one_window(files[order[position]]):
            return
        windows: list[_Window] = []
        planned = held = 0
        for file in islice(order, position, None):
            source = files[file]
            if not _one_window(source) or source.kind not in COUNTED_KINDS:
                continue
            data = next(source.blocks())
            window = self._window(file, data, source.kind, 0, len(data), 1)
            if isinstance(window, list):
                self._prepared[file] = ([], window)
                continue
            windows.append(window)
            planned += len(window.offsets)
            held += sum(map(len, window.texts))
            if planned >= BATCH_LINES or held >= BATCH_BYTES:
                break
        if planned < MIN_LINES or planned < PER_FILE_LINES * len(windows):
            # Too few lines, or files too small for their events to gather many lines each.
            self.stopped = planned >= MIN_LINES
            for window in windows:
                self._prepared[window.file] = ([], sorted(window.rest + self._planned(window), key=_first))
            return
        self._prepared.update(self._run(windows))

    def _window(self, file: int, data: bytes, kind: str, begin: int, end: int,
                first_line: int) -> _Window | list[tuple[int, frozenset[int] | None]]:
        """The window's candidate lines, split into planned and rest; or all of them, when none
        may be counted."""
        candidates = self.scanner.candidate_lines(data, begin, end)
        if kind not in COUNTED_KINDS or not candidates:
            return candidates
        body = data[begin:end]
        if not body.isascii() or b"\x00" in body or b"\r" in body or b"\x1b" in body:
            return candidates
        window = _Window(file)
        lineno, position = first_line, begin
        for start, literal_ids in candidates:
            plan = self._plan(literal_ids, kind) if literal_ids is not None else None
            if plan is None:
                window.rest.append((start, literal_ids))
                continue
            lineno += data.count(b"\n", position, start)
            position = start
            stop = data.find(b"\n", start, end)
            stop = end if stop < 0 else stop
            window.offsets.append(start)
            window.linenos.append(lineno)
            window.plans.append(plan.number)
            window.texts.append(bytes(data[start:min(stop, start + MAX_LINE_CHARS + 1)]))  # longer: read in Python
        return window

    def _planned(self, window: _Window) -> list[tuple[int, frozenset[int]]]:
        """The planned lines as candidate lines (when too few to count)."""
        return [(offset, self._plan_list[n].literal_ids) for offset, n in zip(window.offsets, window.plans)]

    def _plan(self, literal_ids: frozenset[int], kind: str) -> _Plan | None:
        key = (literal_ids, kind)
        if key not in self._plans:
            rules = self.scanner.rules_on(literal_ids, kind)
            counted = [r for r in rules if self._counted(r.rule)]
            plan = None
            if len(counted) == 1:
                plan = _Plan(len(self._plan_list), counted[0], [r for r in rules if r is not counted[0]], literal_ids)
                self._plan_list.append(plan)
            self._plans[key] = plan
        return self._plans[key]

    def _counted(self, rule: Rule) -> bool:
        if rule.id not in self._counted_rules:
            self._counted_rules[rule.id] = counted_rule(rule)
        return self._counted_rules[rule.id]

    def _run(self, windows: list[_Window]) -> dict[int, Split]:
        """Count the planned lines of these windows in one pass: per window, its groups and the
        candidate lines left to the scanner."""
        if self._arrow is None:
            self._arrow = _arrow()
        pa, pc = self._arrow
        file_of = pa.array([w.file for w in windows for _ in w.offsets], pa.int32())
        plan_of = pa.array([n for w in windows for n in w.plans], pa.int32())
        offsets = pa.array([o for w in windows for o in w.offsets], pa.int64())
        linenos = pa.array([n for w in windows for n in w.linenos], pa.int64())
        text = pa.array([t for w in windows for t in w.texts], pa.binary())
        rows = len(text)
        hit = pa.array([False] * rows)
        other = hit
        key = pa.array([b""] * rows, pa.binary())
        for number in sorted(set(plan_of.to_pylist())):
            mask = pc.equal(plan_of, number)
            found, rivals, values = self._read(self._plan_list[number], pc.filter(text, mask))
            hit = pc.replace_with_mask(hit, mask, found)
            other = pc.replace_with_mask(other, mask, rivals)
            key = pc.replace_with_mask(key, mask, values)
        whole = pc.less_equal(pc.binary_length(text), MAX_LINE_CHARS)
        none_hit = pc.and_(whole, pc.invert(pc.or_(hit, other)))  # no hit in Python either: dropped
        start = pc.extract_regex(text, _START)
        readable = pc.and_(pc.and_(whole, hit), pc.invert(pc.or_(other, pc.match_substring(text, "Rank "))))
        readable = pc.fill_null(pc.and_(readable, pc.is_valid(start)), False)
        empty = pa.scalar(b"", pa.binary())
        by_dmesg = pc.and_(readable, pc.not_equal(start.field("seconds"), empty))
        by_header = pc.or_(pc.and_(pc.and_(readable, pc.not_equal(start.field("minute"), empty)),
                                   pc.equal(start.field("bracket"), empty)),
                           pc.and_(readable, pc.or_(pc.not_equal(start.field("iso_minute"), empty),
                                                    pc.not_equal(start.field("ctime_minute"), empty))))
        seconds = pc.if_else(by_dmesg, start.field("seconds"), pa.scalar(b"0", pa.binary()))
        minute = pc.divide(pc.cast(pc.cast(seconds, pa.string()), pa.int64()), self.mono_span)
        header_side, header_known = self._header_sides(start, by_header)
        by_header = pc.and_(by_header, header_known)
        side = pc.if_else(by_dmesg, minute, pc.subtract(pc.negate(header_side), 1))  # headers' below 0
        counted = pc.or_(by_dmesg, by_header)
        found: dict[int, Split] = {w.file: ([], list(w.rest)) for w in windows}
        spared = 0
        for count in self._groups(counted, side, key, plan_of, file_of, offsets, linenos):
            counts, rest = found[count.file]
            self._grouped += count.lines
            if count.lines > 2:
                counts.append(count)
                spared += count.lines - 2
            else:  # reading its first and last line is reading it all
                rest += [(count.first, count.literal_ids)] + ([(count.last, count.literal_ids)] if count.lines == 2 else [])
        self._spared += spared
        if self._grouped >= MIN_LINES and self._spared < SPARED_SHARE * self._grouped:
            self.stopped = True  # this job's noise comes in groups too small to pay: read it in Python
        left = pc.invert(pc.or_(counted, none_hit))
        back = zip(pc.filter(file_of, left).to_pylist(), pc.filter(offsets, left).to_pylist(),
                   pc.filter(plan_of, left).to_pylist())
        for file, offset, number in back:
            found[file][1].append((offset, self._plan_list[number].literal_ids))
        for counts, rest in found.values():
            counts.sort(key=lambda count: count.first)
            rest.sort(key=_first)
        return found

    def _read(self, plan: _Plan, text):
        """Per line: whether the counted rule hits it, whether another rule of its set matches it,
        and the counted rule's key values, joined."""
        pa, pc = self._arrow
        rule = plan.counted.rule
        case = rule.match.ignore_case
        values = pc.extract_regex(text, ("(?i)" if case else "") + rule.match.regex)
        found = pc.fill_null(pc.is_valid(values), False)
        for unless in rule.match.unless:
            found = pc.and_(found, pc.invert(pc.match_substring_regex(text, unless, ignore_case=case)))
        rivals = pa.array([False] * len(text))
        for rival in plan.others:
            rivals = pc.or_(rivals, pc.match_substring_regex(text, rival.rule.match.regex,
                                                             ignore_case=rival.rule.match.ignore_case))
        names = [n for n in rule.event.collapse if n in compiled(rule.match.regex).groupindex]
        if not names:
            return found, rivals, pa.array([b""] * len(text), pa.binary())
        parts = [pc.fill_null(values.field(n), b"") for n in names]
        joined = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, b"\x00")
        return found, rivals, joined

    def _header_sides(self, start, by_header):
        """Per line, a number standing for the side of the job's window its time is on and its
        origin, and whether that is known without reading the line in Python.  A stamp's time rises
        with its seconds' text within one minute (and zone, or year): the lines of one minute share
        a side when its first and its last stamp do, each read once here (a minute a side changes
        in, at most two in a job, is read line by line).  The origin is the header's host and
        program, read once per pair (no host: a kernel log's own line, which names none)."""
        pa, pc = self._arrow
        empty = pa.scalar(b"", pa.binary())
        dmesg_iso = pc.not_equal(start.field("iso_minute"), empty)
        dmesg_ctime = pc.not_equal(start.field("ctime_minute"), empty)

        def either(name: str):
            return pc.if_else(dmesg_ctime, start.field("ctime_" + name),
                              pc.if_else(dmesg_iso, start.field("iso_" + name), start.field(name)))

        minute = pc.dictionary_encode(pc.binary_join_element_wise(either("minute"), either("zone"), b"\x00"))
        names = pc.dictionary_encode(pc.binary_join_element_wise(start.field("host"), start.field("prog"), b"\x00"))
        table = pa.table({"minute": minute.indices, "second": either("second")}).filter(by_header)
        sides: dict[tuple, int] = {}
        side_of_minute = [-1] * len(minute.dictionary)
        if table.num_rows:
            spans = table.group_by("minute", use_threads=False).aggregate([("second", "min"), ("second", "max")])
            for index, low, high in zip(*(spans.column(n).to_pylist() for n in ("minute", "second_min", "second_max"))):
                before, after = minute.dictionary[index].as_py().split(b"\x00")
                first, last = (self._time(before + b":" + second + after) for second in (low, high))
                if first is not None and first == last:
                    side_of_minute[index] = sides.setdefault(first, len(sides))
        origin_of_name = []
        for name in names.dictionary.to_pylist():
            host, prog = name.split(b"\x00")
            header = "2000-01-01T00:00:00 " + host.decode() + " " + prog.decode() + ": " if host else "2000-01-01T00:00:00,0+00:00 -"
            origin: Origin = line_origin(header)
            origin_of_name.append((origin.host, origin.rank, origin.task, origin.program))
        origins = {origin: number for number, origin in enumerate(dict.fromkeys(origin_of_name))}
        origin_code = pc.take(pa.array([origins[o] for o in origin_of_name], pa.int64()), names.indices)
        side_code = pc.take(pa.array(side_of_minute, pa.int64()), minute.indices)
        known = pc.and_(by_header, pc.greater_equal(side_code, 0))
        return pc.add(pc.multiply(side_code, len(origins) + 1), origin_code), known

    def _time(self, stamp: bytes) -> tuple | None:
        """The side of the job's window a stamp is on (None: it gives no wall-clock time)."""
        found = parse_line_time(stamp.decode() + " -", self.year)
        return None if found.wall is None or found.mono is not None else self.when(found)

    def _groups(self, mask, side, key, plan_of, file_of, offsets, linenos) -> list[Count]:
        pa, pc = self._arrow
        table = pa.table({"file": file_of, "plan": plan_of, "side": side, "key": key,
                          "row": pa.array(range(len(key)), pa.int64())}).filter(mask)
        if table.num_rows == 0:
            return []
        grouped = table.group_by(["file", "plan", "side", "key"], use_threads=False).aggregate(
            [("row", "min"), ("row", "max"), ("row", "count"), ("row", "list")])
        firsts, lasts = grouped.column("row_min"), grouped.column("row_max")
        columns = zip(pc.take(offsets, firsts).to_pylist(), pc.take(offsets, lasts).to_pylist(),
                      pc.take(linenos, firsts).to_pylist(), pc.take(linenos, lasts).to_pylist(),
                      grouped.column("row_count").to_pylist(), grouped.column("plan").to_pylist(),
                      grouped.column("file").to_pylist())
        members = grouped.column("row_list")
        return [Count(first, last, first_lineno, last_lineno, size, self._plan_list[plan].literal_ids, file,
                      (members, row, offsets, linenos))
                for row, (first, last, first_lineno, last_lineno, size, plan, file) in enumerate(columns)]


def member_offsets(count: Count) -> list[tuple[int, int]]:
    """(offset, line number) of each line of a group, in line order (the safety net's path)."""
    members, row, offsets, linenos = count.members
    rows = sorted(members[row].as_py())
    return list(zip(offsets.take(rows).to_pylist(), linenos.take(rows).to_pylist()))


def _one_window(source) -> bool:
    """Whether the file is read as one window (held, or read again whole)."""
    return not source.streamed or source.start < 0


def _first(candidate: tuple) -> int:
    return candidate[0]
