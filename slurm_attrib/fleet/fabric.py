"""Fabric patterns: network link failures grouped across jobs by host port and by switch.

Input: link events, one per (job, node, device, port, type) as the diagnoses keep them (`links`),
each a dict `{"job_id", "node", "device", "port", "time" (UNIX or None), "type"}`.

- switch: with a topology, link failures on >= 2 hosts behind the same switch within `window_s`
  of each other.  The switch side (the switch, its port or a shared cable bundle) is the suspect:
  no host is drained for it (`drain_ok` False).
- fabric_wide: without a topology, >= 3 hosts failing within `window_s` of each other.  Also not a
  host problem.
- host_port: the same host port failing in >= `min_jobs` jobs, counting only events that no
  switch or fabric-wide pattern explains: a host-side port, transceiver or cable (`drain_ok` True).

Untimed events (sysfs counters) count for host ports only: without a time they cannot be placed
next to another host's failure.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

WINDOW_S = 600.0
MIN_JOBS = 2
MIN_HOSTS_SWITCH = 2
MIN_HOSTS_FABRIC = 3


@dataclass
class FabricPattern:
    kind: str  # host_port | switch | fabric_wide
    key: str  # "gpu03 mlx5_0 port 1", "switch leaf-07", "fabric"
    hosts: list[str]
    job_ids: list[str]
    first: float | None
    last: float | None
    count: int
    drain_ok: bool
    summary: str
    evidence: list[dict] = field(default_factory=list)


def fabric_patterns(link_events: list[dict], topology=None, *, window_s: float = WINDOW_S, min_jobs: int = MIN_JOBS) -> list[FabricPattern]:
    events = sorted(link_events, key=_event_order)
    if topology is not None:
        shared = _switch_patterns(events, topology, window_s)
    else:
        shared = _fabric_wide_patterns(events, window_s)
    explained = {id(e) for pattern, members in shared for e in members}
    hosts = _host_port_patterns([e for e in events if id(e) not in explained], min_jobs)
    return [pattern for pattern, _ in shared] + hosts


def _event_order(event: dict) -> tuple:
    return (event.get("time") if event.get("time") is not None else float("inf"), str(event.get("job_id")),
            str(event.get("node")), str(event.get("device")), event.get("port") or 0, str(event.get("type")))


def _bursts(events: list[dict], window_s: float) -> list[list[dict]]:
    """Timed events split where two consecutive ones are more than window_s apart."""
    bursts: list[list[dict]] = []
    for event in (e for e in events if e.get("time") is not None):
        if bursts and event["time"] - bursts[-1][-1]["time"] <= window_s:
            bursts[-1].append(event)
        else:
            bursts.append([event])
    return bursts


def _switch_patterns(events: list[dict], topology, window_s: float) -> list[tuple[FabricPattern, list[dict]]]:
    by_switch: dict[str, list[dict]] = defaultdict(list)
    for event in events:
        switch_port = topology.switch_of(str(event.get("node")), event.get("device"), event.get("port"))
        if switch_port is not None:
            by_switch[switch_port.switch].append(event)
    found = []
    for switch in sorted(by_switch):
        for burst in _bursts(by_switch[switch], window_s):
            if len({e["node"] for e in burst}) >= MIN_HOSTS_SWITCH:
                hosts = sorted({e["node"] for e in burst})
                summary = (f"switch {switch}: links of {len(hosts)} hosts ({', '.join(hosts)}) failed within "
                           f"{window_s / 60:g} min: check the switch and its cables, not the hosts")
                found.append((_pattern("switch", f"switch {switch}", burst, False, summary), burst))
    return found


def _fabric_wide_patterns(events: list[dict], window_s: float) -> list[tuple[FabricPattern, list[dict]]]:
    found = []
    for burst in _bursts(events, window_s):
        hosts = sorted({e["node"] for e in burst})
        if len(hosts) >= MIN_HOSTS_FABRIC:
            summary = (f"links of {len(hosts)} hosts failed within {window_s / 60:g} min: a fabric-side event "
                       f"(switch, subnet manager, cabling), not the hosts; give topology_files to name the switch")
            found.append((_pattern("fabric_wide", "fabric", burst, False, summary), burst))
    return found


def _host_port_patterns(events: list[dict], min_jobs: int) -> list[FabricPattern]:
    by_port: dict[tuple, list[dict]] = defaultdict(list)
    for event in events:
        by_port[(str(event.get("node")), str(event.get("device")), event.get("port"))].append(event)
    found = []
    for (node, device, port), members in sorted(by_port.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)):
        jobs = sorted({str(e["job_id"]) for e in members})
        if len(jobs) >= min_jobs:
            where = f"{node} {device}" + (f" port {port}" if port is not None else "")
            summary = f"replace or reseat the cable/transceiver of {where}: link failures in jobs {', '.join(jobs)}"
            found.append(_pattern("host_port", where, members, True, summary))
    return found


def _pattern(kind: str, key: str, members: list[dict], drain_ok: bool, summary: str) -> FabricPattern:
    times = [e["time"] for e in members if e.get("time") is not None]
    return FabricPattern(
        kind=kind, key=key, hosts=sorted({str(e["node"]) for e in members}),
        job_ids=sorted({str(e["job_id"]) for e in members}), first=min(times) if times else None,
        last=max(times) if times else None, count=len(members), drain_ok=drain_ok, summary=summary,
        evidence=[{k: e.get(k) for k in ("job_id", "node", "device", "port", "time", "type")} for e in members],
    )
