"""Webhooks: POST each new diagnosis to the configured URLs, and lose nothing when a receiver is down.

Each webhook gets the diagnosis as JSON (`format: json`: the index row's fields and the whole
diagnosis) or a jinja2 rendering (`format: template`, e.g. the bundled `webhook-chat.json.j2`, a
Slack/Mattermost-style `{"text": ...}` message).  A 2xx answer is delivered.  Timeouts, refused
connections, 408, 429 and 5xx are retried (`retries` more times, `backoff` seconds doubling); any
other answer is final.  What is not delivered is appended, one JSON line each, to the dead-letter
file (mode 0600: it may hold a receiver's token), which `sattrib webhooks --retry` sends again.
The time one webhook may take is bounded (attempts x timeout + backoffs, at most MAX_SECONDS), so
the worker never hangs on a receiver.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from slurm_attrib import atomic

DEAD_LETTER = "webhooks-dead-letter.jsonl"
MAX_SECONDS = 60.0
RETRIED_STATUSES = (408, 429)


@dataclass
class Delivery:
    url: str
    delivered: bool
    attempts: int
    error: str = ""


def dead_letter_path(config) -> Path:
    return Path(config.webhook_dead_letter or Path(config.results) / DEAD_LETTER)


def notify(row, diagnosis, config) -> list[Delivery]:
    """Send one stored diagnosis to every webhook; undelivered bodies go to the dead-letter file."""
    results = []
    for hook in config.webhooks:
        body = render_body(hook, row, diagnosis, config)
        headers = {"Content-Type": hook.content_type, "User-Agent": "sattrib", **dict(hook.headers)}
        delivery = post(hook.url, body, headers, hook.timeout, hook.retries, hook.backoff)
        if not delivery.delivered:
            write_dead_letter(config, {"url": hook.url, "body": body.decode("utf-8"), "headers": headers,
                                       "error": delivery.error, "attempts": delivery.attempts, "at": time.time(),
                                       "job_id": row.job_id, "timeout": hook.timeout})
        results.append(delivery)
    return results


def render_body(hook, row, diagnosis, config) -> bytes:
    data = diagnosis.model_dump(mode="json")
    if hook.format == "template":
        from slurm_attrib.render import environment

        template = environment([Path(d) for d in config.template_dirs]).get_template(hook.template)
        return template.render(d=diagnosis, row=row).encode("utf-8")
    payload = {
        "job_id": row.job_id, "user": row.user, "state": row.state, "domain": row.domain, "category": row.category,
        "quality": row.quality, "culprit_nodes": row.culprit_nodes, "drains": row.drains, "summary": row.summary,
        "diagnosis": data,
    }
    return json.dumps(payload).encode("utf-8")


def post(url: str, body: bytes, headers: dict, timeout: float, retries: int, backoff: float) -> Delivery:
    deadline = time.monotonic() + MAX_SECONDS
    attempts, error, wait = 0, "", backoff
    while True:
        attempts += 1
        retry, error = _attempt(url, body, headers, min(timeout, max(0.1, deadline - time.monotonic())))
        if not error:
            return Delivery(url, True, attempts)
        if not retry or attempts > retries or time.monotonic() + wait >= deadline:
            return Delivery(url, False, attempts, error)
        time.sleep(wait)
        wait *= 2


def _attempt(url: str, body: bytes, headers: dict, timeout: float) -> tuple[bool, str]:
    """('' when delivered) or (whether to retry, what went wrong)."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read(65536)
            return False, ""
    except urllib.error.HTTPError as exc:
        return exc.code >= 500 or exc.code in RETRIED_STATUSES, f"HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return True, f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__


@contextmanager
def _locked(path: Path):
    """The dead-letter file's lock (a file beside it): appends and a retry's rewrite take turns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_dead_letter(config, entry: dict) -> None:
    path = dead_letter_path(config)
    line = (json.dumps(entry) + "\n").encode("utf-8")
    with _locked(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def retry_dead_letters(config) -> tuple[int, int]:
    """Send every dead letter once more; keep those that still fail.  (delivered, still failing).
    The file is not locked while sending: letters written meanwhile are kept as they are."""
    path = dead_letter_path(config)
    with _locked(path):
        taken = _read_lines(path)
    kept, delivered = [], 0
    for line in taken:
        try:
            entry = json.loads(line)
        except ValueError:
            kept.append(line)  # not ours to drop
            continue
        result = post(entry["url"], entry["body"].encode("utf-8"), entry.get("headers") or {},
                      float(entry.get("timeout") or 5.0), 0, 0.0)
        if result.delivered:
            delivered += 1
        else:
            kept.append(json.dumps({**entry, "error": result.error, "attempts": entry.get("attempts", 0) + 1, "at": time.time()}))
    with _locked(path):
        if taken or path.exists():
            arrived = _read_lines(path)[len(taken):]  # appended while we were sending
            atomic.write_file(path, "".join(f"{line}\n" for line in kept + arrived).encode("utf-8"), mode=0o600)
    return delivered, len(kept)
