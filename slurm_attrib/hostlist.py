"""Expand Slurm hostlist expressions (``gpu[01-04,07],login1``) without calling Slurm.

Standard library only: the epilog's hot path, the log reader and the Slurm adapter share it.
The number of hosts an expression names is counted before anything is expanded, so a hostile
``a[0-999]b[0-999]c[0-99]`` is refused (HostlistTooLarge) in microseconds, not expanded.
"""

from __future__ import annotations

import itertools
import re

_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
MAX_HOSTS = 100_000


class HostlistTooLarge(ValueError):
    """The expression names more than MAX_HOSTS hosts."""


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, current = [], 0, []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {expr!r}")
        if ch in ", " and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise ValueError(f"unbalanced '[' in hostlist {expr!r}")
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _ranges(body: str, item: str) -> list[tuple[int, int, int]]:
    """The (low, high, width) ranges of one bracket's body ``01-04,07``."""
    ranges = []
    for piece in body.split(","):
        match = _RANGE.fullmatch(piece.strip())
        if not match:
            raise ValueError(f"bad range {piece!r} in {item!r}")
        lo, hi = match.group(1), match.group(2) or match.group(1)
        if int(hi) < int(lo):
            raise ValueError(f"descending range {piece!r} in {item!r}")
        ranges.append((int(lo), int(hi), len(lo)))
    return ranges


def _parts(item: str) -> list[str | list[tuple[int, int, int]]]:
    """An item as its literal texts and bracket ranges, in order (read without recursion)."""
    parts: list[str | list[tuple[int, int, int]]] = []
    position = 0
    while (start := item.find("[", position)) >= 0:
        end = item.find("]", start)
        if end < 0:
            raise ValueError(f"unbalanced '[' in {item!r}")
        parts.append(item[position:start])
        parts.append(_ranges(item[start + 1 : end], item))
        position = end + 1
    parts.append(item[position:])
    return parts


def _count(parts: list[str | list[tuple[int, int, int]]]) -> int:
    """How many hosts the parts name, stopping as soon as the count passes MAX_HOSTS."""
    total = 1
    for part in parts:
        if isinstance(part, list):
            total *= sum(hi - lo + 1 for lo, hi, _ in part)
            if total > MAX_HOSTS:
                raise HostlistTooLarge(f"hostlist names more than {MAX_HOSTS} hosts")
    return total


def _expand_parts(parts: list[str | list[tuple[int, int, int]]]) -> list[str]:
    choices = [
        [part] if isinstance(part, str) else [str(n).zfill(width) for lo, hi, width in part for n in range(lo, hi + 1)]
        for part in parts
    ]
    return ["".join(pieces) for pieces in itertools.product(*choices)]


def expand(expr: str | None) -> list[str]:
    """``gpu[01-02],x`` -> ``['gpu01', 'gpu02', 'x']``; order kept, duplicates dropped.
    Raises ValueError for a malformed expression, HostlistTooLarge (a ValueError) for one that
    names more than MAX_HOSTS hosts."""
    if not expr or expr.strip() in ("", "(null)", "None assigned"):
        return []
    items = [_parts(item) for item in _split_top(expr.strip())]
    if sum(_count(parts) for parts in items) > MAX_HOSTS:  # duplicates count too: bounds the work
        raise HostlistTooLarge(f"hostlist names more than {MAX_HOSTS} hosts")
    seen: dict[str, None] = {}
    for parts in items:
        for host in _expand_parts(parts):
            seen.setdefault(host, None)
    return list(seen)
