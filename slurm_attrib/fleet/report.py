"""`sattrib report`: the fleet over a time range, from the index alone (no diagnosis file is read,
except the cause lines of the few repeat offenders).

Failures by domain and category, per day; GPU-hours lost (elapsed time x nodes x
`gpus_per_node` of every job that did not succeed); the nodes and GPUs most often named as the
hardware origin; an Xid histogram per node and GPU; repeat offenders with their drain or RMA
recommendation; fabric patterns; pending drains.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections import Counter, defaultdict

from slurm_attrib.collection import no_cycle_collection
from slurm_attrib.fleet.offenders import Offender
from slurm_attrib.store import RECOMMENDED, Row
from slurm_attrib.store.index import HARDWARE_DOMAINS, job_time

SUCCESS_DOMAINS = ("none",)
TOP = 10
MAX_CAUSE_LINES = 200  # jobs whose cause line is read from its diagnosis file (the worst offenders first)


def parse_days(value: str) -> float:
    """'7d', '12h', '30m', '2w' or a plain number of days."""
    from slurm_attrib.errors import SattribError

    text = str(value).strip().lower()
    scale = {"w": 7.0, "d": 1.0, "h": 1 / 24, "m": 1 / 1440}.get(text[-1:])
    try:
        days = float(text[:-1] if scale is not None else text) * (scale or 1.0)
    except ValueError:
        raise SattribError(f"--since {value!r}: expected a duration such as 7d, 12h, 2w or a number of days") from None
    if not 0 < days < 1e6:  # NaN, inf and 1e300 are no duration
        raise SattribError(f"--since {value!r}: must be positive and less than a million days")
    return days


def fleet_report(store, config, now: float, since_days: float) -> dict:
    """The whole report: the index read once (fleet.history.fleet_view), then assembled.  The
    cyclic garbage collector is paused: a report over 100,000 jobs makes millions of short-lived
    objects and no cycles, and collection passes would cost a third of its time."""
    from slurm_attrib.fleet.history import cause_lines, fleet_view

    with no_cycle_collection():
        view = fleet_view(store, config, now, since_days)
        jobs = list(dict.fromkeys(j for o in view.offenders for j in o.jobs))[:MAX_CAUSE_LINES]
        return build_report(
            view.counts, view.rows, now=now, since_days=since_days, window_days=float(config.repeat_window_days),
            gpus_per_node=int(config.gpus_per_node), offenders=view.offenders, patterns=view.patterns,
            fleet_drains=view.drains, cause_lines=cause_lines(store, jobs),
        )


def build_report(counts: list[dict], rows: list[Row], *, now: float, since_days: float, window_days: float,
                 gpus_per_node: int, offenders: list[Offender], patterns: list, fleet_drains: list[dict],
                 cause_lines: dict[str, str]) -> dict:
    """`counts`: every job of the range, counted by the index; `rows`: the fleet rows (hardware
    causes, links, pending drains) of the range and the repeat window."""
    start = now - since_days * 86400
    failed = [c for c in counts if c["domain"] not in SUCCESS_DOMAINS]
    rows = [r for r in rows if job_time(r) >= start]
    hardware = [r for r in rows if r.domain in HARDWARE_DOMAINS and not r.systemic]
    per_day: dict[str, Counter] = defaultdict(Counter)
    by_domain, by_category, by_quality, gpu_hours = Counter(), Counter(), Counter(), Counter()
    for c in failed:
        per_day[c["day"]][c["domain"]] += c["jobs"]
        by_domain[c["domain"]] += c["jobs"]
        by_category[f"{c['domain']}/{c['category']}"] += c["jobs"]
        by_quality[c["quality"]] += c["jobs"]
        gpu_hours[c["domain"]] += c["node_seconds"] / 3600 * gpus_per_node
    xids: dict[str, Counter] = defaultdict(Counter)
    node_xids: dict[str, Counter] = defaultdict(Counter)
    gpus = Counter()
    labels: dict[str, str] = {}
    for row in sorted(hardware, key=lambda r: (job_time(r), r.job_id)):
        for gpu in row.gpus:
            key = gpu.get("uuid") or f"{gpu.get('node')} {gpu.get('pci_bus_id')}"  # a UUID follows a moved GPU
            labels[key] = _gpu_label(gpu)  # where it was seen last
            gpus[key] += 1
            if gpu.get("xid") is not None:
                xids[key][str(gpu["xid"])] += 1
                node_xids[str(gpu.get("node"))][str(gpu["xid"])] += 1
    return {
        "since_days": since_days,
        "window_days": window_days,
        "generated_at": _iso(now),
        "jobs": sum(c["jobs"] for c in counts),
        "failed_jobs": sum(by_domain.values()),
        "by_domain": dict(_ordered(by_domain)),
        "by_category": dict(_ordered(by_category)),
        "by_quality": dict(_ordered(by_quality)),
        "per_day": {day: dict(_ordered(per_day[day])) for day in sorted(per_day)},
        "gpu_hours_lost": {domain: round(hours, 1) for domain, hours in _ordered(gpu_hours) if hours > 0},
        "gpus_per_node": gpus_per_node,
        "top_nodes": dict(_ordered(Counter(n for r in hardware for n in r.culprit_nodes), TOP)),
        "top_gpus": {labels[key]: n for key, n in _ordered(gpus, TOP)},
        "xid_histogram": {labels[key]: dict(_ordered(xids[key])) for key in sorted(xids, key=labels.get)},
        "xid_histogram_by_node": {node: dict(_ordered(node_xids[node])) for node in sorted(node_xids)},
        "repeat_offenders": [_offender(o, window_days, cause_lines) for o in offenders],
        "fabric_patterns": [_pattern(p) for p in patterns],
        "fleet_drains": fleet_drains,
        "pending_drains": [{"job_id": r.job_id, **e} for r in rows for e in r.drains if e.get("status") == RECOMMENDED],
    }


def _gpu_label(gpu: dict) -> str:
    """`node pci_bus_id`, with the UUID and serial when the capture named them."""
    label = f"{gpu.get('node')} {gpu.get('pci_bus_id')}"
    if gpu.get("uuid"):
        label += f" {gpu['uuid']}" + (f" serial {gpu['serial']}" if gpu.get("serial") else "")
    return label


def _ordered(counter: Counter, limit: int | None = None) -> list[tuple]:
    items = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    return items[:limit] if limit else items


def _iso(stamp: float | None) -> str | None:
    return None if stamp is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def _offender(offender: Offender, window_days: float, cause_lines: dict[str, str]) -> dict:
    return {
        "node": offender.node,
        "gpu": offender.pci_bus_id,
        "uuid": offender.uuid,
        "recommendation": offender.recommendation,
        "reason": offender.reason(window_days),
        "jobs": [
            {"job_id": s.job_id, "time": _iso(s.time), "category": f"{s.domain}/{s.category}", "quality": s.quality,
             "xid": s.xid, "line": cause_lines.get(s.job_id, "")}
            for s in offender.strikes
        ],
    }


def _pattern(pattern) -> dict:
    data = pattern if isinstance(pattern, dict) else {k: getattr(pattern, k) for k in pattern.__dataclass_fields__}
    return json.loads(json.dumps(data, default=str))


# -- rendering ------------------------------------------------------------------------------------


def render_json(report: dict) -> str:
    return json.dumps(report, indent=2) + "\n"


def render_text(report: dict) -> str:
    out = [f"{report['jobs']} job(s) in the last {report['since_days']:g} day(s), {report['failed_jobs']} did not succeed"]
    out.append("Failures by domain/category:")
    out += [f"  {count:6d}  {key}" for key, count in report["by_category"].items()]
    if report["per_day"]:
        out.append("Per day:")
        out += [f"  {day}  " + ", ".join(f"{d} {c}" for d, c in counts.items()) for day, counts in report["per_day"].items()]
    lost = report["gpu_hours_lost"]
    if lost:
        out.append(f"GPU-hours lost ({report['gpus_per_node']} GPUs per node): {sum(lost.values()):.1f} = "
                   + ", ".join(f"{d} {h:.1f}" for d, h in lost.items()))
    if report["xid_histogram_by_node"]:
        out.append("Xids by node: " + "; ".join(f"{node} " + ", ".join(f"{x} x{c}" for x, c in counts.items())
                                               for node, counts in report["xid_histogram_by_node"].items()))
    out.append("Top hardware culprits:")
    out += [f"  {count:6d}  {node}" for node, count in report["top_nodes"].items()] or ["  none"]
    if report["top_gpus"]:
        out.append("Top GPUs (node, PCI bus id):")
        out += [f"  {count:6d}  {gpu}  Xid {', '.join(f'{x} x{c}' for x, c in report['xid_histogram'].get(gpu, {}).items()) or '-'}"
                for gpu, count in report["top_gpus"].items()]
    out.append(f"Repeat offenders (>= 2 jobs in {report['window_days']:g} days): {len(report['repeat_offenders'])}")
    for offender in report["repeat_offenders"]:
        what = f"{offender['node']} GPU {offender['gpu']}" if offender["gpu"] else offender["node"]
        out.append(f"  {what}: {offender['recommendation'].upper()}")
        for job in offender["jobs"]:
            line = f"  {job['line'][:120]}" if job["line"] else ""
            out.append(f"    job {job['job_id']} {job['time']} {job['category']} ({job['quality']}){line}")
    out.append(f"Fabric patterns: {len(report['fabric_patterns'])}")
    out += [f"  {p.get('summary', p)}" for p in report["fabric_patterns"]]
    out.append(f"Drain recommendations from history: {len(report['fleet_drains'])}")
    out += [f"  {d['node']:16} {d['reason']}" for d in report["fleet_drains"]]
    out.append(f"Pending drain recommendations of single jobs: {len(report['pending_drains'])}")
    out += [f"  {e['node']:16} job {e['job_id']:10} {e['reason']}" for e in report["pending_drains"]]
    return "\n".join(out) + "\n"


CSV_FIELDS = ("section", "key", "node", "gpu", "count", "value", "jobs", "detail")


def render_csv(report: dict) -> str:
    """One row per finding, the same columns for every section (spreadsheet-friendly)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for key, count in report["by_category"].items():
        writer.writerow({"section": "category", "key": key, "count": count})
    for day, counts in report["per_day"].items():
        for domain, count in counts.items():
            writer.writerow({"section": "per_day", "key": day, "detail": domain, "count": count})
    for domain, hours in report["gpu_hours_lost"].items():
        writer.writerow({"section": "gpu_hours_lost", "key": domain, "value": hours})
    for node, count in report["top_nodes"].items():
        writer.writerow({"section": "top_node", "node": node, "count": count})
    for gpu, count in report["top_gpus"].items():
        node, pci, *identity = gpu.split(" ")
        xids = " ".join(f"{x}:{c}" for x, c in report["xid_histogram"].get(gpu, {}).items())
        writer.writerow({"section": "top_gpu", "key": " ".join(identity), "node": node, "gpu": pci, "count": count, "detail": xids})
    for offender in report["repeat_offenders"]:
        writer.writerow({"section": "repeat_offender", "key": offender["recommendation"], "node": offender["node"],
                         "gpu": offender["gpu"] or "", "count": len(offender["jobs"]),
                         "jobs": " ".join(j["job_id"] for j in offender["jobs"]), "detail": offender["reason"]})
    for pattern in report["fabric_patterns"]:
        writer.writerow({"section": "fabric_pattern", "key": pattern.get("kind", ""), "count": pattern.get("count", ""),
                         "jobs": " ".join(str(j) for j in pattern.get("job_ids", [])), "detail": pattern.get("summary", "")})
    for drain in report["fleet_drains"]:
        writer.writerow({"section": "fleet_drain", "node": drain["node"], "detail": drain["reason"]})
    for entry in report["pending_drains"]:
        writer.writerow({"section": "pending_drain", "node": entry["node"], "jobs": entry["job_id"], "detail": entry["reason"]})
    return buffer.getvalue()
