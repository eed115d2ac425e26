"""Prometheus as an evidence source: DCGM and node_exporter series of the job's nodes and window.

For each metric, one instant query asks which of the job's series changed in the window
(`changes(M{node}[W]) > 0` at the window's end); the raw samples of exactly those series are then
read (`M{<their labels>}[W]`) and every change becomes one timed line, e.g.

    2026-12-02T13:04:15.000Z DCGM_FI_DEV_XID_ERRORS 0 -> 79 (+79) {UUID="GPU-…",gpu="3",pci_bus_id="00000000:3B:00.0"}
    2026-12-02T13:05:00.000Z node_infiniband_link_downed_total 3 -> 4 (+1) {device="mlx5_2",port="1"}

in the source `prometheus:<node>` of kind `metrics`.  What a change means (an Xid, a port down)
is the rules' business (rules/metrics.yaml), as for any other line.  The time is the first sample
that holds the new value: the change happened within one scrape interval before it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from slurm_attrib.connectors.http import Budget, ConnectorError, get_json, node_of, node_regex
from slurm_attrib.engine.timefmt import iso

# dcgm-exporter (etc/default-counters.csv, dcp-metrics-included.csv) and node_exporter's infiniband
# collector (collector/infiniband_linux.go): the series whose changes rules/metrics.yaml reads.
DEFAULT_METRICS = (
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_EXP_XID_ERRORS_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "DCGM_FI_DEV_POWER_VIOLATION",
    "node_infiniband_link_downed_total",
    "node_infiniband_state_id",
    "node_infiniband_physical_state_id",
    "node_infiniband_link_error_recovery_total",
    "node_infiniband_port_errors_received_total",
)
QUERIES_AT_ONCE = 4
# Labels that say nothing about the device (who scraped it, where it runs), left out of the lines.
NOISE_LABELS = frozenset({"__name__", "job", "instance", "Hostname", "modelName", "exported_job", "exported_instance", "endpoint",
                          "namespace", "pod", "container", "service", "prometheus", "container_name"})


@dataclass
class NodeChanges:
    """The change lines of one node, with the GPUs (PCI bus id -> UUID) its DCGM labels name."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    gpus: dict[str, str] = field(default_factory=dict)
    series: int = 0


@dataclass
class PrometheusResult:
    nodes: dict[str, NodeChanges]
    truncated: str = ""  # why some series were left out


def read_changes(config, nodes: list[str], start: float, end: float) -> PrometheusResult:
    """Every change of the configured metrics on the nodes' series in [start, end]."""
    budget = Budget.start(config.timeout, config.max_bytes)
    window = max(1, int(round(end - start)))
    names = node_regex(nodes, config.node_suffix)
    metrics = list(config.metrics or DEFAULT_METRICS)
    result = PrometheusResult({n: NodeChanges() for n in nodes})
    # Requests run QUERIES_AT_ONCE at a time: a remote server's latency, not its load, is the cost.
    with ThreadPoolExecutor(QUERIES_AT_ONCE) as pool:
        # which series changed: one query per metric
        changed = pool.map(lambda m: _query(config, _changed(m, config.node_labels, names, window), end, budget), metrics)
        wanted = [(m, s["metric"]) for m, found in zip(metrics, changed) for s in found
                  if isinstance(s.get("metric"), dict) and _node(s, config, nodes)]
        if len(wanted) > config.max_series:
            result.truncated = f"more than {config.max_series} changed series; {len(wanted) - config.max_series} not read"
            wanted = wanted[: config.max_series]
        # the raw samples of exactly those series
        samples = pool.map(lambda item: _query(config, f"{item[0]}{_exact(item[1])}[{window}s]", end, budget), wanted)
        for (metric, _), found in zip(wanted, samples):
            for series in found:
                _add_series(result.nodes, metric, series, config, nodes)
    for changes in result.nodes.values():
        changes.lines.sort()
    return result


def _changed(metric: str, labels: tuple[str, ...], names: str, window: int) -> str:
    """The series of `metric` that changed in the window, a node found by any of the labels
    (`or` keeps one copy of a series that two labels find)."""
    return " or ".join(f"changes({metric}{{{label}=~{names}}}[{window}s]) > 0" for label in labels)


def _exact(labels: dict) -> str:
    """A selector matching exactly this label set (the metric name comes before it)."""
    return _braced(labels, leave_out={"__name__"})


def _braced(labels: dict, leave_out) -> str:
    """`{k="v",...}`, sorted by name, in PromQL's quoting (what a selector and a change line show)."""
    return "{" + ",".join(f'{k}="{_quoted(v)}"' for k, v in sorted(labels.items()) if k not in leave_out) + "}"


def _add_series(found: dict[str, NodeChanges], metric: str, series: dict, config, nodes: list[str]) -> None:
    node = _node(series, config, nodes)
    lines = _change_lines(metric, series)
    if node is None or not lines:
        return
    found[node].series += 1
    found[node].lines.extend(lines)
    labels = series.get("metric") or {}
    if labels.get("pci_bus_id") and str(labels.get("UUID", "")).startswith("GPU-"):
        found[node].gpus[labels["pci_bus_id"]] = labels["UUID"]


def _query(config, expr: str, at: float, budget: Budget) -> list[dict]:
    data = get_json(config.url, "/api/v1/query", {"query": expr, "time": f"{at:.3f}"}, config.headers, budget, post=True)
    if data.get("status") != "success":
        raise ConnectorError(f"query failed: {data.get('errorType', '')} {data.get('error', '')}".strip())
    body = data.get("data") or {}
    if body.get("resultType") not in ("vector", "matrix"):
        raise ConnectorError(f"unexpected result type {body.get('resultType')!r}")
    return [s for s in body.get("result") or [] if isinstance(s, dict)]


def _node(series: dict, config, nodes: list[str]) -> str | None:
    labels = series.get("metric") or {}
    for name in config.node_labels:
        value = labels.get(name)
        node = node_of(value, nodes, config.node_suffix) if isinstance(value, str) else None
        if node:
            return node
    return None


def _change_lines(metric: str, series: dict) -> list[tuple[float, str]]:
    """One line per sample whose value differs from the sample before it."""
    shown = _braced(series.get("metric") or {}, leave_out=NOISE_LABELS)
    out = []
    previous = None
    for point in series.get("values") or []:
        try:
            at, value = float(point[0]), float(point[1])
        except (TypeError, ValueError, IndexError):
            continue
        if previous is not None and value != previous:
            change = f"{_number(previous)} -> {_number(value)} ({_delta(value - previous)})"
            out.append((at, f"{iso(at)} {metric} {change} {shown}"))
        previous = value
    return out


def _quoted(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else f"{value:g}"


def _delta(value: float) -> str:
    return ("+" if value > 0 else "-") + _number(abs(value))
