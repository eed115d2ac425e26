"""Evidence connectors: sources beside the local files and the node bundles, read over HTTP for the
job's nodes and window, and added to the Evidence before the analysis.

    loki        kernel / syslog streams (connectors.loki), read as kinds kernel, syslog or app
    prometheus  DCGM and node_exporter series (connectors.prometheus), changes read as kind metrics

Each connector is bounded by its own `timeout` (all its requests of one job) and `max_bytes`; what
it read, or why it read nothing, is one coverage entry per node (or one for the whole connector
when its server failed): never an error of the analysis.  Nothing here runs unless `loki.url` or
`prometheus.url` is set in the config.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from slurm_attrib.connectors.http import ConnectorError, origin
from slurm_attrib.ingest.gpuids import identity_csv
from slurm_attrib.ingest.types import CoverageEntry, Evidence, JobContext, SourceFile
from slurm_attrib.provenance import Provenance, vouched


def configured(config) -> list[str]:
    """Names of the connectors the config turns on."""
    return [name for name in ("loki", "prometheus") if getattr(config, name).url]


def gather(evidence: Evidence, config) -> None:
    """Add what every configured connector has for this job to `evidence` (files and coverage)."""
    names = configured(config)
    if not names:
        return
    job = evidence.job
    nodes = [n for n in job.nodes if "`" not in n] or sorted({f.node for f in evidence.files if f.node})
    for name in names:
        settings = getattr(config, name)
        if not nodes or job.start is None or job.end is None:
            missing = "nodes" if not nodes else "start and end times"
            evidence.coverage.append(CoverageEntry(None, f"{name}:", None, "skipped", f"the job's {missing} are not known"))
            continue
        start, end = job.start - settings.margin, job.end + settings.margin
        try:
            if name == "loki":
                _add_loki(evidence, settings, nodes, start, end)
            else:
                _add_prometheus(evidence, settings, nodes, start, end)
        except ConnectorError as exc:
            evidence.coverage.append(CoverageEntry(None, f"{name}:", None, "unreadable", f"{origin(settings.url)}: {exc}"))


def probe(config, nodes: list[str], start: float, end: float) -> list[CoverageEntry]:
    """What the connectors hold for `nodes` over [start, end] (`sattrib connectors`): the coverage
    entries an analysis of a job that ran there then would record."""
    evidence = Evidence(Path("."), JobContext(nodes=tuple(nodes), start=start, end=end))
    plain = replace(config, loki=replace(config.loki, margin=0.0), prometheus=replace(config.prometheus, margin=0.0))
    gather(evidence, plain)
    return evidence.coverage


def _add_loki(evidence: Evidence, settings, nodes: list[str], start: float, end: float) -> None:
    from slurm_attrib.connectors.loki import read_streams, render

    result = read_streams(settings, nodes, start, end)
    kinds = {s.name: s.kind for s in settings.streams}
    for name, per_node in sorted(result.streams.items()):
        kind = kinds[name]
        for node in nodes:
            rel = f"loki:{node}/{name}"
            lines = per_node.get(node)
            data = render(node, kind, lines) if lines else b""
            status = "truncated" if result.truncated.get(name) and data else ("ok" if data else "empty")
            detail = f"{len(lines.entries) if lines else 0} lines from Loki" + (f"; {result.truncated[name]}" if status == "truncated" else "")
            evidence.coverage.append(CoverageEntry(node, rel, kind, status, detail))
            if data:
                evidence.files.append(SourceFile(rel=rel, node=node, kind=kind, provenance=vouched(kind), data=data))


def _add_prometheus(evidence: Evidence, settings, nodes: list[str], start: float, end: float) -> None:
    from slurm_attrib.connectors.prometheus import read_changes

    result = read_changes(settings, nodes, start, end)
    for node in nodes:
        changes = result.nodes[node]
        rel = f"prometheus:{node}"
        data = "".join(line + "\n" for _, line in changes.lines).encode("utf-8", "replace")
        status = "truncated" if result.truncated else "ok"  # no change is an answer, not a gap
        detail = (f"{len(changes.lines)} changes in {changes.series} series" if changes.lines else "no series changed") + (
            f"; {result.truncated}" if result.truncated else "")
        evidence.coverage.append(CoverageEntry(node, rel, "metrics", status, detail))
        if data:
            evidence.files.append(SourceFile(rel=rel, node=node, kind="metrics", provenance=Provenance.PROBE, data=data))
        if changes.gpus:  # the GPUs' UUIDs from DCGM's labels, read like nvidia-smi --query-gpu output
            evidence.files.append(SourceFile(rel=f"{rel}/gpus", node=node, kind="nvidia_smi", provenance=Provenance.PROBE,
                                             data=identity_csv(sorted(changes.gpus.items()))))
