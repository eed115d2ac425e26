"""The controller's worker reads the configured connectors: a job whose nodes' kernel logs are
clean but whose Xid shows in DCGM metrics on a real Prometheus (contrib/testprom) is attributed
to that GPU (real epilog runs, the real worker in a subprocess; no Slurm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "connectors"))
from connector_support import OpenMetrics, PrometheusServer, scrapes, step_samples  # noqa: E402


def test_the_worker_adds_what_prometheus_holds_for_the_job(node, tmp_path):
    now = time.time()
    start = now - 900
    fault = now - 300
    metrics = OpenMetrics()
    times = scrapes(start - 600, now - 30)
    for host in ("gpu01", "gpu02"):
        labels = {"gpu": "2", "UUID": f"GPU-0000{host[-1]}abc-0000-0000-0000-000000000002", "pci_bus_id": "00000000:3A:00.0",
                  "Hostname": host, "instance": f"{host}:9400", "job": "dcgm"}
        metrics.series("DCGM_FI_DEV_XID_ERRORS", "gauge", labels,
                       step_samples(times, [(fault, 79)] if host == "gpu02" else []))
    server = PrometheusServer(metrics.text())
    results = tmp_path / "results"
    node.config.update(results=str(results), analysis_deadline=1.0, late_bundle_wait=0, drain_policy="off",
                       slurm_backend="cli", prometheus={"url": server.url, "timeout": 10})
    try:
        window = {"SLURM_JOB_START_TIME": str(int(start))}
        assert node.run(extra_env=window)[0] == 0
        assert node.run(extra_env={**window, "SLURMD_NODENAME": "gpu02"})[0] == 0
        env = {**os.environ, **node.env, "SATTRIB_CONFIG": str(node.write_config()), "PATH": "/nonexistent",
               "PYTHONPATH": str(REPO)}
        done = subprocess.run([sys.executable, "-m", "slurm_attrib.worker", "4242"], env=env, capture_output=True,
                              text=True, timeout=120)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    diagnosis = json.loads((results / "4242" / "diagnosis.json").read_text())
    assert (diagnosis["domain"], diagnosis["category"], diagnosis["culprit_nodes"]) == ("gpu", "gpu_fell_off_bus", ["gpu02"])
    assert diagnosis["gpus"][0]["uuid"] == "GPU-00002abc-0000-0000-0000-000000000002"
    cause = next(e for e in diagnosis["evidence"] if e["role"] == "cause")
    assert cause["source"] == "prometheus:gpu02" and "DCGM_FI_DEV_XID_ERRORS" in cause["text"]
