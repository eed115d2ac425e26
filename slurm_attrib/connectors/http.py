"""One bounded JSON GET for the connectors: a deadline shared by all requests of a job, a byte cap,
and errors as one line (ConnectorError) that never quote a header (it may hold a token)."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field


class ConnectorError(Exception):
    """A connector could not read its server; the message is one line for the coverage entry."""


@dataclass
class Budget:
    """What one connector may still spend on one job: seconds until its deadline, response bytes."""

    deadline: float  # time.monotonic() value
    bytes_left: int
    lock: threading.Lock = field(default_factory=threading.Lock)  # requests may run in threads

    @classmethod
    def start(cls, seconds: float, max_bytes: int) -> "Budget":
        return cls(time.monotonic() + seconds, max_bytes)

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()


def get_json(base_url: str, path: str, params: dict, headers: tuple[tuple[str, str], ...], budget: Budget,
             post: bool = False) -> dict:
    """GET base_url + path with the query params (or POST them form-encoded: a long query stays
    out of the URL, whose length servers limit); the decoded JSON object."""
    remaining = budget.seconds_left()
    if remaining <= 0:
        raise ConnectorError("time budget spent")
    if budget.bytes_left <= 0:
        raise ConnectorError("size budget spent")
    url = base_url.rstrip("/") + path
    form = urllib.parse.urlencode(params)
    request = urllib.request.Request(
        url if post else f"{url}?{form}", data=form.encode() if post else None,
        headers={"Accept": "application/json", **({"Content-Type": "application/x-www-form-urlencoded"} if post else {}),
                 **dict(headers)})
    try:
        with urllib.request.urlopen(request, timeout=remaining) as response:  # noqa: S310 - http(s) checked by config
            # other requests of the job, in other threads, may have spent the budget meanwhile
            body = response.read(max(budget.bytes_left, 0) + 1)
    except urllib.error.HTTPError as exc:
        raise ConnectorError(f"HTTP {exc.code} from {path}: {_error_text(exc)}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise ConnectorError(f"no answer from {path} within the time budget") from None
        raise ConnectorError(f"cannot reach {origin(base_url)}: {reason}") from None
    with budget.lock:
        budget.bytes_left -= len(body)
        over = budget.bytes_left < 0
    if over:
        raise ConnectorError(f"answers over the size budget at {path}")
    try:
        data = json.loads(body)
    except ValueError:
        raise ConnectorError(f"{path} did not answer JSON") from None
    if not isinstance(data, dict):
        raise ConnectorError(f"{path} answered JSON that is not an object")
    return data


def _error_text(exc: urllib.error.HTTPError) -> str:
    """The server's own error message (Prometheus: JSON `error`; Loki: plain text), one line."""
    try:
        raw = exc.read(2048).decode("utf-8", "replace")
    except OSError:
        return exc.reason or ""
    try:
        raw = json.loads(raw).get("error") or raw
    except (ValueError, AttributeError):
        pass
    return " ".join(str(raw).split())[:300]


def origin(url: str) -> str:
    """scheme://host:port only: a URL may carry a user and password."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}"


def node_regex(nodes: list[str], suffix: str) -> str:
    """A PromQL/LogQL regex (fully anchored by the server) matching the nodes' label values,
    written between backticks so that no escaping is needed."""
    names = "|".join(re.escape(n) for n in sorted(nodes))
    return f"`(?:{names}){suffix}`"


def node_of(value: str, nodes: list[str], suffix: str) -> str | None:
    """Which of the job's nodes a label value names (dgx001.cluster:9100 -> dgx001)."""
    for node in sorted(nodes, key=len, reverse=True):
        if re.fullmatch(f"{re.escape(node)}{suffix}", value):
            return node
    return None
