"""The one decision on which instants are sane: finite UNIX seconds from 1970 to the end of 2199.

Every time read from input (a log line's stamp, job.json's start/end, a bundle's job times, a
kernel mono stamp) goes through here: a time outside the range is ignored, never passed on to
date arithmetic that would overflow (`datetime.fromtimestamp(1e20)`, year 10000) and stop the
analysis.  Standard library only: the epilog and the readers share it.
"""

from __future__ import annotations

import calendar
import math

FIRST_YEAR = 1970
LAST_YEAR = 2199
MIN_TIME = 0.0
MAX_TIME = float(calendar.timegm((LAST_YEAR + 1, 1, 1, 0, 0, 0, 0, 0, 0)))  # exclusive
# A kernel mono stamp (seconds since boot) is at most this: a century of uptime.
MAX_UPTIME = 100 * 366 * 86400.0


def sane_year(year: int) -> bool:
    return FIRST_YEAR <= year <= LAST_YEAR


def sane_time(value: object) -> float | None:
    """value as UNIX seconds when it is a finite number in [1970, 2200), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        return None
    if not math.isfinite(seconds) or not MIN_TIME <= seconds < MAX_TIME:
        return None
    return seconds


def sane_uptime(value: float) -> float | None:
    """A kernel mono stamp when finite and within MAX_UPTIME, else None."""
    return value if math.isfinite(value) and 0.0 <= value <= MAX_UPTIME else None


def describe_range() -> str:
    return f"a time between {FIRST_YEAR} and {LAST_YEAR}"
