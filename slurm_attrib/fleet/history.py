"""What the stored history says about the fleet: repeat offenders, fabric patterns and the drains
they justify.  Shared by `sattrib report` and `sattrib drain`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from slurm_attrib.engine.timefmt import unix
from slurm_attrib.fleet.offenders import Offender, fleet_drains, read_acks, repeat_offenders
from slurm_attrib.store import JSON_NAME, Row, Store
from slurm_attrib.store.index import job_time


@dataclass
class FleetView:
    rows: list[Row]  # the rows read one by one: hardware causes, links, pending drains
    counts: list[dict]  # every job of the report's range, counted (Index.counts)
    offenders: list[Offender]
    patterns: list
    drains: list[dict]


def fleet_view(store: Store, config, now: float, since_days: float = 0.0) -> FleetView:
    """What the index says of the report's range and of the repeat window."""
    window = float(config.repeat_window_days)
    rows = store.fleet_rows(now - max(window, since_days) * 86400)
    counts = store.counts(now - since_days * 86400) if since_days > 0 else []
    offenders = repeat_offenders(rows, now, window, read_acks(config.results))
    patterns = fabric_patterns_of(rows, config, now)
    switch_side = {host for p in patterns if not p.drain_ok for host in p.hosts}
    drains = [] if config.drain_policy == "off" else fleet_drains(offenders, window, switch_side)
    return FleetView(rows, counts, offenders, patterns, drains)


def fabric_patterns_of(rows: list[Row], config, now: float) -> list:
    from slurm_attrib.fleet.fabric import fabric_patterns
    from slurm_attrib.fleet.topology import load_topology

    start = now - float(config.repeat_window_days) * 86400
    events = [
        {"job_id": row.job_id, **link, "time": unix(link.get("time"))}
        for row in rows if job_time(row) >= start
        for link in row.links if link.get("trusted")
    ]
    topology = load_topology([Path(p) for p in config.topology_files]) if config.topology_files else None
    return fabric_patterns(events, topology)


def cause_lines(store: Store, job_ids: list[str]) -> dict[str, str]:
    """The cause's evidence line of each job, read from its stored diagnosis (few jobs only)."""
    lines = {}
    for job_id in job_ids:
        try:
            evidence = json.loads(store.read(job_id, JSON_NAME)).get("evidence", [])
        except (OSError, ValueError):
            continue
        cause = next((e for e in evidence if e.get("role") == "cause"), None)
        if cause:
            lines[job_id] = f"{cause.get('node') or '-'} {cause.get('source')}:{cause.get('line')}: {cause.get('text', '')}"
    return lines
