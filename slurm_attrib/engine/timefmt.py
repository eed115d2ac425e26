"""One way to print times, ISO 8601 UTC with milliseconds, and to read them back."""

from datetime import UTC, datetime

from slurm_attrib.timebounds import sane_time


def iso(timestamp: float | None) -> str | None:
    """None for a time outside timebounds' sane range (it could not be printed as a date)."""
    timestamp = sane_time(timestamp)
    if timestamp is None:
        return None
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def unix(value: str | None) -> float | None:
    """UNIX seconds of an ISO 8601 time (no zone means UTC); None when absent, unreadable or
    outside timebounds' sane range."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return sane_time(moment.timestamp())
    except (ValueError, OverflowError):
        return None
