"""A window's noise counted in compiled code (Apache Arrow), not line by line in Python.

Seven in ten lines the rules match in a GPU node's logs are the kernel's corrected-error noise
(PCIe AER, EDAC, mlx5 commands), each one more line of an event that collapses them
(event.collapse): a count per device, program and side of the job's window.  Read one at a time in
Python, a line costs 13-15 us (its decoding, RE2, its fields, its time, its origin, its key); Arrow's
kernels read the same lines a column at a time for about 3 (benchmarks/README.md).  Here the
candidate lines of a window that such a rule reads are split off, matched by Arrow's RE2 (the engine
the scanner runs the same patterns on) and grouped by what their event's key is made of; the events
layer (_scan_file) reads the first and the last line of each group the Python way and counts the
lines between them.

A line is counted only where both ways are sure to read it alike:
- the window is ASCII, with no NUL or CR (the scanner reads such a line's bytes as they are), and
  the line is no longer than the scanner reads;
- its rule set holds one rule that collapses, with no hook, decode, ends, following lines, requires
  or capture, whose regex names all its groups and whose key values can neither be empty nor fail
  to cast; the line matches that regex and none of its `unless`, and no other rule of the set;
- it starts with a stamp whose reading is the same for every line it starts: a dmesg stamp
  (`[  123.456789]`, grouped by the minute the scanner's clock gives it) or a syslog header
  (stamp, host, program), whose time and origin are read once per header, from its first line;
- it names no rank (`Rank `), and no bracket follows a syslog header (a kernel stamp there gives
  the line a second time).
A line that matches no rule of its set is no hit either way and is dropped; every other candidate
line is read the Python way, and so is every line of a group whose first and last lines do not
read alike (a safety net: the two ways were never seen to differ).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slurm_attrib.ingest.origin import SYSLOG_HOST_AND_PROGRAM, Origin, line_origin
from slurm_attrib.ingest.timestamps import LineTime, parse_line_time
from slurm_attrib.ruleset.scanner import MAX_LINE_CHARS, CompiledRule, Scanner
from slurm_attrib.ruleset.spec import Rule, compiled

COUNTED_KINDS = ("kernel", "syslog")
MIN_LINES = 1024  # a window's countable lines below which it is read line by line (Arrow's calls cost ~1 ms)
COUNT_FROM_BYTES = 32 * 1024 * 1024  # kernel and syslog bytes of a job from which Arrow is loaded

# How a counted line starts, read once per line: a dmesg stamp (at most 10^9 s: a sane uptime,
# read exactly); a syslog header with an ISO stamp (journalctl -o short-iso[-precise], rsyslog's
# RFC 3339), by its minute and the rest, and whether a bracket follows the header; or dmesg's own
# ISO stamp (`dmesg --time-format iso`: a comma before the fraction, no host).
_START = (r"^(?:\[\s*(?P<seconds>\d{1,9})\.\d{1,6}\]"
          r"|(?P<minute>\d{4}-\d\d-\d\dT\d\d:\d\d):(?P<second>[0-5]\d(?:\.\d{1,9})?)"
          r"(?P<zone>Z|[+-]\d\d:?\d\d)?" + SYSLOG_HOST_AND_PROGRAM + r"(?P<bracket> *\[)?"
          r"|(?P<iso_minute>\d{4}-\d\d-\d\dT\d\d:\d\d):(?P<iso_second>[0-5]\d,\d{1,9})(?P<iso_zone>[+-]\d\d:\d\d) )")


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
    members: Any  # the lines' offsets (an Arrow array): read one by one when first and last differ


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
    return pyarrow, pyarrow.compute


def counted_rule(rule: Rule) -> bool:
    """Whether the rule's hits may be counted here (see the module docstring)."""
    event, match = rule.event, rule.match
    if event.collapse is None or event.cascade is not None or event.hook or event.decode is not None:
        return False
    if event.ends or match.following or match.requires or match.capture:
        return False
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
    from re import _parser as sre_parser

    try:
        tree = sre_parser.parse(pattern)
        number = tree.state.groupdict[name]
    except Exception:  # noqa: BLE001 - a pattern Python's parser cannot read: not counted
        return True
    return _group_width(tree.data, number) in (None, 0)


def _digits_only(pattern: str, name: str) -> bool:
    """Whether the named group matches one or more ASCII digits and nothing else."""
    from re import _constants as sre_constants
    from re import _parser as sre_parser

    try:
        tree = sre_parser.parse(pattern)
        body = _group_body(tree.data, tree.state.groupdict[name])
    except Exception:  # noqa: BLE001 - as _may_be_empty
        return False
    if body is None or sre_parser.SubPattern(None, body).getwidth()[0] == 0:
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


def _group_body(items, number: int):
    from re import _constants as sre_constants

    for op, value in items:
        if op is sre_constants.SUBPATTERN:
            if value[0] == number:
                return value[-1]
            found = _group_body(value[-1], number)
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
            found = _group_body(value[2], number)
        elif op is sre_constants.BRANCH:
            found = next((b for b in (_group_body(branch, number) for branch in value[1]) if b is not None), None)
        else:
            continue
        if found is not None:
            return found
    return None


def _group_width(items, number: int) -> int | None:
    from re import _constants as sre_constants
    from re import _parser as sre_parser

    for op, value in items:
        if op is sre_constants.SUBPATTERN:
            if value[0] == number:
                return sre_parser.SubPattern(None, value[-1]).getwidth()[0]
            found = _group_width(value[-1], number)
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
            found = _group_width(value[2], number)  # an optional group that takes part is not empty
        elif op is sre_constants.BRANCH:
            found = next((w for w in (_group_width(b, number) for b in value[1]) if w is not None), None)
        else:
            continue
        if found is not None:
            return found
    return None


@dataclass(slots=True)
class _Plan:
    counted: CompiledRule  # the rule whose hits are counted
    others: list[CompiledRule]  # the set's other rules: a line they match is read in Python


class NoiseCounter:
    """Splits a job's windows into counted lines and lines read in Python (one per scan)."""

    def __init__(self, scanner: Scanner, year: int | None, when: Callable[[LineTime], tuple | None],
                 mono_span: int):
        self.scanner = scanner
        self.year = year
        self.when = when  # the side of the job's window a time is on (events._when)
        self.mono_span = mono_span
        self._plans: dict[tuple[frozenset[int], str], _Plan | None] = {}
        self._counted_rules: dict[str, bool] = {}
        self._arrow = None  # loaded by the first window worth counting

    def split(self, data: bytes, kind: str, begin: int, end: int,
              first_line: int) -> tuple[list[Count], list[tuple[int, frozenset[int] | None]]]:
        """The counted groups of data[begin:end], and the candidate lines left to the scanner, in
        line order."""
        candidates = self.scanner.candidate_lines(data, begin, end)
        if kind not in COUNTED_KINDS or len(candidates) < MIN_LINES:
            return [], candidates
        body = bytes(data[begin:end])
        if not body.isascii() or b"\x00" in body or b"\r" in body:
            return [], candidates
        plans: list[_Plan] = []
        plan_numbers: dict[frozenset[int], int] = {}
        starts: list[int] = []
        numbers: list[int] = []
        rest: list[tuple[int, frozenset[int] | None]] = []
        for start, literal_ids in candidates:
            plan = self._plan(literal_ids, kind) if literal_ids is not None else None
            if plan is None:
                rest.append((start, literal_ids))
                continue
            number = plan_numbers.get(literal_ids)
            if number is None:
                number = plan_numbers[literal_ids] = len(plans)
                plans.append(plan)
            starts.append(start - begin)
            numbers.append(number)
        if len(starts) < MIN_LINES:
            return [], candidates
        if self._arrow is None:
            self._arrow = _arrow()
        counts, back = self._count(plans, list(plan_numbers), body, starts, numbers, begin, first_line)
        rest += [(begin + start, literal_ids) for start, literal_ids in back]
        rest.sort(key=lambda candidate: candidate[0])
        return counts, rest

    def _plan(self, literal_ids: frozenset[int], kind: str) -> _Plan | None:
        key = (literal_ids, kind)
        if key not in self._plans:
            rules = self.scanner.rules_on(literal_ids, kind)
            counted = [r for r in rules if self._counted(r.rule)]
            self._plans[key] = _Plan(counted[0], [r for r in rules if r is not counted[0]]) if len(counted) == 1 else None
        return self._plans[key]

    def _counted(self, rule: Rule) -> bool:
        if rule.id not in self._counted_rules:
            self._counted_rules[rule.id] = counted_rule(rule)
        return self._counted_rules[rule.id]

    def _count(self, plans: list[_Plan], plan_ids: list[frozenset[int]], body: bytes, starts: list[int],
               numbers: list[int], begin: int, first_line: int):
        """The groups of the planned candidate lines (starts: offsets in the body; numbers: each
        line's plan), and the (start, literal ids) of the lines left to the scanner."""
        pa, pc = self._arrow
        lines = pc.split_pattern(pa.array([body], pa.binary()), b"\n")[0].values
        lengths = pc.add(pc.cast(pc.binary_length(lines), pa.int64()), 1)
        line_starts = pc.subtract(pc.cumulative_sum(lengths), lengths)
        starts_array = pa.array(starts, pa.int64())
        plan_of = pa.array(numbers, pa.int32())
        index = pc.index_in(starts_array, value_set=line_starts)
        text = lines.take(index)
        rows = len(text)
        hit = pa.array([False] * rows)
        other = hit
        key = pa.array([b""] * rows, pa.binary())
        for number, plan in enumerate(plans):
            mask = pc.equal(plan_of, number)
            own = pc.filter(text, mask)
            found, rivals, values = self._read(plan, own)
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
                           pc.and_(readable, pc.not_equal(start.field("iso_minute"), empty)))
        seconds = pc.if_else(by_dmesg, start.field("seconds"), pa.scalar(b"0", pa.binary()))
        minute = pc.divide(pc.cast(pc.cast(seconds, pa.string()), pa.int64()), self.mono_span)
        header_side, header_known = self._header_sides(start, by_header)
        by_header = pc.and_(by_header, header_known)
        side = pc.if_else(by_dmesg, minute, pc.subtract(pc.negate(header_side), 1))  # headers' below 0
        counted = pc.or_(by_dmesg, by_header)
        counts = self._groups(counted, side, key, plan_of, index, line_starts, plan_ids, begin, first_line)
        left = pc.invert(pc.or_(counted, none_hit))
        back = zip(pc.filter(starts_array, left).to_pylist(), pc.filter(plan_of, left).to_pylist())
        return counts, [(start, plan_ids[number]) for start, number in back]

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
        origin, and whether that is known without reading the line in Python.  The time of an ISO
        stamp rises with its text within one minute (and zone): the lines of one minute, zone,
        host and program share a side when its first and its last stamp do, each read once here
        (the minute a side changes in, at most two per file, is read line by line)."""
        pa, pc = self._arrow
        rows = len(start)
        dmesg_iso = pc.not_equal(start.field("iso_minute"), pa.scalar(b"", pa.binary()))

        def either(name: str):
            return pc.if_else(dmesg_iso, start.field("iso_" + name), start.field(name))

        table = pa.table({"minute": either("minute"), "zone": either("zone"), "host": start.field("host"),
                          "prog": start.field("prog"), "second": either("second"),
                          "row": pa.array(range(rows), pa.int64())})
        table = table.filter(by_header)
        side_of_row = [0] * rows
        known_row = [False] * rows
        if table.num_rows:
            spans = table.group_by(["minute", "zone", "host", "prog"]).aggregate(
                [("second", "min"), ("second", "max"), ("row", "list")])
            sides: dict[tuple, int] = {}
            columns = [spans.column(n).to_pylist() for n in ("minute", "zone", "host", "prog", "second_min", "second_max")]
            for (minute, zone, host, prog, low, high), members in zip(zip(*columns), spans.column("row_list").to_pylist()):
                prefix = minute.decode() + ":"
                suffix = zone.decode() + (" " + host.decode() + " " + prog.decode() + ": " if host else " -")
                side = self._side(prefix + low.decode() + suffix)
                if side is None or side != self._side(prefix + high.decode() + suffix):
                    continue
                code = sides.setdefault(side, len(sides))
                for row in members:
                    side_of_row[row], known_row[row] = code, True
        return pa.array(side_of_row, pa.int64()), pa.array(known_row, pa.bool_())

    def _side(self, header: str) -> tuple | None:
        """(side of the window, origin) of a line with this start."""
        stamp = parse_line_time(header, self.year)
        if stamp.wall is None or stamp.mono is not None:
            return None
        origin: Origin = line_origin(header)
        return self.when(stamp), origin.host, origin.rank, origin.task, origin.program

    def _groups(self, mask, side, key, plan_of, index, line_starts, plan_ids, begin: int,
                first_line: int) -> list[Count]:
        pa, pc = self._arrow
        table = pa.table({"plan": plan_of, "side": side, "key": key, "line": index}).filter(mask)
        if table.num_rows == 0:
            return []
        grouped = table.group_by(["plan", "side", "key"]).aggregate(
            [("line", "min"), ("line", "max"), ("line", "count"), ("line", "list")])
        firsts = grouped.column("line_min")
        lasts = grouped.column("line_max")
        first_offsets = pc.take(line_starts, firsts).to_pylist()
        last_offsets = pc.take(line_starts, lasts).to_pylist()
        members = grouped.column("line_list")
        counts = [Count(begin + f_off, begin + l_off, first_line + f, first_line + l, size, plan_ids[plan],
                        (members, row, line_starts, begin))
                  for row, (f, l, size, f_off, l_off, plan) in enumerate(zip(
                      firsts.to_pylist(), lasts.to_pylist(), grouped.column("line_count").to_pylist(),
                      first_offsets, last_offsets, grouped.column("plan").to_pylist()))]
        counts.sort(key=lambda count: count.first)
        return counts


def member_offsets(count: Count) -> list[tuple[int, int]]:
    """(offset, line number) of each line of a group, in line order (the safety net's path)."""
    members, row, line_starts, begin = count.members
    lines = sorted(members[row].as_py())
    first_line = count.first_lineno - lines[0]
    starts = line_starts.take(lines).to_pylist()
    return [(begin + start, first_line + line) for start, line in zip(starts, lines)]


def _caseless(pattern: str, ignore_case: bool) -> str:
    return "(?i)" + pattern if ignore_case else pattern

