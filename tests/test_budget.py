"""The analysis budget: a child process limited in time and memory; what exceeds it still gives
a stored diagnosis that says what was read and that the analysis is incomplete."""

import gzip
import json
import os
import subprocess
import sys
import time

import pytest

from slurm_attrib.budget import Budget, incomplete_diagnosis, run_within
from slurm_attrib.config import ConfigError, load_config
from slurm_attrib.errors import InputError
from slurm_attrib.ingest.types import CoverageEntry, JobContext
from slurm_attrib.store import Store


def reads_then_sleeps(report, seconds):
    report("read")
    time.sleep(seconds)
    return "finished"


def reads_then_allocates(report, megabytes):
    report("read")
    blocks = [bytearray(1 << 20) for _ in range(megabytes)]
    return len(blocks)


def raises(report):
    raise InputError("job.json: not valid JSON")


def test_work_within_the_budget_returns_its_result():
    run = run_within(Budget(seconds=30, memory=1 << 30), reads_then_sleeps, 0)
    assert run.result == "finished" and run.partial == "read" and not run.stopped


def test_work_over_its_time_is_stopped_with_what_it_reported():
    began = time.monotonic()
    run = run_within(Budget(seconds=0.5), reads_then_sleeps, 60)
    assert time.monotonic() - began < 10
    assert run.result is None and run.partial == "read" and "stopped after 0.5 s" in run.stopped


def test_work_over_its_memory_is_stopped_with_what_it_reported():
    run = run_within(Budget(memory=512 << 20), reads_then_allocates, 2048)
    assert run.result is None and run.partial == "read" and "memory budget" in run.stopped


def test_an_error_of_the_work_is_raised_in_the_caller():
    with pytest.raises(InputError, match="not valid JSON"):
        run_within(Budget(seconds=30), raises)


def test_the_incomplete_diagnosis_says_what_was_read():
    read = [CoverageEntry("gpu01", "nodes/gpu01.json.gz/dmesg", "kernel", "ok")]
    diagnosis = incomplete_diagnosis(JobContext(job_id="7", nodes=("gpu01",)), read, "analysis stopped after 5 s")
    assert (diagnosis.domain, diagnosis.quality, diagnosis.drain) == ("unknown", "insufficient", [])
    assert [c.source for c in diagnosis.coverage] == ["nodes/gpu01.json.gz/dmesg", "analysis"]
    assert "incomplete" in diagnosis.summary and diagnosis.outcome.job_id == "7"


@pytest.mark.parametrize("line", ["analysis_max_seconds: -1", "analysis_max_seconds: soon", "analysis_max_bytes: 1000",
                                  "analysis_max_bytes: .inf", "analysis_max_seconds: true"])
def test_bad_budget_settings_are_one_line_errors(tmp_path, line):
    (tmp_path / "config.yaml").write_text(line + "\n")
    with pytest.raises(ConfigError, match="analysis_max_"):
        load_config(tmp_path / "config.yaml")


def test_batch_stores_an_incomplete_diagnosis_for_a_job_over_its_time(tmp_path):
    job = tmp_path / "jobs" / "42"
    job.mkdir(parents=True)
    (job / "job.json").write_text('{"job_id": "42", "state": "FAILED", "nodes": ["gpu01"]}')
    (job / "slurm-42.out").write_text("Traceback (most recent call last):\nValueError: boom\n")
    results = tmp_path / "results"
    (tmp_path / "config.yaml").write_text(f"results: {results}\nanalysis_max_seconds: 0.01\n")
    env = dict(os.environ, SATTRIB_CONFIG=str(tmp_path / "config.yaml"))
    proc = subprocess.run([sys.executable, "-m", "slurm_attrib", "batch", str(tmp_path / "jobs"), "--workers", "1"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert "Traceback" not in proc.stderr and "1 analysed" in proc.stdout, proc.stdout + proc.stderr
    stored = json.loads((results / "42" / "diagnosis.json").read_text())
    assert (stored["domain"], stored["quality"], stored["drain"]) == ("unknown", "insufficient", [])
    stopped = [c for c in stored["coverage"] if c["source"] == "analysis"]
    assert stopped and "stopped after 0.01 s" in stopped[0]["detail"]
    assert [r.job_id for r in Store(results).rows()] == ["42"]


def test_the_worker_stores_an_incomplete_diagnosis_for_a_job_over_its_time(tmp_path):
    from dataclasses import replace

    from slurm_attrib.config import Config
    from slurm_attrib.worker import analyse_job

    nodes = tmp_path / "spool" / "21" / "nodes"
    nodes.mkdir(parents=True)
    xid = "[ 1234.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
    bundle = {"format": "sattrib-node-bundle", "version": 1, "node": "gpu01", "job": {"nodes": ["gpu01"]},
              "sources": [{"name": "dmesg", "kind": "kernel", "status": "ok", "lines": [[n, xid] for n in range(1, 50_000)]}]}
    (nodes / "gpu01.json.gz").write_bytes(gzip.compress(json.dumps(bundle).encode()))
    config = replace(Config(), spool=str(tmp_path / "spool"), results=str(tmp_path / "results"),
                     analysis_max_seconds=0.5, late_bundle_wait=0, slurm_backend="cli")
    row = analyse_job("21", config, nodes=["gpu01"], deadline=0, backend=None, env={}, apply=False)
    stored = json.loads((tmp_path / "results" / "21" / "diagnosis.json").read_text())
    assert row.domain == "unknown" and stored["quality"] == "insufficient" and stored["drain"] == []
    stopped = [c for c in stored["coverage"] if c["source"] == "analysis"]
    assert stopped and "stopped after 0.5 s" in stopped[0]["detail"]


def writes_its_pid_then_sleeps(report, pid_file, seconds):
    pid_file.write_text(str(os.getpid()))
    time.sleep(seconds)


def test_an_interrupted_caller_takes_the_child_with_it(tmp_path):
    import signal
    import threading

    pid_file = tmp_path / "child.pid"

    def interrupt_when_started():
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    # Python turns SIGINT into KeyboardInterrupt only when it started with SIGINT at its default:
    # a suite started in the background of a non-interactive shell inherits it ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt_when_started, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_within(Budget(seconds=60), writes_its_pid_then_sleeps, pid_file, 60)
    finally:
        signal.signal(signal.SIGINT, previous)
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(int(pid_file.read_text()), 0)
