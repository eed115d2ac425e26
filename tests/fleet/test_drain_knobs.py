"""Every drain knob of the config decides, end to end through `sattrib batch --drain` and `sattrib
drain --recommend`: drain_policy off/recommend (auto: tests/slurm/test_drain_apply.py),
drain_max_nodes, systemic_threshold, repeat_window_days; and `batch --drain --force` adds the
recommendations an earlier batch without --drain recorded as skipped."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

from slurm_attrib.store import Row, Store

REPO = Path(__file__).resolve().parents[2]
ME = pwd.getpwuid(os.getuid()).pw_name
LINES = {  # three independent kernel faults at the same second: ambiguous, each node drained on its own evidence
    "gpu01": "kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "gpu02": "kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit error (DBE) "
             "has been detected on GPU in the framebuffer at partition 0, subpartition 0.",
    "gpu03": "kernel: mlx5_core 0000:0c:00.0: mlx5_port_module_event:1148:(pid 0): Port module event[error]: module 0, "
             "Cable error, High Temperature",
}


def _three_faults(root: Path, job_id: str) -> Path:
    job = root / job_id
    job.mkdir(parents=True)
    (job / "job.json").write_text(json.dumps({
        "job_id": job_id, "user": ME, "state": "FAILED", "exit_code": "1:0", "start": "2026-12-02T16:15:22",
        "end": "2026-12-02T16:58:28", "nodes": ["gpu01", "gpu02", "gpu03", "gpu04"]}))
    for node in ("gpu01", "gpu02", "gpu03", "gpu04"):
        (job / node).mkdir()
        line = LINES.get(node, "systemd[1]: Started Session 5 of User root.")
        (job / node / "journal.txt").write_text(f"2026-12-02T16:46:53+0000 {node} {line}\n")
    return job


def _setup(tmp_path: Path, **settings) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "config.yaml"
    lines = [f"results: {tmp_path / 'results'}", f"spool: {tmp_path / 'spool'}"]
    lines += [f"{key}: {value}" for key, value in settings.items()]
    config.write_text("\n".join(lines) + "\n")
    return config


def _sattrib(config: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SATTRIB_CONFIG=str(config), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "slurm_attrib", *args], capture_output=True, text=True, env=env, timeout=300)


def _recommended(config: Path) -> list[tuple[str, str]]:
    out = _sattrib(config, "drain", "--recommend")
    assert out.returncode == 0, out.stderr
    return [tuple(line.split("\t")[:2]) for line in out.stdout.splitlines() if "\t" in line]


def _batch_three_faults(tmp_path: Path, **settings) -> tuple[Path, Row]:
    config = _setup(tmp_path, **settings)
    _three_faults(tmp_path / "jobs", "500")
    batch = _sattrib(config, "batch", str(tmp_path / "jobs"), "--drain", "--workers", "1")
    assert batch.returncode == 0, batch.stdout + batch.stderr
    return config, Store(tmp_path / "results").get("500")


def test_drain_max_nodes_decides_how_many_nodes_one_job_drains(tmp_path):
    config, row = _batch_three_faults(tmp_path / "two", drain_max_nodes=2)
    assert row.quality == "ambiguous" and row.culprit_nodes == ["gpu01", "gpu02", "gpu03"]
    assert [e["status"] for e in row.drains] == ["skipped"] * 3
    assert row.drain_note == "3 nodes to drain is over drain_max_nodes=2: nothing drained"
    assert _recommended(config) == []
    config, row = _batch_three_faults(tmp_path / "three", drain_max_nodes=3)
    assert [e["status"] for e in row.drains] == ["recommended"] * 3 and row.drain_note == ""
    assert _recommended(config) == [("gpu01", "job 500"), ("gpu02", "job 500"), ("gpu03", "job 500")]


def test_systemic_threshold_decides_when_a_job_is_systemic(tmp_path):
    config, row = _batch_three_faults(tmp_path / "low", drain_max_nodes=4, systemic_threshold=2)
    assert row.drain_note == "systemic: 3 suspect node(s) (threshold 2); nothing drained"
    assert _recommended(config) == []
    config, row = _batch_three_faults(tmp_path / "high", drain_max_nodes=4, systemic_threshold=3)
    assert len(_recommended(config)) == 3


def test_drain_policy_off_records_and_recommends_nothing(tmp_path):
    config, row = _batch_three_faults(tmp_path / "off", drain_max_nodes=3, drain_policy="off")
    assert [e["status"] for e in row.drains] == ["skipped"] * 3 and row.drain_note == "drain_policy off: nothing drained"
    _repeat_rows(Store(tmp_path / "off" / "results"), "gpu07", days_ago=(5, 1))
    assert _recommended(config) == []  # neither the job's nor the fleet's
    config, row = _batch_three_faults(tmp_path / "recommend", drain_max_nodes=3, drain_policy="recommend")
    _repeat_rows(Store(tmp_path / "recommend" / "results"), "gpu07", days_ago=(5, 1))
    assert ("gpu07", "fleet 11,12") in _recommended(config) and ("gpu01", "job 500") in _recommended(config)


def _repeat_rows(store: Store, node: str, days_ago: tuple[float, ...]) -> None:
    now = time.time()
    store.put_many([
        Row(job_id=str(11 + n), user="alice", uid=1000, state="FAILED", domain="gpu", category="gpu_fell_off_bus",
            quality="likely", culprit_nodes=[node], drains=[], drain_note="", summary="", analysed_at=now, owner_ok=True,
            path="/x", job_end=now - ago * 86400, cause_time=now - ago * 86400, trusted=True)
        for n, ago in enumerate(days_ago)])


def test_repeat_window_days_decides_which_jobs_make_a_repeat_offender(tmp_path):
    for window, expected in ((7, []), (14, [("gpu07", "fleet 11,12")])):
        config = _setup(tmp_path / str(window), repeat_window_days=window)
        _repeat_rows(Store(tmp_path / str(window) / "results"), "gpu07", days_ago=(10, 1))
        assert _recommended(config) == expected
        report = json.loads(_sattrib(config, "report", "--format", "json").stdout)
        assert report["window_days"] == window and len(report["repeat_offenders"]) == len(expected)


def test_batch_drain_force_recommends_what_a_batch_without_drain_skipped(tmp_path):
    config = _setup(tmp_path, drain_max_nodes=3)
    _three_faults(tmp_path / "jobs", "500")
    assert _sattrib(config, "batch", str(tmp_path / "jobs"), "--workers", "1").returncode == 0
    store = Store(tmp_path / "results")
    assert [e["status"] for e in store.get("500").drains] == ["skipped"] * 3 and _recommended(config) == []
    again = _sattrib(config, "batch", str(tmp_path / "jobs"), "--drain", "--force", "--workers", "1")
    assert again.returncode == 0 and "1 analysed" in again.stdout
    assert [e["status"] for e in store.get("500").drains] == ["recommended"] * 3
    assert len(_recommended(config)) == 3
    # what is recommended (or applied) stays as it is on the next forced run
    assert _sattrib(config, "batch", str(tmp_path / "jobs"), "--drain", "--force", "--workers", "1").returncode == 0
    assert [e["status"] for e in store.get("500").drains] == ["recommended"] * 3
