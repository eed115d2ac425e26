"""The Loki connector: a simulated job whose kernel and syslog lines live only in Loki (pushed
through the push API) gives the diagnosis its local files give.  The server is a stand-in for
Loki's HTTP API (loki_standin.py says why Grafana Loki itself cannot run here)."""

from __future__ import annotations


import pytest
from connector_support import STREAMS, cause_lines, diagnose, push_job, remove_node_logs, simulated, verdict
from loki_standin import LokiStandIn

from slurm_attrib.config import Config, LokiConfig, LokiStream


def config_for(server: LokiStandIn, **settings) -> Config:
    return Config(loki=LokiConfig(url=server.url, streams=STREAMS, **settings))


@pytest.fixture
def loki():
    server = LokiStandIn()
    yield server
    server.stop()


@pytest.mark.parametrize("scenario", ["gpu_fell_off_bus", "gpu_firmware", "link_down", "pcie_error", "kernel_fault", "host_hardware_other"])
def test_a_job_whose_node_logs_live_only_in_loki_gives_the_local_diagnosis(tmp_path, loki, scenario):
    job = simulated(scenario, tmp_path / "job")
    local = diagnose(tmp_path / "job")
    assert push_job(loki, job) > 0
    remove_node_logs(tmp_path / "job")
    assert verdict(diagnose(tmp_path / "job")) != verdict(local)  # the node logs were what made it
    remote = diagnose(tmp_path / "job", config_for(loki))
    assert verdict(remote) == verdict(local)
    causes = [e for e in cause_lines(remote) if e["source"].startswith("loki:")]
    assert causes and causes[0]["node"] in local["culprit_nodes"]
    # the line's Loki time, not a clock of the analysis: the same second as the local line
    local_times = {(e["rule"], e["time"][:19]) for e in cause_lines(local)}
    assert {(e["rule"], e["time"][:19]) for e in causes} <= local_times
    # one query per stream for all nodes, through the node label
    assert len(loki.queries) == len(STREAMS)
    assert all('host=~`(?:' in q["query"] for q in loki.queries)


def test_pages_are_followed_and_the_line_cap_keeps_the_newest(tmp_path, loki):
    job = simulated("gpu_fell_off_bus", tmp_path / "job")
    push_job(loki, job)
    remove_node_logs(tmp_path / "job")
    whole = diagnose(tmp_path / "job", config_for(loki))
    paged = diagnose(tmp_path / "job", config_for(loki, page_lines=7))
    assert paged["evidence"] == whole["evidence"]
    assert len(loki.queries) > 2 * len(STREAMS)
    counts = {c["source"]: c["detail"] for c in whole["coverage"] if c["source"].startswith("loki:")}
    capped = diagnose(tmp_path / "job", config_for(loki, max_lines=5))
    truncated = [c for c in capped["coverage"] if c["status"] == "truncated"]
    assert truncated and all("more than 5 lines: the oldest were not read" in c["detail"] for c in truncated)
    assert sum(int(c["detail"].split()[0]) for c in capped["coverage"] if c["source"].startswith("loki:") and "/kernel" in c["source"]) == 5
    assert all(detail.endswith("lines from Loki") for detail in counts.values())


def test_a_failing_or_slow_server_is_recorded_in_coverage_and_the_diagnosis_stands(tmp_path, loki):
    simulated("gpu_fell_off_bus", tmp_path / "job")
    local = diagnose(tmp_path / "job")
    loki.fail_with = 503
    failed = diagnose(tmp_path / "job", config_for(loki))
    assert verdict(failed) == verdict(local)
    entry, = [c for c in failed["coverage"] if c["source"] == "loki:"]
    assert entry["status"] == "unreadable"
    assert entry["detail"] == f"{loki.url}: HTTP 503 from /loki/api/v1/query_range: rpc error: code = Unavailable desc = too many outstanding requests"
    loki.fail_with, loki.delay = 0, 1.0
    slow = diagnose(tmp_path / "job", config_for(loki, timeout=0.3))
    entry, = [c for c in slow["coverage"] if c["source"] == "loki:"]
    assert "no answer from /loki/api/v1/query_range within the time budget" in entry["detail"]


def test_the_configured_headers_are_sent(tmp_path, loki):
    loki.tenant = "hpc"
    job = simulated("link_down", tmp_path / "job")
    push_job(loki, job)
    remove_node_logs(tmp_path / "job")
    refused = diagnose(tmp_path / "job", config_for(loki))
    assert [c["detail"] for c in refused["coverage"] if c["source"] == "loki:"] == [f"{loki.url}: HTTP 401 from /loki/api/v1/query_range: no org id"]
    accepted = diagnose(tmp_path / "job", config_for(loki, headers=(("X-Scope-OrgID", "hpc"),)))
    assert accepted["domain"] == "network" and not [c for c in accepted["coverage"] if c["source"] == "loki:"]


def test_a_query_loki_refuses_is_reported_with_its_message(tmp_path, loki):
    simulated("link_down", tmp_path / "job")
    bad = (LokiStream(name="kernel", kind="kernel", selector='{job="x"}', pipeline="| json"),)
    refused = diagnose(tmp_path / "job", Config(loki=LokiConfig(url=loki.url, streams=bad)))
    entry, = [c for c in refused["coverage"] if c["source"] == "loki:"]
    assert "HTTP 400" in entry["detail"] and "parse error" in entry["detail"]


def test_lines_with_a_header_of_their_own_keep_it_behind_the_loki_time(tmp_path, loki):
    """A scraped kern.log: the line carries its own syslog header, without a year or zone."""
    job = simulated("gpu_fell_off_bus", tmp_path / "job")
    remove_node_logs(tmp_path / "job")
    culprit, at = None, float("inf")
    for node in job.nodes:
        for t, _, message in job.kernel[node.host]:
            if "NVRM: Xid" in message:
                culprit, at = node.host, min(at, t)
                loki.push({"job": "varlog", "host": node.host},
                          [(int(t * 1e9), f"Dec  2 00:00:00 {node.host} kernel: {message}")])
    stream = (LokiStream(name="kern.log", kind="kernel", selector='{job="varlog"}'),)
    diagnosis = diagnose(tmp_path / "job", Config(loki=LokiConfig(url=loki.url, streams=stream)))
    assert diagnosis["culprit_nodes"] == [culprit] and diagnosis["category"] == "gpu_fell_off_bus"
    cause = cause_lines(diagnosis)[0]
    assert cause["source"] == f"loki:{culprit}/kern.log"
    assert cause["text"].split(" ", 1)[1].startswith("Dec  2 00:00:00 ")
    from slurm_attrib.engine.timefmt import unix

    assert abs(unix(cause["time"]) - at) < 0.01  # the Loki time, not the header's midnight


def test_hostile_entries_are_cut_and_kept_on_one_line(tmp_path, loki):
    """A megabyte entry, embedded newlines, binary bytes: each stays one line of bounded length."""
    job = simulated("gpu_fell_off_bus", tmp_path / "job")
    local = diagnose(tmp_path / "job")
    push_job(loki, job)
    remove_node_logs(tmp_path / "job")
    host = job.nodes[0].host
    at = int((job.start + 60) * 1e9)
    loki.push({"job": "systemd-journal", "transport": "kernel", "host": host},
              [(at, "x" * 1_000_000), (at + 1, "first\nsecond line of one entry"),
               (at + 2, "\x00\x01\xff\ufffd binary")])
    assert verdict(diagnose(tmp_path / "job", config_for(loki))) == verdict(local)
    from slurm_attrib.connectors import gather
    from slurm_attrib.engine.pipeline import load_any

    evidence = load_any(tmp_path / "job")
    gather(evidence, config_for(loki))
    kernel = next(f for f in evidence.files if f.rel == f"loki:{host}/kernel").data.decode()
    lines = kernel.splitlines()
    assert max(len(line) for line in lines) < 4200
    assert any(line.endswith(f"{host} kernel: first second line of one entry") for line in lines)


def test_sattrib_connectors_shows_what_each_server_holds_for_a_node(tmp_path, loki):
    import os
    import subprocess
    import time

    from support import sattrib_argv

    now = time.time()
    loki.push({"job": "systemd-journal", "transport": "kernel", "host": "dgx007"},
              [(int((now - 120) * 1e9), "mlx5_core 0000:0c:00.0: Port module event: module 0, Cable plugged"),
               (int((now - 60) * 1e9), "NVRM: GPU at PCI:0000:18:00: GPU-0a1b2c3d-0000-1111-2222-333344445555")])
    config = tmp_path / "config.yaml"
    config.write_text(
        f"loki:\n  url: {loki.url}\n  streams:\n"
        "    - {name: kernel, kind: kernel, selector: '{job=\"systemd-journal\", transport=\"kernel\"}'}\n"
        "prometheus: {url: 'http://127.0.0.1:9'}\n", encoding="utf-8")
    env = {**os.environ, "SATTRIB_CONFIG": str(config)}
    run = subprocess.run([*sattrib_argv(), "connectors", "--node", "dgx007", "--since", "10m"], capture_output=True,
                         text=True, env=env, timeout=60)
    lines = run.stdout.splitlines()
    assert run.returncode == 1, run.stderr  # Prometheus could not be read
    assert any(line.split()[:3] == ["loki:dgx007/kernel", "ok", "2"] for line in lines), lines
    assert any(line.startswith("prometheus:") and "unreadable" in line and "cannot reach" in line for line in lines), lines
    config.write_text("results: /tmp\n", encoding="utf-8")
    none = subprocess.run([*sattrib_argv(), "connectors", "--node", "dgx007"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert none.returncode == 2 and "no connector configured" in none.stderr


def test_a_large_job_is_read_in_queries_of_bounded_length(loki):
    from slurm_attrib.connectors.loki import NODES_PER_QUERY, read_streams

    nodes = [f"node{i:04d}" for i in range(2 * NODES_PER_QUERY + 10)]
    for node in (nodes[0], nodes[NODES_PER_QUERY + 3], nodes[-1]):
        loki.push({"job": "systemd-journal", "transport": "kernel", "host": node}, [(1_000_000_000_000, f"hello from {node}")])
    result = read_streams(LokiConfig(url=loki.url, streams=STREAMS), nodes, 900.0, 1100.0)
    assert len(loki.queries) == 3 * len(STREAMS)
    assert max(len(q["query"]) for q in loki.queries) < 3000
    kernel = result.streams["kernel"]
    assert sorted(n for n, lines in kernel.items() if lines.entries) == [nodes[0], nodes[NODES_PER_QUERY + 3], nodes[-1]]
    assert set(kernel) == set(nodes)
