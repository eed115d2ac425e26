"""One way to print times, ISO 8601 UTC with milliseconds, and to read them back."""

from datetime import UTC, datetime


def iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def unix(value: str | None) -> float | None:
    """UNIX seconds of an ISO 8601 time (no zone means UTC); None when absent or unreadable."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
