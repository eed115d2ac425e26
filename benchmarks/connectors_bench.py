#!/usr/bin/env python3
"""slurm-attrib connector benchmark: the time Prometheus and Loki add to one diagnosis.

    python benchmarks/connectors_bench.py [--nodes 8] [--runs 15]

Simulates one --nodes-node job with an Xid 79 (8 ranks and 8 GPUs per node) and serves its
evidence three ways:
  baseline  every line in local files (sattrib analyze of the logs-layout folder)
  prometheus  the same folder, plus a real Prometheus (Debian's package, contrib/testprom) holding
            what dcgm-exporter and node_exporter would have scraped every 15 s over the job and 10
            minutes each side: the Xid gauge and per-Xid counters of every GPU, DBE ECC, PCIe
            replays, InfiniBand counters and port states of every node
  loki      the job's output local, every node's kernel and journal lines only in Loki (the test
            suite's stand-in for Loki's HTTP API, tests/connectors/loki_standin.py: Grafana Loki
            cannot run here)
Each is analysed --runs times in this process after one warm-up (the rule pack compiled), the
cases taking turns run by run;
printed: the median and the spread, the time added against the baseline and the ratio.  The
connector's own share is also timed alone (connectors.gather).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "connectors"), str(REPO / "tests")]


def timed_together(functions: dict, runs: int) -> dict[str, list[float]]:
    """Each function once to warm up, then round after round one run of each in turn, so that
    the machine's slow moments fall on every case alike."""
    for function in functions.values():
        function()
    out: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(runs):
        for name, function in functions.items():
            began = time.perf_counter()
            function()
            out[name].append(time.perf_counter() - began)
    return out


def show(name: str, times: list[float], baseline: float | None) -> None:
    median = statistics.median(times)
    extra = f"  +{(median - baseline) * 1000:7.1f} ms  x{median / baseline:5.2f}" if baseline else ""
    print(f"{name:<34} median {median * 1000:8.1f} ms  (min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}){extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()

    from connector_support import (STREAMS, OpenMetrics, PrometheusServer, dcgm_series, diagnose, ib_series, push_job,
                                   remove_node_logs)
    from loki_standin import LokiStandIn

    from slurm_attrib.config import Config, LokiConfig, PrometheusConfig
    from slurm_attrib.connectors import gather
    from slurm_attrib.engine.pipeline import load_any
    from slurm_attrib.simulate.job import Job
    from slurm_attrib.simulate.scenarios import SCENARIOS

    work = Path(tempfile.mkdtemp(prefix="sattrib-connectors-bench-"))
    job = Job("gpu_fell_off_bus", args.nodes, 8, 1)
    job.baseline()
    SCENARIOS["gpu_fell_off_bus"].build(job)
    job.write(work / "local")
    metrics = OpenMetrics()
    dcgm_series(job, metrics, with_totals=True)
    ib_series(job, metrics, {})
    prometheus = PrometheusServer(metrics.text())
    loki = LokiStandIn()
    try:
        shutil.copytree(work / "local", work / "loki")
        lines = push_job(loki, job)
        remove_node_logs(work / "loki")
        prom_config = Config(prometheus=PrometheusConfig(url=prometheus.url))
        loki_config = Config(loki=LokiConfig(url=loki.url, streams=STREAMS))
        samples = sum(len(s) for _, fam in metrics.families.values() for s in fam.values())
        print(f"job: {args.nodes} nodes x 8 GPUs, {samples} samples in Prometheus, {lines} lines in Loki; {args.runs} runs each")
        times = timed_together({
            "baseline (local files)": lambda: diagnose(work / "local"),
            "with prometheus": lambda: diagnose(work / "local", prom_config),
            "loki instead of local node logs": lambda: diagnose(work / "loki", loki_config),
            "prometheus gather alone": lambda: gather(load_any(work / "local"), prom_config),
            "loki gather alone": lambda: gather(load_any(work / "loki"), loki_config),
        }, args.runs)
        base = statistics.median(times["baseline (local files)"])
        for name, values in times.items():
            show(name, values, None if "baseline" in name or "alone" in name else base)
        same = diagnose(work / "loki", loki_config)["category"] == diagnose(work / "local")["category"]
        print(f"loki diagnosis equals the local one: {same}")
    finally:
        prometheus.stop()
        loki.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
