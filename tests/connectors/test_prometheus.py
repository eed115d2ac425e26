"""The Prometheus connector against a real Prometheus (Debian's package, contrib/testprom): series
backfilled with promtool from simulated jobs whose fault shows only in DCGM or node_exporter
metrics must give the diagnosis the local kernel lines give."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from connector_support import (OpenMetrics, PrometheusServer, cause_lines, dcgm_series, diagnose, drop_lines, ib_series,
                               simulated, verdict)

from slurm_attrib.config import Config, PrometheusConfig
from support import sattrib_argv


def config_for(url: str, **settings) -> Config:
    return Config(prometheus=PrometheusConfig(url=url, **settings))


def metrics_only_copy(local: Path, target: Path, *needles: str) -> Path:
    shutil.copytree(local, target)
    assert drop_lines(target, *needles) > 0
    return target


@pytest.mark.parametrize("scenario", ["gpu_fell_off_bus", "gpu_uncorrectable_ecc", "gpu_row_remap_failure", "gpu_nvlink"])
def test_an_xid_seen_only_by_dcgm_gives_the_local_diagnosis(tmp_path, scenario):
    job = simulated(scenario, tmp_path / "local")
    metrics = OpenMetrics()
    dcgm_series(job, metrics, with_totals=True)
    server = PrometheusServer(metrics.text())
    try:
        local = diagnose(tmp_path / "local")
        remote_dir = metrics_only_copy(tmp_path / "local", tmp_path / "metrics", "NVRM: Xid", "fallen off the bus")
        assert verdict(diagnose(remote_dir)) != verdict(local)  # the Xid lines were what made it
        remote = diagnose(remote_dir, config_for(server.url))
    finally:
        server.stop()
    assert verdict(remote) == verdict(local)
    causes = cause_lines(remote)
    assert causes and causes[0]["source"].startswith("prometheus:")  # the first cause line; the job's own may follow
    assert "DCGM_" in causes[0]["text"] and causes[0]["node"] == local["culprit_nodes"][0]
    gpu = remote["gpus"][0]
    assert gpu["uuid"] and gpu["uuid"].startswith("GPU-")  # from DCGM's UUID label
    coverage = {c["source"]: c for c in remote["coverage"] if c["source"].startswith("prometheus:")}
    assert coverage[f"prometheus:{gpu['node']}"]["status"] == "ok"


def test_the_last_value_gauge_alone_names_the_gpu_of_a_single_xid(tmp_path):
    """Exporters with only DCGM_FI_DEV_XID_ERRORS (the default counters): one Xid is seen."""
    job = simulated("gpu_nvlink", tmp_path / "local")
    metrics = OpenMetrics()
    dcgm_series(job, metrics, with_totals=False)
    assert "DCGM_EXP_XID_ERRORS_TOTAL" not in metrics.text()
    server = PrometheusServer(metrics.text())
    try:
        remote = diagnose(metrics_only_copy(tmp_path / "local", tmp_path / "metrics", "NVRM: Xid"), config_for(server.url))
    finally:
        server.stop()
    assert verdict(remote) == verdict(diagnose(tmp_path / "local"))


def test_an_infiniband_port_down_seen_only_by_node_exporter(tmp_path):
    job = simulated("link_down", tmp_path / "local")
    (t_down, host), = [(t, h) for h, lines in job.kernel.items() for t, _, m in lines if "Link down" in m]
    metrics = OpenMetrics()
    ib_series(job, metrics, {host: (t_down, t_down + 120)})
    server = PrometheusServer(metrics.text())
    try:
        remote_dir = metrics_only_copy(tmp_path / "local", tmp_path / "metrics", "Link down", "Lost carrier")
        remote = diagnose(remote_dir, config_for(server.url))
    finally:
        server.stop()
    local = diagnose(tmp_path / "local")
    assert verdict(remote) == verdict(local)
    assert {e["rule"] for e in cause_lines(remote)} >= {"net.ib_metric_port_down"}
    links = [(link["node"], link["device"], link["port"]) for link in remote["links"]]
    assert (host, "mlx5_0", 1) in links
    # the change lines are timed to the first scrape after the fault
    first = min(e["time"] for e in remote["evidence"] if e["source"] == f"prometheus:{host}")
    assert 0 <= _unix(first) - t_down <= 15


def _unix(text: str) -> float:
    from slurm_attrib.engine.timefmt import unix

    return unix(text)


@pytest.fixture(scope="module")
def quiet_server(tmp_path_factory):
    """Series of a job in which nothing changed, for the failure and bound tests."""
    folder = tmp_path_factory.mktemp("quiet")
    job = simulated("gpu_fell_off_bus", folder / "local")
    metrics = OpenMetrics()
    dcgm_series(job, metrics, with_totals=True)
    ib_series(job, metrics, {})
    server = PrometheusServer(metrics.text())
    yield server, folder / "local"
    server.stop()


def test_a_server_that_cannot_be_reached_is_recorded_in_coverage_and_the_diagnosis_stands(quiet_server, tmp_path):
    _, local = quiet_server
    closed = diagnose(local, config_for("http://127.0.0.1:9"))
    assert verdict(closed) == verdict(diagnose(local))
    entry, = [c for c in closed["coverage"] if c["source"] == "prometheus:"]
    assert entry["status"] == "unreadable" and "cannot reach http://127.0.0.1:9" in entry["detail"]


def test_a_query_the_server_refuses_names_the_server_and_its_error(quiet_server):
    server, local = quiet_server
    refused = diagnose(local, config_for(server.url, metrics=("not a metric",)))
    entry, = [c for c in refused["coverage"] if c["source"] == "prometheus:"]
    assert entry["status"] == "unreadable"
    assert entry["detail"].startswith(f"{server.url}: HTTP 400 from /api/v1/query: ") and "parse error" in entry["detail"]


def test_the_size_and_time_budgets_bound_the_connector(quiet_server):
    server, local = quiet_server
    tiny = diagnose(local, config_for(server.url, max_bytes=200))
    entry, = [c for c in tiny["coverage"] if c["source"] == "prometheus:"]
    assert "over the size budget" in entry["detail"]
    spent = diagnose(local, config_for(server.url, timeout=0.0))
    entry, = [c for c in spent["coverage"] if c["source"] == "prometheus:"]
    assert entry["status"] == "unreadable" and "time budget" in entry["detail"]


def test_the_series_cap_is_reported_as_truncated(tmp_path):
    job = simulated("gpu_fell_off_bus", tmp_path / "local")
    metrics = OpenMetrics()
    dcgm_series(job, metrics, with_totals=True)
    server = PrometheusServer(metrics.text())
    try:
        capped = diagnose(tmp_path / "local", config_for(server.url, max_series=1))
    finally:
        server.stop()
    statuses = {c["status"] for c in capped["coverage"] if c["source"].startswith("prometheus:")}
    assert statuses == {"truncated"}
    assert any("more than 1 changed series" in c["detail"] for c in capped["coverage"])


def test_nodes_without_changes_are_read_not_gaps(quiet_server):
    server, local = quiet_server
    quiet = diagnose(local, config_for(server.url))
    entries = [c for c in quiet["coverage"] if c["source"].startswith("prometheus:")]
    # the fixture's job had an Xid 79 then 154 on one GPU: the gauge (0 -> 154 within one scrape)
    # and the two per-Xid counters changed; nothing changed on the other nodes
    assert {c["status"] for c in entries} == {"ok"}
    assert sorted(c["detail"] for c in entries) == ["3 changes in 3 series"] + ["no series changed"] * 3


def test_sattrib_analyze_reads_the_configured_server_and_is_deterministic(quiet_server, tmp_path):
    server, local = quiet_server
    config = tmp_path / "config.yaml"
    config.write_text(f"prometheus:\n  url: {server.url}\n  timeout: 20\n", encoding="utf-8")
    env = {"SATTRIB_CONFIG": str(config), "PATH": "/usr/bin:/bin"}
    runs = [subprocess.run([*sattrib_argv(), "analyze", str(local)], capture_output=True, text=True, env=env, timeout=60)
            for _ in range(2)]
    assert runs[0].returncode == 0, runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    sources = {e["source"] for e in json.loads(runs[0].stdout)["evidence"]}
    assert any(s.startswith("prometheus:") for s in sources)
    off = subprocess.run([*sattrib_argv(), "analyze", "--no-connectors", str(local)], capture_output=True, text=True,
                         env=env, timeout=60)
    assert not any(e["source"].startswith("prometheus:") for e in json.loads(off.stdout)["evidence"])


def test_a_job_without_a_window_is_skipped_not_queried(tmp_path):
    (tmp_path / "job" / "node1").mkdir(parents=True)
    (tmp_path / "job" / "node1" / "dmesg.txt").write_text("[ 1.0] hello\n", encoding="utf-8")
    skipped = diagnose(tmp_path / "job", config_for("http://127.0.0.1:9"))
    entry, = [c for c in skipped["coverage"] if c["source"] == "prometheus:"]
    assert entry["status"] == "skipped" and "start and end" in entry["detail"]


def test_connector_settings_are_checked(tmp_path):
    from slurm_attrib.config import ConfigError, load_config

    path = tmp_path / "config.yaml"
    for text, message in [
        ("prometheus: {url: ftp://x}\n", "prometheus url must start with http:// or https://"),
        ("prometheus: {url: http://x, colour: red}\n", "prometheus: unknown key(s) colour"),
        ("prometheus: {url: http://x, node_suffix: '('}\n", "node_suffix is not a valid regex"),
        ("loki: {url: http://x}\n", "loki needs at least one entry in streams"),
        ("loki: {url: http://x, streams: [{name: k, kind: dmesg, selector: '{a=\"b\"}'}]}\n", "kind must be kernel, syslog or app"),
        ("loki: {url: http://x, streams: [{name: k, kind: kernel, selector: 'a=b'}]}\n", "must be a LogQL stream selector"),
    ]:
        path.write_text(text, encoding="utf-8")
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(path)
    assert replace(Config(), prometheus=PrometheusConfig()).prometheus.url == ""


def test_sattrib_batch_reads_the_connectors_in_its_workers(tmp_path):
    from slurm_attrib.fleet.batch import find_jobs, run_batch
    from slurm_attrib.store import Store

    job = simulated("gpu_nvlink", tmp_path / "local")
    # a spool folder is named by its job's id (batch never lets a folder name another job)
    metrics_only_copy(tmp_path / "local", tmp_path / "spool" / str(job.job_id), "NVRM: Xid")
    metrics = OpenMetrics()
    dcgm_series(job, metrics, with_totals=True)
    server = PrometheusServer(metrics.text())
    try:
        jobs, problems = find_jobs([tmp_path / "spool"])
        config = replace(config_for(server.url), results=str(tmp_path / "results"))
        summary = run_batch(jobs, Store(config.results), config, workers=2)
    finally:
        server.stop()
    assert not problems and summary.count("analysed") == 1
    row, = Store(config.results).rows()
    assert (row.domain, row.category) == ("gpu", "gpu_nvlink")


def test_a_gpu_scraped_by_address_is_found_by_the_exporters_hostname_label(tmp_path):
    """Targets listed by IP: `instance` names no node, dcgm-exporter's own Hostname label does."""
    job = simulated("gpu_fell_off_bus", tmp_path / "local")
    metrics = OpenMetrics()
    dcgm_series(job, metrics, with_totals=True)
    text = metrics.text()
    for node in job.nodes:
        text = text.replace(f'instance="{node.host}:9400"', f'instance="{node.ip}:9400"')
    assert "instance=\"dgx" not in text and "Hostname=" in text
    server = PrometheusServer(text)
    try:
        remote_dir = metrics_only_copy(tmp_path / "local", tmp_path / "metrics", "NVRM: Xid", "fallen off the bus")
        by_instance_only = diagnose(remote_dir, config_for(server.url, node_labels=("instance",)))
        both = diagnose(remote_dir, config_for(server.url))
    finally:
        server.stop()
    local = diagnose(tmp_path / "local")
    assert verdict(by_instance_only) != verdict(local)
    assert verdict(both) == verdict(local)
