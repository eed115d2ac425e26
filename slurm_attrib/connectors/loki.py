"""Loki as an evidence source: the job's nodes' kernel and syslog streams over its window.

One LogQL query per configured stream covers all the job's nodes (`{<selector>, <node_label>=~
"dgx001|dgx002"} <pipeline>`), read page by page through /loki/api/v1/query_range, newest first,
until the window is read, `max_lines` entries are kept, or the connector's time or size budget is
spent.  Each entry becomes one line stamped with its Loki time:

    2026-12-02T13:04:06.123Z dgx003 kernel: NVRM: Xid (PCI:0000:3b:00): 79, ...   (a bare journal message)
    2026-12-02T13:04:06.123Z Dec  2 13:04:06 dgx003 kernel: NVRM: Xid ...          (a line with its own header)

in the source `loki:<node>/<stream name>` of the stream's kind, so the same rules read it as they
read the node's local kernel log or journal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_attrib.connectors.http import Budget, ConnectorError, get_json, node_of, node_regex
from slurm_attrib.engine.timefmt import iso
from slurm_attrib.ingest.timestamps import parse_line_time

NS = 1_000_000_000
NODES_PER_QUERY = 200  # ~2 KB of node names: the query stays well inside servers' URL limits
MAX_LINE = 4096  # characters kept of one entry, as the epilog keeps of a line (capture.sources.MAX_LINE_KEEP)


@dataclass
class StreamLines:
    """What one stream gave for one node."""

    entries: list[tuple[int, str, str]] = field(default_factory=list)  # (ns, program, line)


@dataclass
class LokiResult:
    streams: dict[str, dict[str, StreamLines]]  # stream name -> node -> lines
    truncated: dict[str, str] = field(default_factory=dict)  # stream name -> why


def read_streams(config, nodes: list[str], start: float, end: float) -> LokiResult:
    """Each stream for all nodes, NODES_PER_QUERY nodes a query (the query goes in the URL); a
    stream's max_lines shared evenly by the queries."""
    budget = Budget.start(config.timeout, config.max_bytes)
    result = LokiResult({})
    groups = [nodes[i: i + NODES_PER_QUERY] for i in range(0, len(nodes), NODES_PER_QUERY)]
    share = max(1, config.max_lines // max(1, len(groups)))
    for stream in config.streams:
        per_node: dict[str, StreamLines] = {}
        for group in groups:
            found, why = _read_stream(config, stream, group, start, end, budget, share)
            per_node.update(found)
            if why:
                result.truncated[stream.name] = why
        result.streams[stream.name] = per_node
    return result


def _query(config, stream, nodes: list[str]) -> str:
    inner = stream.selector.strip()[1:-1].strip()
    matcher = f"{config.node_label}=~{node_regex(nodes, config.node_suffix)}"
    return "{" + (f"{inner}, " if inner else "") + matcher + "}" + (f" {stream.pipeline}" if stream.pipeline else "")


def _read_stream(config, stream, nodes, start: float, end: float, budget: Budget, max_lines: int):
    """Pages newest first: each next page ends where the last one's oldest entry was (Loki's end
    is exclusive), so an entry shared by two pages is dropped by the seen-set."""
    query = _query(config, stream, nodes)
    per_node: dict[str, StreamLines] = {n: StreamLines() for n in nodes}
    seen: set[tuple] = set()
    kept = 0
    page_end = int(end * NS) + 1
    begin = int(start * NS)
    while True:
        params = {"query": query, "start": str(begin), "end": str(page_end), "limit": str(config.page_lines),
                  "direction": "backward"}
        data = get_json(config.url, "/loki/api/v1/query_range", params, config.headers, budget)
        entries = _entries(data, stream, config, nodes)
        oldest = page_end
        for ns, node, program, line in entries:
            oldest = min(oldest, ns)
            key = (ns, node, program, line)
            if key in seen:
                continue
            seen.add(key)
            if kept >= max_lines:
                return per_node, f"more than {max_lines} lines: the oldest were not read"
            per_node[node].entries.append((ns, program, line))
            kept += 1
        if len(entries) < config.page_lines or oldest <= begin:
            return per_node, ""
        # a page of one instant (more entries at one nanosecond than a page) cannot move on
        page_end = oldest + 1 if oldest + 1 < page_end else oldest


def _entries(data: dict, stream, config, nodes) -> list[tuple[int, str, str, str]]:
    if data.get("status") != "success":
        raise ConnectorError(f"query failed: {data.get('error') or data.get('status')}")
    body = data.get("data") or {}
    if body.get("resultType") != "streams":
        raise ConnectorError(f"unexpected result type {body.get('resultType')!r} (a metric query?)")
    out = []
    for item in body.get("result") or []:
        labels = item.get("stream") or {} if isinstance(item, dict) else {}
        value = labels.get(config.node_label)
        node = node_of(value, nodes, config.node_suffix) if isinstance(value, str) else None
        if node is None:
            continue
        program = str(labels.get(stream.program_label) or "") if stream.program_label else ""
        for pair in item.get("values") or []:
            try:
                ns, line = int(pair[0]), str(pair[1])
            except (TypeError, ValueError, IndexError):
                continue
            out.append((ns, node, program, line))
    return out


def render(node: str, kind: str, lines: StreamLines) -> bytes:
    """The node's entries, oldest first, as lines stamped with their Loki time."""
    out = []
    for ns, program, line in sorted(lines.entries):
        line = " ".join(line[:MAX_LINE].splitlines())
        stamp = iso(ns / NS)
        if kind == "app" or _has_own_time(line):
            out.append(f"{stamp} {line}")  # job output, or a line with a header of its own (a scraped file)
        else:
            out.append(f"{stamp} {node} {program or ('kernel' if kind == 'kernel' else 'syslog')}: {line}")
    return ("\n".join(out) + "\n").encode("utf-8", "replace") if out else b""


def _has_own_time(line: str) -> bool:
    own = parse_line_time(line, 2000)  # any year: only whether there is a leading time matters
    return own.wall is not None or own.mono is not None
