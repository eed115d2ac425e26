"""`sattrib batch` on the real test cluster: the work split over a Slurm job array whose tasks
store into one results index, and jobs selected through sacct by time and state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_attrib.simulate import write_scenario
from slurm_attrib.store import Store

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = ("gpu_fell_off_bus", "link_down", "app_exception", "host_oom", "success", "pcie_error", "gpu_oom")
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


def _spool(root: Path, job_ids: list[str]) -> Path:
    spool = root / "spool"
    for job_id, scenario in zip(job_ids, SCENARIOS):
        write_scenario(scenario, spool / job_id, nodes=4, ranks_per_node=2, seed=int(job_id) % 1000)
        job_file = spool / job_id / "job.json"
        job_file.write_text(json.dumps({**json.loads(job_file.read_text()), "job_id": job_id}))
    return spool


def _world_readable(path: Path) -> None:
    for parent in [path, *path.parents]:
        if parent == Path("/"):
            break
        os.chmod(parent, os.stat(parent).st_mode | 0o755)


def _sattrib(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_attrib", *args], capture_output=True, text=True, env=env, timeout=300)


def _wait_array(cluster, array_id: str, tasks: int, timeout: float = 120) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        out = cluster.run("sacct", "-j", array_id, "-X", "-n", "-P", "-o", "JobID,State", check=False).stdout
        states = {line.split("|")[0]: line.split("|")[1].split()[0] for line in out.splitlines() if "|" in line}
        if len(states) == tasks and all(s in FINAL for s in states.values()):
            return states
        time.sleep(1)
    raise AssertionError(f"array {array_id} not done in {timeout} s: {states}")


def test_a_job_array_splits_the_work_into_one_store(slurm_cluster, tmp_path):
    root = Path(tmp_path)
    _world_readable(root)
    job_ids = [str(n) for n in range(5001, 5008)]
    spool = _spool(root, job_ids)
    config = root / "config.yaml"
    config.write_text(f"results: {root / 'results'}\nspool: {spool}\n")
    env = dict(slurm_cluster.env, SATTRIB_CONFIG=str(config), PYTHONPATH=str(REPO))
    proc = _sattrib(env, "batch", "--slurm-array", "3", "--sbatch-arg=--time=5", "--sbatch-arg=--partition=gpu")
    assert proc.returncode == 0, proc.stderr
    array_id = proc.stdout.split("submitted job array ")[1].split()[0]
    states = _wait_array(slurm_cluster, array_id, 3)
    assert set(states.values()) == {"COMPLETED"}, states
    rows = {r.job_id: r for r in Store(root / "results").rows()}
    assert sorted(rows) == job_ids
    # the same answers as one local run with the same rule pack
    local = root / "local.yaml"
    local.write_text(f"results: {root / 'results-local'}\nspool: {spool}\n")
    assert _sattrib(dict(env, SATTRIB_CONFIG=str(local)), "batch", "--workers", "1").returncode == 0
    expected = {r.job_id: (r.domain, r.category, r.culprit_nodes, r.rule_pack) for r in Store(root / "results-local").rows()}
    assert {j: (r.domain, r.category, r.culprit_nodes, r.rule_pack) for j, r in rows.items()} == expected
    # every task did its own share: the task logs name disjoint counts that add up
    logs = sorted(Path(root / "results" / "batch").glob("*/task-*.out"))
    analysed = [int(p.read_text().split(" analysed,")[0].split()[-1]) for p in logs]
    assert len(logs) == 3 and sum(analysed) == len(job_ids)
    # run again: every task finds its share done
    again = _sattrib(env, "batch")
    assert again.returncode == 0 and "0 analysed, 7 skipped" in again.stdout


def test_jobs_are_selected_through_sacct_by_time_and_state(slurm_cluster, tmp_path):
    failed = slurm_cluster.sbatch("exit 3\n", nodes=1, job_name="batch-sel-fail")
    completed = slurm_cluster.sbatch("true\n", nodes=1, job_name="batch-sel-ok")
    assert slurm_cluster.wait_job(failed) == "FAILED" and slurm_cluster.wait_job(completed) == "COMPLETED"
    spool = _spool(Path(tmp_path), [str(failed), str(completed)])
    config = Path(tmp_path) / "config.yaml"
    config.write_text(f"results: {tmp_path / 'results'}\nspool: {spool}\n")
    env = dict(slurm_cluster.env, SATTRIB_CONFIG=str(config), PYTHONPATH=str(REPO))
    chosen = _sattrib(env, "batch", "--since", "now-1hours", "--state", "FAILED", "--dry-run")
    assert chosen.returncode == 0, chosen.stderr
    assert chosen.stdout.split()[::2] == [str(failed)]
    both = _sattrib(env, "batch", "--since", "now-1hours", "--dry-run")
    assert both.stdout.split()[::2] == [str(failed), str(completed)], both.stderr
    # slurmdbd records a short job's partition with its start record, which may come after its end
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(slurm_cluster.sacct(j, "Partition")["Partition"] != "gpu" for j in (failed, completed)):
        time.sleep(0.5)
    in_gpu = _sattrib(env, "batch", "--since", "now-1hours", "--partition", "gpu", "--dry-run")
    assert in_gpu.stdout.split()[::2] == [str(failed), str(completed)], in_gpu.stderr
    elsewhere = _sattrib(env, "batch", "--since", "now-1hours", "--partition", "cpu", "--dry-run")
    assert elsewhere.returncode == 0 and elsewhere.stdout.split() == [], elsewhere.stderr
