"""Line shapes (ruleset/shapes.py): which patterns cannot tell digits apart, and how many shapes are kept."""

import pytest

from slurm_attrib.ruleset import shapes
from slurm_attrib.ruleset.shapes import MISSING, ShapeMemo, digit_blind, shape_of


@pytest.mark.parametrize("pattern, blind", [
    (r"Xid (?P<xid>\d+)", True),
    (r"[0-9a-fA-F]{4}:[\w.-]+ \D \s \S .", True),
    (r"[^0-9]+ [^\s\[:]+", True),
    (r"(?i)rank (?P<rank>\d{1,7})\b", True),
    (r"Xid 79", False),  # a digit of its own
    (r"0x[0-9a-f]+", False),
    (r"[1-9]\d{2,}", False),  # a range of some digits
    (r"[^5]", False),
    (r"errno (?:116|5)", False),
    (r"[[:digit:]]", False),  # RE2's POSIX class: punctuation and letters to Python's parser
    (r"a{,3}", False),  # a literal `{,3}` to RE2
    (r"\x30", False),  # the digit 0 written as an escape
    (r"\060", False),
    (r"\pN", False),  # RE2 syntax Python's parser does not read
    (r"\QXid 79\E", False),
])
def test_digit_blind_patterns(pattern, blind):
    assert digit_blind(pattern) is blind


def test_a_shape_is_the_line_with_its_digits_read_as_0():
    assert shape_of(b"[rank17]: Xid 79 at 0x1f") == b"[rank00]: Xid 00 at 0x0f"
    assert shape_of("GPU ٣ 7".encode()) == "GPU ٣ 0".encode()  # other scripts' digits are kept as they are


def _read(memo: ShapeMemo, key, finding):
    """What a reader does with a line: the kept finding, else its own, kept; None while resting."""
    if memo.resting():
        return None
    found = memo.get(key)
    return memo.keep(key, finding) if found is MISSING else found


def test_at_most_max_shapes_are_kept(monkeypatch):
    monkeypatch.setattr(shapes, "MAX_SHAPES", 4)
    memo = ShapeMemo()
    for n in range(50):
        assert _read(memo, n % 6, n) in (n, n - 6)
        assert len(memo) <= 4


def test_a_memo_whose_shapes_do_not_repeat_rests_then_tries_again():
    memo = ShapeMemo()
    for n in range(shapes.WINDOW):
        assert _read(memo, n, n) == n  # every line a new shape: all misses
    assert len(memo) == 0  # the window is over: more than a quarter missed
    rested = [_read(memo, "x", 2) for _ in range(shapes.REST)]
    assert rested == [None] * shapes.REST
    assert _read(memo, "x", 3) == 3 and _read(memo, "x", 4) == 3  # kept again


def test_a_memo_whose_shapes_repeat_keeps_them():
    memo = ShapeMemo()
    for n in range(10 * shapes.WINDOW):
        assert _read(memo, n % 100, n) == n % 100
    assert not memo.resting() and len(memo) == 100
