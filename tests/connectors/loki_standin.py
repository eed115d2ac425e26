"""A stand-in for Grafana Loki's HTTP API, for the Loki connector's tests.

Grafana Loki itself cannot run here: Debian's package named `loki` is an unrelated genetics
program, and Grafana Loki (AGPL) is on this workplace's list of software not to use.  This server
implements the part of Loki's documented API the connector uses, with its documented formats:

    POST /loki/api/v1/push         {"streams": [{"stream": {labels}, "values": [["<ns>", "<line>"], ...]}]}
    GET  /loki/api/v1/query_range  query (a stream selector with =, !=, =~, !~ matchers, values in
                                   "..." or `...`, regexes fully anchored; then |= |~ != !~ line
                                   filters), start (inclusive) and end (exclusive) in ns, limit,
                                   direction (backward: the newest `limit` entries)
                                   -> {"status": "success", "data": {"resultType": "streams", "result": [...]}}
    GET  /ready

A query it cannot parse gets 400 and a plain-text message, as Loki answers.  Knobs for failure
tests: `fail_with` (a status for every query), `delay` (seconds before answering), `tenant` (the
X-Scope-OrgID every request must carry, else 401).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_STRING = r'"(?:[^"\\]|\\.)*"|`[^`]*`'
_MATCHER = re.compile(rf'\s*([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*({_STRING})\s*(?:,|$)')
_FILTER = re.compile(rf'\s*(\|=|\|~|!=|!~)\s*({_STRING})')


class QueryError(ValueError):
    pass


def _unquote(token: str) -> str:
    return token[1:-1] if token.startswith("`") else json.loads(token)


def parse(query: str):
    """-> (matchers [(label, op, value)], filters [(op, value)])."""
    query = query.strip()
    if not query.startswith("{") or "}" not in query:
        raise QueryError(f"parse error : syntax error: unexpected input, expecting {{ in {query[:40]!r}")
    inner, rest = query[1:].split("}", 1)
    matchers, position = [], 0
    while position < len(inner):
        m = _MATCHER.match(inner, position)
        if not m:
            raise QueryError(f"parse error at {position}: bad matcher")
        matchers.append((m[1], m[2], _unquote(m[3])))
        position = m.end()
    filters, position = [], 0
    while rest[position:].strip():
        m = _FILTER.match(rest, position)
        if not m:
            raise QueryError(f"parse error : unsupported pipeline stage {rest[position:].strip()[:40]!r}")
        filters.append((m[1], _unquote(m[2])))
        position = m.end()
    if not any(op in ("=", "=~") and value for _, op, value in matchers):
        raise QueryError("parse error : queries require at least one regexp or equality matcher that does not have an empty-compatible value")
    return matchers, filters


def _labels_match(labels: dict, matchers) -> bool:
    for name, op, value in matchers:
        have = labels.get(name, "")
        if op == "=" and have != value or op == "!=" and have == value:
            return False
        if op == "=~" and not re.fullmatch(value, have) or op == "!~" and re.fullmatch(value, have):
            return False
    return True


def _line_match(line: str, filters) -> bool:
    for op, value in filters:
        if (op == "|=" and value not in line) or (op == "!=" and value in line):
            return False
        if (op == "|~" and not re.search(value, line)) or (op == "!~" and re.search(value, line)):
            return False
    return True


class LokiStandIn:
    def __init__(self):
        self.streams: dict[tuple, list[tuple[int, str]]] = {}
        self.fail_with = 0
        self.delay = 0.0
        self.tenant = ""
        self.queries: list[dict] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def push(self, labels: dict, values: list[tuple[int, str]]) -> None:
        key = tuple(sorted(labels.items()))
        self.streams.setdefault(key, []).extend(values)

    def query_range(self, params: dict) -> dict:
        matchers, filters = parse(params.get("query", ""))
        start, end = int(params.get("start", 0)), int(params.get("end", 2**63 - 1))
        limit, backward = int(params.get("limit", 100)), params.get("direction", "backward").lower() == "backward"
        found = []
        for key, values in self.streams.items():
            labels = dict(key)
            if _labels_match(labels, matchers):
                found += [(ns, key, line) for ns, line in values if start <= ns < end and _line_match(line, filters)]
        found.sort(key=lambda item: item[0], reverse=backward)
        result: dict[tuple, list] = {}
        for ns, key, line in found[:limit]:
            result.setdefault(key, []).append([str(ns), line])
        return {"status": "success", "data": {"resultType": "streams", "stats": {},
                                              "result": [{"stream": dict(k), "values": v} for k, v in result.items()]}}

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _refused(self) -> bool:
                if standin.tenant and self.headers.get("X-Scope-OrgID") != standin.tenant:
                    self._answer(401, b"no org id\n", "text/plain")
                    return True
                return False

            def do_GET(self):  # noqa: N802 - http.server's name
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/ready":
                    return self._answer(200, b"ready\n", "text/plain")
                if url.path != "/loki/api/v1/query_range":
                    return self._answer(404, b"404 page not found\n", "text/plain")
                if self._refused():
                    return None
                params = dict(urllib.parse.parse_qsl(url.query))
                standin.queries.append(params)
                time.sleep(standin.delay)
                if standin.fail_with:
                    return self._answer(standin.fail_with, b"rpc error: code = Unavailable desc = too many outstanding requests\n", "text/plain")
                try:
                    body = standin.query_range(params)
                except QueryError as exc:
                    return self._answer(400, f"{exc}\n".encode(), "text/plain")
                return self._answer(200, json.dumps(body).encode())

            def do_POST(self):  # noqa: N802
                if self.path != "/loki/api/v1/push":
                    return self._answer(404, b"404 page not found\n", "text/plain")
                if self._refused():
                    return None
                data = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                for stream in data.get("streams", []):
                    standin.push(stream["stream"], [(int(ns), line) for ns, line in stream["values"]])
                return self._answer(204, b"")

        return Handler
