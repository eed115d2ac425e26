"""Expand Slurm hostlist expressions (``gpu[01-04,07],login1``) without calling Slurm.

Standard library only: the epilog's hot path, the log reader and the Slurm adapter share it.
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_HOSTS = 100_000


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


def _expand_one(item: str) -> list[str]:
    start = item.find("[")
    if start < 0:
        return [item]
    end = item.find("]", start)
    if end < 0:
        raise ValueError(f"unbalanced '[' in {item!r}")
    prefix, body, rest = item[:start], item[start + 1 : end], item[end + 1 :]
    values: list[str] = []
    for piece in body.split(","):
        match = _RANGE.match(piece.strip())
        if not match:
            raise ValueError(f"bad range {piece!r} in {item!r}")
        lo, hi = match.group(1), match.group(2) or match.group(1)
        if int(hi) < int(lo):
            raise ValueError(f"descending range {piece!r} in {item!r}")
        if int(hi) - int(lo) > MAX_HOSTS:
            raise ValueError(f"range {piece!r} too large")
        width = len(lo)
        values.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    tails = _expand_one(rest) if rest else [""]
    return [f"{prefix}{v}{t}" for v in values for t in tails]


def expand(expr: str | None) -> list[str]:
    """``gpu[01-02],x`` -> ``['gpu01', 'gpu02', 'x']``; order kept, duplicates dropped.
    Raises ValueError for a malformed expression."""
    if not expr or expr.strip() in ("", "(null)", "None assigned"):
        return []
    seen: dict[str, None] = {}
    for item in _split_top(expr.strip()):
        for host in _expand_one(item):
            seen.setdefault(host, None)
            if len(seen) > MAX_HOSTS:
                raise ValueError("hostlist too large")
    return list(seen)
