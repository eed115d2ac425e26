"""Scan raw log bytes with the rule pack.

The rules' literal `contains` strings are searched over the whole buffer at once, by the best
engine at hand: Hyperscan (a default dependency where it has wheels: x86_64, aarch64), else
ahocorasick-rs (the default dependency elsewhere), else GNU grep -F (all multi-literal automata),
else one alternation in Python's `re` (slow with a hundred literals).  All find the same lines.  Only the
lines that hold a literal are decoded and checked with the rules' regexes, so throughput is that of
the literal search.  `SATTRIB_SCAN_ENGINE` (hyperscan, ahocorasick, grep, re) picks one by name.

The rules' regexes run on RE2 (linear in the line, whatever the line holds: job output is the
user's), on the line's UTF-8 bytes: RE2 matches bytes, and a str would be encoded again by every
rule that reads the line.

Lines of one shape (ruleset/shapes.py: the line with its ASCII digits read as 0) are read alike by a
rule that cannot tell digits apart (shapes.digit_blind: 909 of 1,216 rules): where such a rule reads
the first line of a shape (its prefix skipped, the spans of its regexes) is kept for the others,
and only their values are cast per line.

Case-insensitive literals (`match.ignore_case`, ASCII case folding as in every engine): Hyperscan,
grep -i and `re` fold case themselves; for Aho-Corasick each such literal is searched by every case
variant of its head (at most 6 letters), and each hit is then checked against the whole literal.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import re2

from slurm_attrib.ingest.origin import launcher_prefix_end, message_start, relay_prefix, relay_prefix_end
from slurm_attrib.ruleset import cache
from slurm_attrib.ruleset.hooks import HOOKS, decode_fields
from slurm_attrib.ruleset.spec import Rule, anchored as _anchored, compiled
from slurm_attrib.ruleset.shapes import MISSING, ShapeMemo, shape_of

try:  # optional accelerator, same results
    import hyperscan
except ImportError:  # pragma: no cover - exercised when hyperscan is absent
    hyperscan = None

try:  # default dependency; the scanner still works without it
    import ahocorasick_rs
except ImportError:  # pragma: no cover - exercised when the wheel is missing
    ahocorasick_rs = None

_UNANCHORED = getattr(getattr(re2, "_Anchor", None), "UNANCHORED", None)
MAX_LINE_CHARS = 8192  # longer lines are cut for matching and evidence (a 50 MB line stays cheap)


@dataclass(slots=True)
class Hit:
    """One rule matched at one line of one file."""

    rule: Rule
    lineno: int
    offset: int  # byte offset of the line's start in the scanned data
    text: str
    fields: dict[str, Any]
    domain: str
    category: str | None
    role: str
    severity: str
    strength: int
    notes: dict[str, Any] = field(default_factory=dict)
    lines: int = 1  # the lines the match read: more than one for a rule that reads following lines


ENGINES = ("hyperscan", "ahocorasick", "grep", "re")
ENGINE_VARIABLE = "SATTRIB_SCAN_ENGINE"
CASELESS_HEAD_LETTERS = 6  # Aho-Corasick: case variants of at most this many letters per literal
MAX_LITERAL_SETS = 4096  # distinct (literals on a line, kind) whose rules are kept at hand
MAX_SHAPE_BYTES = 2048  # longer lines are read rule by rule (they seldom repeat, and keys stay small)
_READ_PER_LINE = object()  # a rule that is not digit-blind: read on every line


def available_engines() -> list[str]:
    """The engines usable here, fastest first."""
    found = []
    if hyperscan is not None:
        found.append("hyperscan")
    if ahocorasick_rs is not None:
        found.append("ahocorasick")
    if shutil.which("grep"):
        found.append("grep")
    return [*found, "re"]


def best_engine() -> str:
    """The fastest engine, or the one SATTRIB_SCAN_ENGINE names when it is available."""
    engines = available_engines()
    wanted = os.environ.get(ENGINE_VARIABLE, "").strip().lower()
    if wanted in engines:
        return wanted
    return engines[0]


# A rule that reads a file's ends (spec.EventSpec.ends) is searched in the first and the last
# ENDS_REACH bytes of the region scanned, and tries at most ENDS_TRIES matching lines there.
ENDS_REACH = 4 * 1024 * 1024
ENDS_TRIES = 256
ENDS_FIRST_TAIL = 64 * 1024  # the last line is looked for in a tail this long, then 4 times longer ...


class Scanner:
    def __init__(self, rules: list[Rule], engine: str = "auto"):
        self.rules = rules
        self._compiled: dict[str, CompiledRule] = {}  # compiled when first needed
        per_line = [r for r in rules if not r.event.ends]
        # Rules read at a file's ends only: their literals never make a line a candidate.
        self._ends = [(CompiledRule(r), compiled("(?m)" + r.match.regex, r.match.ignore_case))
                      for r in sorted((r for r in rules if r.event.ends), key=lambda r: r.id)]
        literals = sorted({lit for r in per_line for lit in r.match.contains})
        self._literals = literals
        self._rules_by_literal: dict[str, list[Rule]] = {lit: [] for lit in literals}
        for rule in per_line:
            for literal in rule.match.contains:
                self._rules_by_literal[literal].append(rule)
        self._rules_by_ids: dict[tuple[frozenset[int], str], RulesOnALine] = {}
        self._shapes = ShapeMemo()  # by (shape, literals, kind): per rule, what _located keeps
        self._caseless = {lit for r in per_line if r.match.ignore_case for lit in r.match.contains}
        self.engine = best_engine() if engine == "auto" else engine
        if self.engine not in available_engines():
            raise ValueError(f"scan engine {engine!r} is not available")
        self._hs_db = _hyperscan_db(literals, self._caseless) if self.engine == "hyperscan" else None
        self._ac = _aho_corasick(literals, self._caseless) if self.engine == "ahocorasick" and literals else None
        self._grep = shutil.which("grep") if self.engine == "grep" else None
        self._literal_re_cache: re.Pattern | None = None

    @property
    def _literal_re(self) -> re.Pattern | None:
        """One alternation of every literal (the `re` engine, and grep's fallback)."""
        if self._literal_re_cache is None and self._literals:
            alternation = b"|".join(
                (b"(?i:" + re.escape(lit.encode()) + b")") if lit in self._caseless else re.escape(lit.encode())
                for lit in self._literals
            )
            self._literal_re_cache = re.compile(alternation)
        return self._literal_re_cache


    def candidate_lines(
        self, data: bytes, begin: int = 0, end: int | None = None
    ) -> list[tuple[int, frozenset[int] | None]]:
        """Lines holding at least one literal: (start offset, ids of the literals found there).

        Only data[begin:end] is searched (begin at a line start, end at a line end or the end of
        data); offsets are into `data`.  Hyperscan and Aho-Corasick report every literal they
        find, so the ids come for free; grep and `re` find the lines only (ids None) and the
        literals are looked up per line afterwards.
        """
        if not self._literals:
            return []
        end = len(data) if end is None else end
        if begin >= end:
            return []
        view = memoryview(data)[begin:end] if (begin or end != len(data)) else data
        with_ids = self._hs_db is not None or self._ac is not None
        if self._hs_db is not None:
            found: list[tuple[int, int]] = []

            def on_match(literal_id: int, _start: int, match_end: int, _flags: int, _ctx: Any) -> None:
                found.append((match_end + begin, literal_id))

            self._hs_db.scan(view, match_event_handler=on_match)  # any buffer: no copy
            found.sort()
        elif self._ac is not None:
            found = self._aho_corasick_matches(data, view, begin)
        else:
            ends = self._grep_match_ends(view if isinstance(view, bytes) else bytes(view)) if self._grep else None
            if ends is None:
                ends = [m.end() - begin for m in self._literal_re.finditer(data, begin, end)]
            found = [(e + begin, -1) for e in ends]
        lines: list[tuple[int, frozenset[int] | None]] = []
        line_end, start, ids = -1, 0, set()
        for match_end, literal_id in found:
            if match_end > line_end:
                if line_end >= 0:
                    lines.append((start, frozenset(ids) if with_ids else None))
                start = data.rfind(b"\n", begin, max(match_end - 1, 0)) + 1 or begin
                next_newline = data.find(b"\n", match_end, end)
                line_end = end if next_newline < 0 else next_newline
                ids = set()
            ids.add(literal_id)
        if line_end >= 0:
            lines.append((start, frozenset(ids) if with_ids else None))
        return lines

    def _aho_corasick_matches(self, data: bytes, view, begin: int) -> list[tuple[int, int]]:
        """(end offset in data, literal id) of every literal Aho-Corasick finds, in order."""
        automaton, owners = self._ac
        found = []
        for pattern, start, stop in automaton.find_matches_as_indexes(view, overlapping=True):
            literal_id, full = owners[pattern]
            if full is not None:  # a caseless literal's head: check the whole literal
                stop = start + len(full)
                if data[begin + start : begin + stop].lower() != full:
                    continue
            found.append((stop + begin, literal_id))
        found.sort()
        return found

    def _grep_match_ends(self, data: bytes) -> list[int] | None:
        """End offsets of the literals GNU grep -F finds (None when grep fails: use `re`)."""
        ends: list[int] = []
        sensitive = [lit for lit in self._literals if lit not in self._caseless]
        for literals, flags in ((sensitive, []), (sorted(self._caseless), ["-i"])):
            if not literals:
                continue
            patterns = [arg for lit in literals for arg in ("-e", lit)]
            try:
                done = subprocess.run(
                    [self._grep, "-F", "-a", "-b", "-o", *flags, *patterns],
                    input=data,
                    capture_output=True,
                    env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
                    check=False,
                )
            except OSError:
                return None
            if done.returncode > 1:
                return None
            for line in done.stdout.splitlines():
                offset, _, text = line.partition(b":")
                ends.append(int(offset) + len(text))
        ends.sort()
        return ends

    def scan(self, data: bytes, kind: str, begin: int = 0, end: int | None = None, first_line: int = 1,
             ends: str = "both", candidates: list[tuple[int, frozenset[int] | None]] | None = None) -> list[Hit]:
        """Hits of the lines that start in data[begin:end], in line order; `first_line` is the
        number of the line at `begin`.  Lines after `end` in data serve only as the `following`
        lines of rules.  `ends` says which ends of the file this region holds, for the rules that
        read a file's ends: "first", "last", "both" (the whole file) or "none".  `candidates`:
        the candidate lines to read (candidate_lines, or some of them), when the caller has them."""
        hits: list[Hit] = []
        lineno, position = first_line, begin
        if candidates is None:
            candidates = self.candidate_lines(data, begin, end)
        for start, literal_ids in candidates:
            lineno += data.count(b"\n", position, start)
            position = start
            hits.extend(self.match_at(data, start, lineno, kind, literal_ids))
        if self._ends and ends != "none":
            for hit in self._end_hits(data, kind, begin, len(data) if end is None else end, first_line, ends):
                bisect.insort(hits, hit, key=lambda h: h.offset)
        return _no_leads_inside_readings(hits)

    def _end_hits(self, data: bytes, kind: str, begin: int, end: int, first_line: int, ends: str) -> list[Hit]:
        """Per rule that reads a file's ends, its first hit in the region (ends "first" or "both")
        and its last (ends "last" or "both"), once when they are one line."""
        found: list[Hit] = []
        for rule, finder in self._ends:
            if kind not in rule.rule.sources:
                continue
            first_end, last_begin = min(end, begin + ENDS_REACH), max(begin, end - ENDS_REACH)
            first = last = None
            if ends in ("first", "both") and _holds_a_literal(data, begin, first_end, rule.rule):
                first = self._first_hit(rule, finder, data, begin, first_end, first_line)
            if ends == "both" and first_end == end:  # one search read the whole region: the last is after the first
                last_begin = end if first is None else max(last_begin, first.offset)
            if ends in ("last", "both") and last_begin < end and _holds_a_literal(data, last_begin, end, rule.rule):
                last = self._last_hit(rule, finder, data, last_begin, end, begin, first_line)
            found += [h for h in (first, last) if h is not None]
            if first is not None and last is not None and first.offset == last.offset:
                found.pop()
        return found

    def _first_hit(self, rule: CompiledRule, finder, data: bytes, begin: int, end: int, first_line: int) -> Hit | None:
        position = begin
        for _ in range(ENDS_TRIES):
            found = finder.search(data, position, end)
            if found is None:
                return None
            start = max(data.rfind(b"\n", begin, found.start()) + 1, begin)
            hit = self._hit_at(rule, data, start, begin, first_line)
            if hit is not None:
                return hit
            position = data.find(b"\n", found.start(), end) + 1
            if position <= 0:
                return None
        return None

    def _last_hit(self, rule: CompiledRule, finder, data: bytes, low: int, end: int, begin: int,
                  first_line: int) -> Hit | None:
        """The last line of data[low:end] the rule matches: looked for in a short tail first (a
        file of progress lines holds thousands), then in tails 4 times longer; a line a shorter
        tail tried is not tried again."""
        tail, tries, tried_from = ENDS_FIRST_TAIL, 0, end
        while True:
            reached_low = end - tail <= low
            start_at = max(low, end - tail)
            if start_at > begin:  # from the next whole line
                start_at = data.find(b"\n", start_at - 1, end) + 1 or end
            starts = [found.start() for found in finder.finditer(data, start_at, end) if found.start() < tried_from]
            for position in reversed(starts):
                start = max(data.rfind(b"\n", begin, position) + 1, begin)
                hit = self._hit_at(rule, data, start, begin, first_line)
                tries += 1
                if hit is not None:
                    return hit
                if tries >= ENDS_TRIES:
                    return None
            if reached_low:
                return None
            tried_from, tail = start_at, tail * 4

    def _hit_at(self, rule: CompiledRule, data: bytes, start: int, begin: int, first_line: int) -> Hit | None:
        line, line_bytes = _line_at(data, start)
        return self._match_rule(rule, line, line_bytes, first_line + data.count(b"\n", begin, start), start)

    def match_at(
        self, data: bytes, start: int, lineno: int, kind: str, literal_ids: frozenset[int] | None = None
    ) -> list[Hit]:
        line, line_bytes = _line_at(data, start)
        located = None
        if literal_ids is None:
            rules = [self._compiled_rule(r) for r in self._rules_for(line) if kind in r.sources]
        else:
            rules = self.rules_on(literal_ids, kind)
            if rules.keep_shapes:
                located = self._located(rules, line_bytes, literal_ids, kind)
        hits = []
        for index, compiled in enumerate(rules):
            location = _READ_PER_LINE if located is None else located[index]
            if location is _READ_PER_LINE:
                following = compiled.rule.match.following
                text = "\n".join([line, *_following_lines(data, start, following)]) if following else line
                hit = self._match_rule(compiled, text, line_bytes, lineno, start)
            elif location is None:
                continue
            else:
                found = compiled.fields_at(location, line_bytes)
                hit = None if found is None else self._hit(compiled, found, line, lineno, start)
            if hit is not None:
                hits.append(hit)
        return _one_reading_of_a_line(hits)

    def _located(self, rules: list[CompiledRule], line: bytes, literal_ids: frozenset[int], kind: str) -> list | None:
        """Per rule, what every line of the line's shape keeps (_shape_reading); None: every rule
        reads the line itself (a long line; the memo resting)."""
        if len(line) > MAX_SHAPE_BYTES or self._shapes.resting():
            return None
        key = (shape_of(line), literal_ids, kind)
        located = self._shapes.get(key)
        if located is MISSING:
            located = self._shapes.keep(key, [_shape_reading(c, line) for c in rules])
        return located

    def rules_on(self, literal_ids: frozenset[int], kind: str) -> RulesOnALine:
        """The rules a candidate line with these literals is read with: those that read this kind
        of source, in rule id order."""
        rules = self._rules_by_ids.get((literal_ids, kind))
        if rules is None:
            if len(self._rules_by_ids) >= MAX_LITERAL_SETS:
                self._rules_by_ids.clear()  # hostile input may hold any set of literals on a line
            chosen = {r.id: r for i in literal_ids for r in self._rules_by_literal[self._literals[i]]}
            rules = RulesOnALine(self._compiled_rule(chosen[k]) for k in sorted(chosen) if kind in chosen[k].sources)
            rules.keep_shapes = any(c.rule.match.regex_blind and not c.rule.match.following for c in rules)
            self._rules_by_ids[(literal_ids, kind)] = rules
        return rules

    def _compiled_rule(self, rule: Rule) -> CompiledRule:
        compiled = self._compiled.get(rule.id)
        if compiled is None:
            compiled = self._compiled[rule.id] = CompiledRule(rule)
        return compiled

    def match_text(self, text: str, kind: str) -> list[Hit]:
        """Scan a small text (rule examples); same path as files."""
        return self.scan(text.encode("utf-8"), kind)

    def _rules_for(self, line: str) -> list[Rule]:
        lowered = None
        chosen: dict[str, Rule] = {}
        for literal, rules in self._rules_by_literal.items():
            if literal in self._caseless:
                lowered = lowered if lowered is not None else line.lower()
                present = literal.lower() in lowered
            else:
                present = literal in line
            if present:
                for rule in rules:
                    chosen[rule.id] = rule
        return [chosen[k] for k in sorted(chosen)]

    def _match_rule(self, compiled: CompiledRule, text: str, line: bytes, lineno: int, offset: int) -> Hit | None:
        """The rule's hit on `text` (the line, and its following lines when the rule reads them);
        `line` is the line's UTF-8, for `requires` and `capture`."""
        read = _with_following_program_lines(text) if compiled.rule.match.following else line
        found = compiled.fields(read, line)
        return None if found is None else self._hit(compiled, found, text, lineno, offset)

    def _hit(self, compiled: CompiledRule, found: tuple[dict[str, Any], int], text: str, lineno: int,
             offset: int) -> Hit | None:
        """The hit of a rule whose fields were read (found: CompiledRule.fields), as its decode
        table and hook refine it."""
        fields, lines = found
        rule = compiled.rule
        event = rule.event
        hit = Hit(
            rule=rule,
            lineno=lineno,
            offset=offset,
            text=text,
            fields=fields,
            domain=event.domain,
            category=event.category,
            role=event.role,
            severity=event.severity,
            strength=event.strength,
            lines=lines,
        )
        if event.decode is not None:
            hit = decode_fields(hit, event.decode)
        if event.hook:
            hit = HOOKS[event.hook](hit)
        return hit


def _shape_reading(compiled: CompiledRule, line: bytes) -> Location | None | object:
    """What every line of the line's shape keeps of the rule: where a digit-blind rule
    (Match.blind) reads it (None: it does not match; the prefixes read() skips are found by
    digit-blind patterns too: tests/test_scanner_shapes.py); for the others None when their
    digit-blind regex does not match it (a second look's words on a line of another meaning), else
    _READ_PER_LINE."""
    match = compiled.rule.match
    if match.blind:
        return compiled.locate(line)
    if match.regex_blind and not match.following and compiled.read(line)[0] is None:
        return None
    return _READ_PER_LINE


def _one_reading_of_a_line(hits: list[Hit]) -> list[Hit]:
    """What a line means when several rules read it, decided here, line by line (a collapsed or
    cascade event keeps only its first line's number): a generic reading (event.generic: a bare
    exception line) stands only on a line no other rule proper reads; a second look's lead (a
    fallback rule's cause) stands only on a line no rule proper gave a meaning (a marker's only
    feeds the maps), and a line several fallback rules read is one lead, the strongest (a
    component's vocabulary before a bare error word; the first in rule order among equals)."""
    if len(hits) < 2:
        return hits
    if any(h.rule.event.generic for h in hits) and any(
            not (h.rule.event.generic or h.rule.event.fallback) and h.role != "marker" for h in hits):
        hits = [h for h in hits if not h.rule.event.generic]
    leads = [h for h in hits if h.rule.event.fallback and h.role == "cause"]
    if not leads or len(hits) < 2:
        return hits
    if any(not h.rule.event.fallback and h.role != "marker" for h in hits):
        kept = None
    else:
        kept = max(leads, key=lambda h: h.strength)  # the first of the strongest
    dropped = {id(h) for h in leads if h is not kept}
    return [h for h in hits if id(h) not in dropped]


def _no_leads_inside_readings(hits: list[Hit]) -> list[Hit]:
    """Nor does a second look's lead stand on a line a rule proper read as one of the following
    lines of its match (`Corrected error` in the record under mcelog's disclaimer)."""
    read = [(h.lineno, h.lineno + h.lines) for h in hits
            if h.lines > 1 and not h.rule.event.fallback and h.role != "marker"]
    if not read:
        return hits
    return [h for h in hits if not (h.rule.event.fallback and h.role == "cause"
                                    and any(first < h.lineno < end for first, end in read))]


def _holds_a_literal(data: bytes, begin: int, end: int, rule: Rule) -> bool:
    """Whether data[begin:end] holds one of the rule's literals: a line a rule matches holds one (the
    contract of `match.contains`), and a search for a literal costs far less than the regex's."""
    if rule.match.ignore_case:
        return True  # the regex decides (no rule read at the ends folds case today)
    return any(data.find(literal.encode(), begin, end) >= 0 for literal in rule.match.contains)


class Regex:
    """An RE2 pattern whose search gives its named groups as text (None: the group took no part)."""

    __slots__ = ("_regex", "_groups", "_spans")

    def __init__(self, pattern: str, ignore_case: bool = False):
        self._regex = compiled(pattern, ignore_case)
        self._groups = tuple(self._regex.groupindex.items())  # the wrapper rebuilds it on every call
        # The wrapper's search is a Python generator around RE2's Match, a third of each search's
        # cost on lines that match: on bytes, RE2's Match gives the same spans directly.
        native = getattr(self._regex, "_regexp", None)
        self._spans = native.Match if native is not None and _UNANCHORED is not None else None

    def spans(self, data: bytes) -> list[tuple[int, int]] | None:
        """(begin, end) of the match and of each group by number ((-1, -1): no part), or None."""
        if self._spans is None:  # a google-re2 without the handle: through its wrapper
            found = self._regex.search(data)
            return None if found is None else [found.span(index) for index in range(self._regex.groups + 1)]
        spans = self._spans(_UNANCHORED, data, 0, len(data))
        return spans if spans[0][0] >= 0 else None

    def named(self, data: bytes, spans: list[tuple[int, int]]) -> dict[str, str | None]:
        """The named groups' text of a match's spans."""
        return {name: data[spans[index][0]:spans[index][1]].decode() if spans[index][0] >= 0 else None
                for name, index in self._groups}

    def search(self, data: bytes) -> dict[str, str | None] | None:
        spans = self.spans(data)
        return None if spans is None else self.named(data, spans)

    def _search_with_wrapper(self, data: bytes) -> dict[str, str | None] | None:
        """search() through google-re2's own wrapper: what the direct path must equal (tests)."""
        found = self._regex.search(data)
        if found is None:
            return None
        return self.named(data, [found.span(index) for index in range(self._regex.groups + 1)])


class RulesOnALine(list):
    """The rules a candidate line is read with (Scanner.rules_on), and whether what some of them
    find on a line is kept for its shape (keep_shapes: else the line's shape is not looked up)."""
    __slots__ = ("keep_shapes",)


# Where a rule reads a line (CompiledRule.locate): the bytes it skips (the launchers' prefixes, a
# header), the spans of its regex on the rest, and those of its `requires` and `capture` regexes.
Location = tuple[int, list[tuple[int, int]], list[list[tuple[int, int]]], list[list[tuple[int, int]] | None]]


class CompiledRule:
    """A rule's regexes, compiled once: `regex` on the text, the others on the matched line."""

    __slots__ = ("rule", "regex", "unless", "requires", "capture", "anchored", "in_message", "_casts")

    def __init__(self, rule: Rule):
        ignore_case = rule.match.ignore_case
        self.rule = rule
        self.regex = Regex(rule.match.regex, ignore_case)
        self.unless = [(Regex(u, ignore_case), _anchored(u)) for u in rule.match.unless]
        # `requires` and `capture` with, as for `regex`, their casts: per named group (name,
        # number, cast), so that fields are read from the spans, with no dict per search.
        self.requires = [(regex, _casts_of(regex, rule)) for regex in (Regex(r, ignore_case) for r in rule.match.requires)]
        self.capture = [(regex, _casts_of(regex, rule)) for regex in (Regex(c, ignore_case) for c in rule.match.capture)]
        self.anchored = rule.match.anchored
        self.in_message = rule.event.fallback  # generic words: read in the message, never in its header
        self._casts = _casts_of(self.regex, rule)

    def fields(self, text: bytes, line: bytes) -> tuple[dict[str, Any], int] | None:
        """The hit's fields, cast as the rule says: the named groups of `requires` and `capture`
        (read on the line, as the lookaheads they stand for were) and of `regex` (on the text; no
        name is in two of them: schema); and how many lines of the text its match read.  None when
        the text does not match or a value does not cast.
        A regex anchored at the line's start reads the program's line: after the launchers'
        prefixes (`0: `, `[rank3]: `, Ray's `(pid=N) `), and after its blanks (an indent) when it does
        not match before them; and so does each anchored `unless`.  A second look's rule reads the
        message only, after the header that names its host (message_start).
        locate() then fields_at() read a line alike in two steps, for the lines of a shape: this
        one step is the path of every other line (tests/test_scanner_shapes.py holds them equal)."""
        spans, read = self.read(text)
        if spans is None or (self.unless and self._excluded(read)):
            return None
        fields: dict[str, Any] = {}
        for regex, casts in self.requires:
            required = regex.spans(line)
            if required is None or not _cast_into(fields, casts, line, required):
                return None
        for regex, casts in self.capture:
            captured = regex.spans(line)
            if captured is not None and not _cast_into(fields, casts, line, captured):
                return None
        if not _cast_into(fields, self._casts, read, spans):
            return None
        return fields, read.count(b"\n", 0, spans[0][1]) + 1

    def locate(self, line: bytes) -> Location | None:
        """Where the rule reads a line (a rule without following lines; None: it does not match)."""
        spans, read = self.read(line)
        if spans is None or (self.unless and self._excluded(read)):
            return None
        required = [regex.spans(line) for regex, _ in self.requires]
        if None in required:
            return None
        return len(line) - len(read), spans, required, [regex.spans(line) for regex, _ in self.capture]

    def fields_at(self, location: Location, line: bytes) -> tuple[dict[str, Any], int] | None:
        """fields() of a line the rule reads where `location` says."""
        skipped, spans, required, captured = location
        fields: dict[str, Any] = {}
        for (_, casts), found in zip(self.requires, required):
            if not _cast_into(fields, casts, line, found):
                return None
        for (_, casts), found in zip(self.capture, captured):
            if found is not None and not _cast_into(fields, casts, line, found):
                return None
        if not _cast_into(fields, self._casts, line[skipped:] if skipped else line, spans):
            return None
        return fields, 1

    def read(self, text: bytes) -> tuple[list[tuple[int, int]] | None, bytes]:
        """The regex's match on the text (None: none), and the text it was read on (_read)."""
        if self.in_message:
            text = text[message_start(text):]
        return _read(self.regex, self.anchored, text)

    def _excluded(self, text: bytes) -> bool:
        return any(_read(unless, anchored, text)[0] is not None for unless, anchored in self.unless)


def _read(regex: Regex, anchored: bool, text: bytes) -> tuple[list[tuple[int, int]] | None, bytes]:
    """The regex's match (None: none) and the text it was read on: the whole text, or for an
    anchored regex the program's line, after the launchers' prefixes (never read: they are not the
    program's), then after its blanks if need be, then after a relaying tool's prefix if need be."""
    if not anchored:
        return regex.spans(text), text
    spans, line = _read_program_line(regex, text[launcher_prefix_end(text):])
    if spans is None:
        relayed = relay_prefix_end(text)
        if relayed:
            spans, line = _read_program_line(regex, text[relayed:])
    return spans, line


def _read_program_line(regex: Regex, line: bytes) -> tuple[list[tuple[int, int]] | None, bytes]:
    spans = regex.spans(line)
    if spans is None:
        unindented = line.lstrip(b" \t")
        if len(unindented) < len(line):
            line, spans = unindented, regex.spans(unindented)
    return spans, line


def _casts_of(regex: Regex, rule: Rule) -> list[tuple[str, int, Any]]:
    return [(name, index, CASTS[rule.fields.get(name, "str")]) for name, index in regex._groups]


def _cast_into(fields: dict[str, Any], casts: list[tuple[str, int, Any]], data: bytes,
               spans: list[tuple[int, int]]) -> bool:
    """Put the groups that took part into fields, cast; False when a value does not cast."""
    for name, index, cast in casts:
        begin, end = spans[index]
        if begin >= 0:
            try:
                fields[name] = cast(data[begin:end].decode())
            except ValueError:
                return False
    return True


def _hyperscan_db(literals: list[str], caseless: set[str]):
    """The compiled literal database: from the per-user cache when these literals were compiled
    before (compiling is about 30 ms of each run's start-up, loading a tenth of a millisecond)."""
    if not literals:
        return None
    key = hashlib.sha256("\n".join(f"{lit in caseless:d}{lit}" for lit in literals).encode()).hexdigest()[:32]
    blob = cache.read("hyperscan", key)
    if isinstance(blob, bytes):
        try:
            database = hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK)
            database.scratch = hyperscan.Scratch(database)
            return database
        except hyperscan.error:  # built by another Hyperscan or for another CPU (a shared home): compile
            pass
    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    expressions = [re.escape(lit).encode() for lit in literals]
    flags = [hyperscan.HS_FLAG_CASELESS if lit in caseless else 0 for lit in literals]
    database.compile(expressions=expressions, ids=list(range(len(literals))), elements=len(literals), flags=flags)
    cache.write("hyperscan", key, hyperscan.dumpb(database))
    return database


def _aho_corasick(literals: list[str], caseless: set[str]):
    """The automaton and, per pattern, (literal id, the lowered literal to check or None)."""
    patterns: list[bytes] = []
    owners: list[tuple[int, bytes | None]] = []
    for literal_id, literal in enumerate(literals):
        raw = literal.encode()
        if literal not in caseless:
            patterns.append(raw)
            owners.append((literal_id, None))
            continue
        for variant in _case_variants(raw):
            patterns.append(variant)
            owners.append((literal_id, raw.lower()))
    automaton = ahocorasick_rs.BytesAhoCorasick(
        patterns, matchkind=ahocorasick_rs.MATCHKIND_STANDARD, implementation=ahocorasick_rs.Implementation.DFA
    )
    return automaton, owners


def _case_variants(raw: bytes) -> list[bytes]:
    """Every ASCII case variant of raw's head holding at most CASELESS_HEAD_LETTERS letters."""
    head, letters = bytearray(), 0
    for byte in raw:
        if 97 <= (byte | 32) <= 122:  # an ASCII letter
            if letters == CASELESS_HEAD_LETTERS:
                break
            letters += 1
        head.append(byte)
    variants = [b""]
    for byte in head:
        if 97 <= (byte | 32) <= 122:
            lower, upper = bytes([byte | 32]), bytes([byte & ~32])
            variants = [v + c for v in variants for c in (lower, upper)]
        else:
            variants = [v + bytes([byte]) for v in variants]
    return variants


def _decode(data: bytes, start: int) -> str:
    return _text_of(_raw_line(data, start))


def _line_at(data: bytes, start: int) -> tuple[str, bytes]:
    """The line at `start` as _decode gives it, and its UTF-8: a plain ASCII line's own bytes,
    without a round trip through str."""
    raw = _raw_line(data, start)
    if (raw.isascii() and len(raw) <= MAX_LINE_CHARS and b"\x00" not in raw and not raw.endswith(b"\r")
            and b"\x1b" not in raw):
        return raw.decode("ascii"), bytes(raw)
    text = _text_of(raw)
    return text, text.encode()


LINE_BYTES = MAX_LINE_CHARS * 4  # a line's bytes read at most (its text is cut at MAX_LINE_CHARS)


def _raw_line(data: bytes, start: int) -> bytes:
    end = data.find(b"\n", start)
    if end < 0:
        end = len(data)
    return data[start : min(end, start + LINE_BYTES)]


def line_text(data: bytes) -> str:
    """The text of the line data begins with, as a hit's text (Hit.text) of that line reads."""
    return _line_at(data, 0)[0]


# Terminal colour and cursor codes (ECMA-48 control sequences and two-byte escapes), which tools
# print into files too (FORCE_COLOR, rich, loguru, Ray's prefixes): no part of what a line says.
_TERMINAL_CODES = re2.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")


def _text_of(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").replace("\x00", "").rstrip("\r")
    if "\x1b" in text:
        text = _TERMINAL_CODES.sub("", text)
    return text[:MAX_LINE_CHARS]


def _with_following_program_lines(text: str) -> bytes:
    """A line and its following lines, these read as the program's lines: without the launchers'
    prefixes (an Open MPI signal block under `srun --label` is `0: [host:pid] Signal: ...` a line),
    and without a relaying tool's or a logger's prefix when the first line has one (`worker-1: `)."""
    first, *following = text.encode().split(b"\n")
    if relay_prefix(first):
        following = [line.removeprefix(relay_prefix(line)) for line in following]
    return b"\n".join([first, *(line[launcher_prefix_end(line):] for line in following)])


def _following_lines(data: bytes, start: int, count: int) -> list[str]:
    lines = []
    position = data.find(b"\n", start)
    while position >= 0 and len(lines) < count:
        lines.append(_decode(data, position + 1))
        position = data.find(b"\n", position + 1)
    return lines


@lru_cache(maxsize=4096)  # a node has a few dozen PCI functions, printed on every noise line
def normalise_pci(value: str) -> str:
    """'PCI:0000:3B:00', '00000000:3B:00.0', '3b:00.0' -> '0000:3b:00' (domain:bus:device)."""
    text = value.strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    text = text.split(".", 1)[0]
    parts = text.split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) != 3:
        raise ValueError(value)
    domain, bus, device = parts
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}"


CASTS = {
    "int": int,
    "float": float,
    "str": str,
    "lower": str.lower,
    "pci": normalise_pci,
}
