"""Prometheus metrics of the results store, in the text exposition format, for node_exporter's
textfile collector (`sattrib metrics --textfile DIR`, and the worker after each diagnosis when
`metrics_textfile_dir` is set).

Counters are totals over the whole store (they reset only when the store does); labels are
bounded: domains, categories, qualities, drain statuses, and the nodes and GPUs that were named
as a hardware origin -- never job ids or users.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from slurm_attrib import atomic
from slurm_attrib.store import RECOMMENDED, Store
from slurm_attrib.store.index import HARDWARE_DOMAINS

TEXTFILE = "sattrib.prom"


def metrics_text(store: Store, config, now: float) -> str:
    """The metrics of the store, the repeat offenders' drain recommendations included."""
    from slurm_attrib.fleet.history import fleet_view

    return render_metrics(store, len(fleet_view(store, config, now).drains))


def render_metrics(store: Store, fleet_drains: int = 0) -> str:
    counts = store.counts(0.0)
    rows = store.fleet_rows(0.0)
    diagnoses = Counter()
    for c in counts:
        diagnoses[(c["domain"] or "", c["category"] or "", c["quality"] or "")] += c["jobs"]
    drains = Counter(e.get("status", "") for r in rows for e in r.drains)
    nodes = Counter((n, r.domain, r.category or "") for r in rows if r.domain in HARDWARE_DOMAINS and not r.systemic for n in r.culprit_nodes)
    gpus = Counter(
        (g.get("node") or "", g.get("pci_bus_id") or "", str(g.get("xid") if g.get("xid") is not None else ""))
        for r in rows if r.domain in HARDWARE_DOMAINS and not r.systemic for g in r.gpus
    )
    pending = drains.get(RECOMMENDED, 0)
    last = store.last_analysed_at()
    out: list[str] = []
    _family(out, "sattrib_diagnoses_total", "counter", "Diagnoses stored, by domain, category and quality.",
            [({"domain": d, "category": c, "quality": q}, n) for (d, c, q), n in sorted(diagnoses.items())])
    _family(out, "sattrib_drains_total", "counter", "Drain entries of stored diagnoses, by status.",
            [({"status": s}, n) for s, n in sorted(drains.items())])
    _family(out, "sattrib_node_hardware_attributions_total", "counter",
            "Jobs whose hardware cause (gpu, network, host) named this node.",
            [({"node": n, "domain": d, "category": c}, k) for (n, d, c), k in sorted(nodes.items())])
    _family(out, "sattrib_gpu_hardware_attributions_total", "counter", "Jobs whose hardware cause named this GPU, by Xid.",
            [({"node": n, "pci_bus_id": p, "xid": x}, k) for (n, p, x), k in sorted(gpus.items())])
    _family(out, "sattrib_pending_drain_recommendations", "gauge", "Drain recommendations of single jobs not applied yet.",
            [({}, pending)])
    _family(out, "sattrib_fleet_drain_recommendations", "gauge", "Drain recommendations of repeat offenders.",
            [({}, fleet_drains)])
    if last is not None:
        _family(out, "sattrib_last_analysis_timestamp_seconds", "gauge", "When the newest diagnosis was stored.", [({}, last)])
    return "".join(out)


def _family(out: list[str], name: str, kind: str, help_text: str, samples: list[tuple[dict, float]]) -> None:
    out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
    for labels, value in samples:
        rendered = ",".join(f'{key}="{_escape(str(val))}"' for key, val in labels.items())
        out.append(f"{name}{{{rendered}}} {_number(value)}\n" if rendered else f"{name} {_number(value)}\n")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 2**53 else repr(float(value))


def write_textfile(directory: str | Path, text: str) -> Path:
    """<directory>/sattrib.prom replaced atomically (the collector never reads half a file)."""
    target = Path(directory) / TEXTFILE
    atomic.write_file(target, text.encode("utf-8"))  # its temporary name does not end in .prom
    return target
