"""Line shapes: a line with each of its ASCII digits read as 0.

Lines that differ only in their digits (every rank's copy of a message, every node's copy of a
noise line, one progress line after another) have one shape: half a million candidate lines of a
32,768-rank job's output hold 295 shapes.  A pattern that cannot tell digits apart (digit_blind)
matches every line of a shape alike, at the same places, so where a rule reads the first line of a
shape (the prefix it skips, the spans of its regexes) holds for the others, whose own digits then
give their values: the scanner keeps it in a ShapeMemo, at most MAX_SHAPES shapes (hostile input
may hold any number), and only while it pays (lines that print hex addresses or identifiers,
`page:0x5cb3b`, `req@751c808c...`, hardly repeat a shape).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

MAX_SHAPES = 4096
# Every WINDOW lookups the memo checks what it spared: when more than REST_ABOVE of them missed, it
# rests for REST lines (they are read directly), then starts again empty.  A miss costs more than
# reading the line directly (its shape, where every rule reads it, kept), and a hit spares nothing
# of the rules that must read each line anyway (not digit-blind: `[1-9]\d{2,}`, `0x[0-9a-f]+`).
WINDOW = 4096
REST = 8 * WINDOW
REST_ABOVE = 0.25
MISSING = object()
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0000000000")


def shape_of(line: bytes) -> bytes:
    """The line with each ASCII digit read as 0."""
    return line.translate(_DIGITS_AS_ZERO)


class ShapeMemo:
    """What was found on the first line of each shape, for the others.  Use:

        if memo.resting(): read the line directly
        else: found = memo.get(key); if found is MISSING: found = memo.keep(key, read the line)
    """

    __slots__ = ("_kept", "_lookups", "_misses", "_resting")

    def __init__(self) -> None:
        self._kept: dict = {}
        self._lookups = self._misses = self._resting = 0

    def __len__(self) -> int:
        return len(self._kept)

    def resting(self) -> bool:
        """Whether the lines are read directly for now (the last window's shapes hardly repeated)."""
        if self._resting:
            self._resting -= 1
            return True
        return False

    def get(self, key) -> Any:
        """The finding kept for the key (a shape, with what else the finding depends on), or MISSING."""
        self._lookups += 1
        return self._kept.get(key, MISSING)

    def keep(self, key, finding: Any) -> Any:
        """The finding of a line whose key was MISSING, kept for the next lines of its shape."""
        self._misses += 1
        if self._lookups >= WINDOW:
            if self._misses > REST_ABOVE * self._lookups:
                self._resting = REST
                self._kept.clear()
            self._lookups = self._misses = 0
        if len(self._kept) >= MAX_SHAPES:
            self._kept.clear()
        if not self._resting:
            self._kept[key] = finding
        return finding


# RE2 syntax that Python's parser would read otherwise, or not at all: POSIX classes (`[[:digit:]]`
# is a set of punctuation and letters to Python), `{,n}` (a literal to RE2), escapes of numbers
# (octal in RE2).  A pattern holding any of them is not taken for digit-blind.
_READ_OTHERWISE = re.compile(r"\[:\^?[a-z]+:\]|\{,|\\[0-9]")


@cache
def digit_blind(pattern: str) -> bool:
    r"""Whether the pattern cannot tell ASCII digits apart: each of its atoms matches all of 0-9 or
    none (`\d`, `\w`, `.`, `[0-9a-f]`; not `7`, `[1-9]`).  Its matches, spans and groups are then
    the same on two lines that differ only in which digits they hold, so a line's reading can be
    kept for the lines of its shape (shape_of).  False when Python's parser cannot read it."""
    from re import _constants as sre_constants
    from re import _parser as sre_parser

    digits = {ord(c) for c in "0123456789"}

    def set_blind(items) -> bool:
        held: set[int] = set()
        for op, value in items:
            if op is sre_constants.NEGATE:
                pass
            elif op is sre_constants.LITERAL:
                held |= {value} & digits
            elif op is sre_constants.RANGE:
                held |= set(range(value[0], value[1] + 1)) & digits
            elif op is sre_constants.CATEGORY:
                if value in (sre_constants.CATEGORY_DIGIT, sre_constants.CATEGORY_WORD,
                             sre_constants.CATEGORY_NOT_SPACE):
                    held |= digits
                elif value not in (sre_constants.CATEGORY_NOT_DIGIT, sre_constants.CATEGORY_NOT_WORD,
                                   sre_constants.CATEGORY_SPACE):
                    return False
            else:
                return False
        return held in (set(), digits)  # negated or not

    def blind(items) -> bool:
        for op, value in items:
            if op in (sre_constants.LITERAL, sre_constants.NOT_LITERAL):
                if value in digits:
                    return False
            elif op is sre_constants.IN:
                if not set_blind(value):
                    return False
            elif op in (sre_constants.ANY, sre_constants.AT):
                pass
            elif op is sre_constants.SUBPATTERN:
                if not blind(value[-1]):
                    return False
            elif op is sre_constants.BRANCH:
                if not all(blind(branch) for branch in value[1]):
                    return False
            elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT):
                if not blind(value[2]):
                    return False
            elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
                if not blind(value[1]):
                    return False
            elif op is sre_constants.ATOMIC_GROUP:
                if not blind(value):
                    return False
            else:  # a back-reference, a conditional: not RE2's, not tried
                return False
        return True

    if _READ_OTHERWISE.search(pattern):
        return False
    try:
        return blind(sre_parser.parse(pattern).data)
    except Exception:  # noqa: BLE001 - RE2 syntax Python's parser does not read
        return False
