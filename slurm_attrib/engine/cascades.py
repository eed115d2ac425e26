"""The lines every rank prints in a cascade, counted in compiled code (Apache Arrow).

When a collective stalls on a job of thousands of ranks, each rank prints the same few lines of
PyTorch's watchdog cascade (`[rank1234]:[E1202 15:18:55.336672068 ProcessGroupNCCL.cpp:632]
[Rank 1234] Watchdog caught collective operation timeout: ...`), and each is one more line of an
event that joins them (event.cascade): the rule, the task, the side of the job's window and the
rule's cascade fields make its key; each rank keeps its count and its first line.  Read one at a
time in Python, such a line costs 40-50 us (candidates, regexes, fields, origin, time, key).
Here the candidate lines of a job output's window are planned by their literals (a plan: the
rules of one set of literals), read by Arrow's RE2 (the engine the scanner runs the same patterns
on) a column at a time, and grouped by their event's key and per rank by its first line; the
events layer (_scan_file) makes or joins the event of each group at its first line, as the lines
would one by one, and takes the ranks' counts and first lines from here.  A planned line that no
rule can hit is dropped (no hit either way); every other line goes back to the scanner.

A line is read here only where both ways are sure to read it alike:
- the window is ASCII, with no NUL, CR or escape, and the line is no longer than the scanner reads;
- the line has the shape `[<task>: ][rank<N>]:<program's line>` (srun's label, PyTorch's rank
  prefix), so a rule reads the line, or the program's line (or it unindented) and nothing else;
- no rule of its plan that is not counted here (countable: a cascade rule with no hook, decode,
  following lines or requires, whose values Arrow reads as the scanner does) matches what the
  scanner would read it on, and no rule of the plan reads following lines or the message only;
- a line a counted rule hits (its regex, and none of its `unless`) starts its program's line with
  a glog stamp (`[E1202 15:18:55.336672068 `) that gives a time: its origin is then the task and
  the rank of its prefixes, with no host nor program, and its time the stamp's (parse_line_time,
  read once per stamp).
The first group of each rule in a window is read again the Python way (a safety net: the tests
hold it idle); when it reads otherwise, every line of the window goes back.  A window with too
few planned lines to pay for Arrow's passes goes back whole, and a plan whose lines mostly go back
(another shape: NCCL's INFO lines, unstamped lines) is planned no more.
Either way the events are the same, field for field (tests/test_cascades.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cache
from typing import Any, Callable

from slurm_attrib.engine.counting import _digits_only, _may_be_empty
from slurm_attrib.ingest.origin import Origin
from slurm_attrib.ingest.timestamps import LineTime, parse_line_time
from slurm_attrib.ruleset.scanner import MAX_LINE_CHARS, CompiledRule, Hit, Scanner
from slurm_attrib.ruleset.spec import Rule, anchored, compiled

CASCADE_KINDS = ("app",)
# Job output bytes of a job from which Arrow is loaded (its import holds some 40 MB): below, the
# cascades are too small for Arrow's passes to spare that (benchmarks/README.md).
COUNT_FROM_BYTES = 32 * 1024 * 1024
MIN_LINES = 2048  # planned lines of a window below which they are read in Python
MAX_DIGITS = 18  # an integer field longer than this is read in Python (Arrow's int64)
# A plan (a set of literals) whose lines went back to Python more often than this share is planned
# no more: its lines have another shape (NCCL's INFO lines, unstamped lines a cascade rule reads).
READ_SHARE = 0.5
MAX_KEYS = 100_000  # raw keys whose event key is kept (a job's cascades have a few per node)
MAX_STAMPS = 8192  # stamps whose reading is kept (most differ in their fraction: a small cache)

# The line's shape: srun's label (` {0,6}N: `, as origin._LABEL), then PyTorch's rank prefix, then
# the program's line.  Where the launchers' prefixes end is plain (origin.launcher_prefix_end, and
# no relaying tool's prefix: scanner._read), so a rule reads the line or the program's line (or it
# unindented) and nothing else.  A line a rule hits must also start its program's line with a glog
# stamp (`[E1202 15:18:55.336672068 `): line_origin then reads the task and rank of the prefixes and
# no host nor program (a `[` with a letter is no NCCL time, no `<`, no syslog or NCCL header), and
# its time is the stamp's.
_PREFIXED = r"^(?: {0,6}(?P<task>\d{1,6}): )?\[(?:rank|RANK)(?P<prefix_rank>\d{1,7})\]:(?P<program>.*)$"
_STAMP = r"^\[(?P<stamp>[IWEFD]\d{4} \d\d:\d\d:\d\d(?:\.\d{1,9})?) "


@dataclass(slots=True)
class RankLines:
    """One rank's lines in a group: how many, and its first line (offset, line number, time, and
    its text when the lines name no task: resolve_nodes places them later)."""
    lines: int
    offset: int
    lineno: int
    stamp: LineTime
    text: str | None


@dataclass(slots=True)
class Group:
    """Counted lines of one window that join one cascade event: the first and the last line, how
    many, and per rank its lines."""
    rule: CompiledRule
    first: int
    last: int
    first_lineno: int
    last_lineno: int
    lines: int
    literal_ids: frozenset[int]  # the first line's (candidate_lines)
    key: tuple  # the event's key (events._cascade_key), as Arrow read it
    ranks: dict[int, RankLines]
    last_stamp: LineTime
    first_line: tuple  # what the first line's reading is made of (read())
    last_literal_ids: frozenset[int] = frozenset()  # the last line's
    rules_at: dict[int, frozenset[str]] | None = None  # the first and the last line: the rules Arrow read hitting it (checked groups)

    @property
    def offset(self) -> int:
        return self.first

    def read(self) -> tuple:
        """The first line's (hit, text, stamp, origin) as Arrow read it (what the scanner, the
        clock and line_origin give: the safety net checks it)."""
        raw_text, meta, values, stamp, prefix_rank = self.first_line
        text = raw_text.decode("ascii")
        event = self.rule.rule.event
        hit = Hit(rule=self.rule.rule, lineno=self.first_lineno, offset=self.first, text=text,
                  fields=_fields(meta, values),
                  domain=event.domain, category=event.category, role=event.role, severity=event.severity,
                  strength=event.strength)
        return hit, text, stamp, Origin(None, prefix_rank, self.key[2], None)


def _fields(meta: list[tuple[str, bool, bool]], values: list[bytes | None]) -> dict[str, Any]:
    """A line's fields as the scanner gives them: the groups that took part (a group that took
    no part is empty text in Arrow, or none when its regex did not match), cast."""
    return {name: int(raw) if is_int else raw.decode("ascii")
            for (name, is_int, empty_is_value), raw in zip(meta, values)
            if raw is not None and (raw or empty_is_value)}


Candidates = list[tuple[int, frozenset[int] | None]]


@dataclass(slots=True)
class _Plan:
    number: int
    counted: list[CompiledRule]  # the set's cascade rules, read here (rule id order)
    rivals: list[CompiledRule]  # the set's other rules: a line they may match is read in Python
    literal_ids: frozenset[int]
    planned: int = 0  # lines planned so far
    read: int = 0  # ... and read here (the others went back to Python)


def countable(rule: Rule) -> bool:
    """Whether the rule's hits may be counted here (see the module docstring)."""
    event, match = rule.event, rule.match
    if event.cascade is None or event.hook or event.decode is not None or event.ends or event.generic:
        return False
    if event.fallback or match.following or match.requires:
        return False
    regex = compiled(match.regex, match.ignore_case)
    if regex.groups != len(regex.groupindex):
        return False  # Arrow reads named groups only
    for pattern in [match.regex, *match.capture]:
        names = compiled(pattern, match.ignore_case).groupindex
        for name in names:
            if name in ("host", "node"):
                return False  # the line's origin names no host: the shape's
            cast = rule.fields.get(name, "str")
            if cast == "int" and not _integer(pattern, name):
                return False
            if cast not in ("str", "int"):
                return False
            if _may_be_empty(pattern, name) and (name in event.cascade or not _mandatory(pattern, name)):
                return False  # Arrow gives a group that took no part as empty text: the two must not be confused
    if "rank" in compiled(match.regex).groupindex:
        return False  # the rank is read from the prefix or a capture
    return True


def _integer(pattern: str, name: str) -> bool:
    """Whether the named group's text always reads as an integer: digits, with an optional `-`
    before them (int() reads it as the scanner's cast does)."""
    if _digits_only(pattern, name):
        return True
    if not _digits_only(pattern.replace(f"(?P<{name}>-?", f"(?P<{name}>", 1), name):
        return False
    return f"(?P<{name}>-?" in pattern


@cache
def _mandatory(pattern: str, name: str) -> bool:
    """Whether the named group takes part in every match (no optional repeat or branch around it)."""
    from re import _constants as sre_constants
    from re import _parser as sre_parser

    tree = sre_parser.parse(pattern)
    number = tree.state.groupdict[name]

    def within(items) -> bool:
        for op, value in items:
            if op is sre_constants.SUBPATTERN:
                if value[0] == number or within(value[-1]):
                    return True
        return False

    return within(tree.data)


class CascadeCounter:
    """Splits a job output's windows into counted cascade lines and lines read in Python."""

    def __init__(self, scanner: Scanner, year: int | None, when: Callable[[LineTime], tuple]):
        self.scanner = scanner
        self.year = year
        self.when = when  # the side of the job's window a time is on (events._when)
        self._plans: dict[frozenset[int], _Plan | None] = {}
        self._plan_list: list[_Plan] = []
        self._countable: dict[str, bool] = {}
        self._stamps: dict[bytes, LineTime] = {}
        self._keys: dict[tuple, tuple] = {}  # a group's raw key: its event's key
        self._arrow = None

    def split(self, data: bytes, kind: str, begin: int, end: int, first_line: int,
              check: Callable[[Group], bool]) -> tuple[list[Group], Candidates]:
        """The counted groups of data[begin:end] and the candidate lines left to the scanner.
        `check` reads a group's first and last lines the Python way (False: not as Arrow read
        them); the first group of each rule is checked, and when one fails every line of the
        window is left to the scanner."""
        candidates = self.scanner.candidate_lines(data, begin, end)
        if kind not in CASCADE_KINDS or len(candidates) < MIN_LINES:
            return [], candidates
        body = data[begin:end]
        if not body.isascii() or b"\x00" in body or b"\r" in body or b"\x1b" in body:
            return [], candidates
        rest: Candidates = []
        offsets: list[int] = []
        linenos: list[int] = []
        plans: list[int] = []
        texts: list[bytes] = []
        lineno, position = first_line, begin
        for start, literal_ids in candidates:
            plan = self._plan(literal_ids) if literal_ids is not None else None
            if plan is None:
                rest.append((start, literal_ids))
                continue
            lineno += data.count(b"\n", position, start)
            position = start
            stop = data.find(b"\n", start, end)
            stop = end if stop < 0 else stop
            offsets.append(start)
            linenos.append(lineno)
            plans.append(plan.number)
            texts.append(data[start:min(stop, start + MAX_LINE_CHARS + 1)])
        if len(offsets) < MIN_LINES:
            return [], candidates
        groups, back, hit_rows = self._run(offsets, linenos, plans, texts)
        checked: set[str] = set()
        row_of = {offset: row for row, offset in enumerate(offsets)}
        for group in groups:  # the first group of each rule, read the Python way: as Arrow read it?
            if group.rule.rule.id not in checked:
                checked.add(group.rule.rule.id)
                group.rules_at = {offset: frozenset(rule for rule, rows in hit_rows.items() if row_of[offset] in rows)
                                  for offset in (group.first, group.last)}
                if not check(group):
                    return [], candidates
        rest += back
        rest.sort(key=_first)
        return groups, rest

    def _plan(self, literal_ids: frozenset[int]) -> _Plan | None:
        if literal_ids not in self._plans:
            rules = self.scanner.rules_on(literal_ids, "app")
            counted = [r for r in rules if self._is_countable(r.rule)]
            plan = None
            if not any(r.rule.match.following or r.in_message for r in rules):
                plan = _Plan(len(self._plan_list), counted, [r for r in rules if r not in counted], literal_ids)
                self._plan_list.append(plan)
            self._plans[literal_ids] = plan
        return self._plans[literal_ids]

    def _is_countable(self, rule: Rule) -> bool:
        if rule.id not in self._countable:
            self._countable[rule.id] = countable(rule)
        return self._countable[rule.id]

    def _run(self, offsets: list[int], linenos: list[int], plans: list[int],
             texts: list[bytes]) -> tuple[list[Group], Candidates, dict[str, set[int]]]:
        """Arrow's reading of the planned lines: their groups, the lines left to Python, and per
        rule the rows it hits (what a group's check compares with the scanner's hits)."""
        if self._arrow is None:
            from slurm_attrib.engine.counting import _arrow

            self._arrow = _arrow()
        pa, pc = self._arrow
        text = pa.array(texts, pa.binary())
        shape = pc.extract_regex(text, _PREFIXED)
        shaped = pc.fill_null(pc.and_(pc.is_valid(shape), pc.less_equal(pc.binary_length(text), MAX_LINE_CHARS)), False)
        plan_of = pa.array(plans, pa.int32())
        read = [False] * len(texts)  # read here: a shaped line no rule left to Python may hit
        hits: list[tuple[CompiledRule, list[int], list]] = []  # (rule, the rows it hits, its fields there)
        stamps: dict[int, bytes] = {}
        for number, planned in Counter(plans).items():
            plan = self._plan_list[number]
            plan.planned += planned
            rows = pc.indices_nonzero(pc.and_(pc.equal(plan_of, number), shaped))
            if len(rows) == 0:
                continue
            refused, found = self._read_plan(plan, pc.take(text, rows), pc.take(shape, rows))
            rows = rows.to_pylist()
            for position, row in enumerate(rows):
                read[row] = not refused[position]
            plan.read += len(rows) - sum(refused)
            for rule, hit_at, fields, stamp in found:
                hits.append((rule, [rows[i] for i in hit_at], fields))
                stamps.update((rows[i], value) for i, value in zip(hit_at, stamp))
        hits = _in_line_order(hits)
        # A stamp that gives no time: the line inherits one, which only Python reads.
        line_stamp: dict[int, LineTime] = {}
        for row, value in stamps.items():
            found_time = self._stamp(value) if read[row] else None
            if found_time is None:
                read[row] = False
            else:
                line_stamp[row] = found_time
        # A line read here that no rule hits is no hit in Python either: dropped.  The others go back.
        back = [(offsets[row], self._plan_list[plans[row]].literal_ids) for row, sure in enumerate(read) if not sure]
        for plan in self._plan_list:
            if plan.planned >= MIN_LINES and plan.read < READ_SHARE * plan.planned:
                self._plans[plan.literal_ids] = None  # its lines mostly went back: planned no more
        groups = self._groups(hits, read, shape, offsets, linenos, plans, texts, line_stamp)
        hit_rows: dict[str, set[int]] = {}
        for rule, rows, _ in hits:
            hit_rows.setdefault(rule.rule.id, set()).update(row for row in rows if read[row])
        return groups, back, hit_rows

    def _read_plan(self, plan: _Plan, text, shape) -> tuple[list[bool], list]:
        """For the shaped lines of one plan: whether each is refused (a rule may hit it that is not
        read here, or a value is not sure), and per counted rule the positions of the lines it hits
        (stamped, not refused), its fields there and their stamps."""
        pa, pc = self._arrow
        program = pc.fill_null(shape.field("program"), b"")
        unindented = pc.replace_substring_regex(program, "^[ \\t]+", b"")
        stamp = pc.extract_regex(program, _STAMP)
        unstamped = pc.invert(pc.fill_null(pc.is_valid(stamp), False))
        refused = pa.array([False] * len(text))
        for rival in plan.rivals:
            refused = pc.or_(refused, self._may_match(rival, text, program, unindented))
        readings = []
        for rule in plan.counted:
            found, fields, unsure = self._read(rule, text, program)
            may = self._may_match(rule, text, program, unindented)
            refused = pc.or_(refused, pc.or_(unsure, pc.and_(may, unstamped)))
            readings.append((rule, pc.and_(found, pc.invert(unstamped)), fields))
        refused_list = refused.to_pylist()
        found_rules = []
        for rule, found, fields in readings:
            hit_at = pc.indices_nonzero(pc.and_(found, pc.invert(refused)))
            if len(hit_at) == 0:
                continue
            columns = [(name, pc.take(column, hit_at).to_pylist(), is_int, empty_is_value)
                       for name, column, is_int, empty_is_value in fields]
            found_rules.append((rule, hit_at.to_pylist(), columns, pc.take(stamp.field("stamp"), hit_at).to_pylist()))
        return refused_list, found_rules

    def _stamp(self, stamp: bytes) -> LineTime | None:
        found = self._stamps.get(stamp)
        if found is None:
            if len(self._stamps) >= MAX_STAMPS:
                self._stamps.clear()
            # parse_line_time reads a line's stamp after the launchers' prefixes (timestamps._PREFIX),
            # where the shape puts it: the stamp alone, closed as the line continues, reads alike.
            found = self._stamps[stamp] = parse_line_time("[" + stamp.decode("ascii") + " -]", self.year)
        return None if found.wall is None and found.mono is None else found

    def _read(self, rule: CompiledRule, text, program):
        """Per line: whether the rule hits it; its fields as the scanner gives them, in its order
        (capture, then the regex: CompiledRule.fields), each (name, column, int or not, whether
        empty text is a value); and whether Arrow's reading is not sure (an integer too long)."""
        pa, pc = self._arrow
        match = rule.rule.match
        case = "(?i)" if match.ignore_case else ""
        # An anchored regex reads the program's line (after the prefixes: scanner._read; a stamped
        # one starts with no blank), another the whole line; so does each `unless`, on what the
        # regex read.
        read = program if match.anchored else text
        values = pc.extract_regex(read, case + match.regex)
        found = pc.fill_null(pc.is_valid(values), False)
        for unless in match.unless:
            on = program if anchored(unless) else read
            found = pc.and_(found, pc.invert(pc.match_substring_regex(on, unless, ignore_case=match.ignore_case)))
        fields = []
        for (_, casts), pattern in zip(rule.capture, match.capture):
            captured = pc.extract_regex(text, case + pattern)
            fields += [(name, captured.field(name), cast is int, _mandatory(pattern, name) and _may_be_empty(pattern, name))
                       for name, _, cast in casts]
        fields += [(name, values.field(name), cast is int, _mandatory(match.regex, name) and _may_be_empty(match.regex, name))
                   for name, _, cast in rule._casts]
        unsure = pa.array([False] * len(text))
        for _, column, is_int, _ in fields:
            if is_int:
                long = pc.greater(pc.binary_length(pc.fill_null(column, b"")), MAX_DIGITS)
                unsure = pc.or_(unsure, pc.and_(found, pc.fill_null(long, False)))
        return found, fields, unsure

    def _may_match(self, rule: CompiledRule, text, program, unindented):
        """Per line: whether the rule's regex matches what the scanner reads it on (an anchored
        regex: the program's line, or it unindented; another: the line)."""
        pc = self._arrow[1]
        match = rule.rule.match
        if not match.anchored:
            return pc.match_substring_regex(text, match.regex, ignore_case=match.ignore_case)
        return pc.or_(pc.match_substring_regex(program, match.regex, ignore_case=match.ignore_case),
                      pc.match_substring_regex(unindented, match.regex, ignore_case=match.ignore_case))

    def _groups(self, hits, read, shape, offsets, linenos, plans, texts, line_stamp) -> list[Group]:
        """The hits grouped by their event's key, per rank its lines and first line.  Lines are
        grouped by the raw texts of the key's values (the same texts give the same values); a
        group's key is read once."""
        tasks = shape.field("task").to_pylist()
        prefix_ranks = shape.field("prefix_rank").to_pylist()
        sides: dict[int, tuple] = {}
        groups: dict[tuple, Group] = {}
        for rule, hit_rows, columns in hits:
            rule_id, cascade = rule.rule.id, rule.rule.event.cascade
            by_name = {name: column for name, column, _, _ in columns}
            ranks = by_name.get("rank") or [None] * len(hit_rows)
            for i, (row, *raw) in enumerate(zip(hit_rows, *(by_name[name] for name in cascade))):
                if not read[row]:
                    continue
                stamp = line_stamp[row]
                side = sides.get(id(stamp))
                if side is None:
                    side = sides[id(stamp)] = self.when(stamp)
                raw_key = (rule_id, tasks[row], side, *raw)
                group = groups.get(raw_key)
                if group is None:
                    group = groups[raw_key] = self._group(rule, row, i, columns, raw_key, tasks, prefix_ranks,
                                                          offsets, linenos, plans, texts, stamp)
                else:
                    group.last, group.last_lineno, group.last_stamp = offsets[row], linenos[row], stamp
                    group.last_literal_ids = self._plan_list[plans[row]].literal_ids
                group.lines += 1
                rank = int(ranks[i] or prefix_ranks[row])
                share = group.ranks.get(rank)
                if share is None:
                    group.ranks[rank] = RankLines(1, offsets[row], linenos[row], stamp,
                                                  None if tasks[row] else texts[row].decode("ascii"))
                else:
                    share.lines += 1
        return sorted(groups.values(), key=lambda g: (g.first, g.rule.rule.id))

    def _group(self, rule, row, i, columns, raw_key, tasks, prefix_ranks, offsets, linenos, plans, texts,
               stamp) -> Group:
        """A new group at its first line (its key read once per raw key)."""
        values = [column[i] for _, column, _, _ in columns]
        meta = [(name, is_int, empty_is_value) for name, _, is_int, empty_is_value in columns]
        key = self._keys.get(raw_key)
        if key is None:
            fields = _fields(meta, values)
            task = int(tasks[row]) if tasks[row] else None
            key = (rule.rule.id, None, task, None, raw_key[2], *(fields.get(name) for name in rule.rule.event.cascade))
            if len(self._keys) >= MAX_KEYS:
                self._keys.clear()
            self._keys[raw_key] = key
        literal_ids = self._plan_list[plans[row]].literal_ids
        return Group(rule, offsets[row], offsets[row], linenos[row], linenos[row], 0, literal_ids, key, {}, stamp,
                     (texts[row], meta, values, stamp, int(prefix_ranks[row])), literal_ids)


def _in_line_order(hits: list[tuple]) -> list[tuple]:
    """Per rule, its hits of every plan as one list in line order (a group's first line, last line
    and each rank's first line are the earliest and latest in the file)."""
    by_rule: dict[str, list[tuple]] = {}
    for entry in hits:
        by_rule.setdefault(entry[0].rule.id, []).append(entry)
    ordered = []
    for entries in by_rule.values():
        rule, rows = entries[0][0], [row for _, rows, _ in entries for row in rows]
        order = sorted(range(len(rows)), key=rows.__getitem__)
        columns = []
        for index, (name, _, is_int, empty_is_value) in enumerate(entries[0][2]):
            values = [value for _, _, fields in entries for value in fields[index][1]]
            columns.append((name, [values[i] for i in order], is_int, empty_is_value))
        ordered.append((rule, [rows[i] for i in order], columns))
    return ordered


def _first(candidate: tuple) -> int:
    return candidate[0]
