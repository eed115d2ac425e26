"""One way to print times: ISO 8601 UTC with milliseconds."""

from datetime import UTC, datetime


def iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
