"""The fast endings of tests/data/termination, live: each job runs again on the real cluster with
the same program (tests/data/termination/record.py), our node Epilog captures it, and sattrib's
diagnosis of the spool folder (with job.json written as the worker writes it) must be the one the
recorded case expects.  A recording that no longer matches what Slurm prints fails here.

The endings run at once (4 CPUs per node), so the module takes about as long as its slowest job.
The jobs are given `--output` explicitly: with Slurm's default output file, 22.05 sets no
SLURM_JOB_STDOUT in the Epilog and the job's output is not captured.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from support import epilog_test_config

from slurm_attrib.cli import render_json
from slurm_attrib.engine.pipeline import analyze_path

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "data" / "termination"
_spec = importlib.util.spec_from_file_location("termination_record", CASES / "record.py")
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)

# case: (nodes, the job's program, what is done to the running job)
LIVE = {
    "01-exit-0": ("gpu01,gpu02", record.TASK_OK, ""),
    "03-one-rank-exit-3": ("gpu03,gpu04", record.TASK_RANK_EXIT, ""),
    "04-one-rank-sigsegv": ("gpu01,gpu02", record.TASK_RANK_SEGV, ""),
    "07-scancel": ("gpu03,gpu04", record.TASK_SLEEP, "scancel"),
    "09-scancel-signal-term": ("gpu01,gpu02", record.TASK_SLEEP, "scancel --signal=TERM"),
}
_DIR: dict = {}


def _workdir() -> Path:
    if "dir" not in _DIR:
        d = Path(tempfile.mkdtemp(prefix="sattrib-term-", dir="/tmp"))
        for sub in ("", "spool", "local", "bin"):
            (d / sub).mkdir(exist_ok=True)
            (d / sub).chmod(0o755)
        config = epilog_test_config(d)
        (d / "config.yaml").write_text(json.dumps(config, indent=1))  # JSON is YAML
        hook = d / "bin" / "sattrib-epilog"
        hook.write_text(f"#!/bin/sh\nSATTRIB_CONFIG={d / 'config.yaml'}; SATTRIB_PYTHON={sys.executable}\n"
                        f"export SATTRIB_CONFIG SATTRIB_PYTHON\nexec {REPO / 'epilog' / 'sattrib-epilog'}\n")
        hook.chmod(0o755)
        _DIR["dir"] = d
    return _DIR["dir"]


@pytest.fixture(scope="module")
def slurm_cluster_config():
    return {"epilog": _workdir() / "bin" / "sattrib-epilog", "extra_env": {"SATTRIB_NODE_CPUS": "4"}}


def _wait_running(cluster, job: int, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while cluster.run("squeue", "-h", "-j", str(job), "-o", "%T", check=False).stdout.strip() != "RUNNING":
        assert time.monotonic() < end, f"job {job} not RUNNING after {timeout}s"
        time.sleep(0.3)


def _wait_started(output: Path, ranks: int, timeout: float = 60) -> None:
    """Every task has printed its first line: on a loaded machine srun may still be launching them
    seconds after the job is RUNNING, and a signal sent then ends a step that printed nothing."""
    end = time.monotonic() + timeout
    while (output.read_text(errors="replace").count(" started") if output.exists() else 0) < ranks:
        assert time.monotonic() < end, f"{output}: not every task started after {timeout}s"
        time.sleep(0.3)


def _wait_bundles(folder: Path, nodes: list[str], timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not all((folder / "nodes" / f"{n}.json.gz").exists() for n in nodes):
        assert time.monotonic() < end, f"no bundle from every node of {nodes} in {folder} after {timeout}s"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def diagnoses(slurm_cluster, monkeypatch_module):
    """Every live ending run at once; {case: (diagnosis dict, Slurm state)}."""
    from slurm_attrib.slurm.cli import CliBackend

    monkeypatch_module.setenv("SLURM_CONF", slurm_cluster.conf)
    t0 = time.monotonic()
    jobs = {}
    for case, (nodes, program, _) in LIVE.items():
        jobs[case] = slurm_cluster.sbatch(program + "\n", user=slurm_cluster.test_user, job_name=case, nodes=2,
                                          ntasks_per_node=1, nodelist=nodes,
                                          output=str(slurm_cluster.jobs_dir / "slurm-%j.out"))
    for case, (_, _, action) in LIVE.items():
        if action:
            _wait_running(slurm_cluster, jobs[case])
            _wait_started(slurm_cluster.jobs_dir / f"slurm-{jobs[case]}.out", ranks=2)
            slurm_cluster.run(*action.split(), str(jobs[case]), user=slurm_cluster.test_user)
    out = {}
    for case, job in jobs.items():
        final = slurm_cluster.wait_job(job, timeout=60)
        folder = _workdir() / "spool" / str(job)
        _wait_bundles(folder, LIVE[case][0].split(","))
        info = CliBackend().job_info(str(job))
        (folder / "job.json").write_text(json.dumps(info.record(), indent=1) + "\n")  # as the worker does
        out[case] = (json.loads(render_json(analyze_path(folder))), final)
        d = out[case][0]
        print(f"\n{case}: job {job} {final}: {d['domain']}/{d['category']} {d['quality']} {d['culprit_nodes']} | {d['summary']}")
    print(f"\ntermination matrix live: {len(LIVE)} endings in {time.monotonic() - t0:.0f} s")
    yield out
    shutil.rmtree(_workdir(), ignore_errors=True)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _expected(case: str) -> dict:
    return yaml.safe_load((CASES / case / "expected.yaml").read_text(encoding="utf-8"))


def _as_param(case: str):
    reason = _expected(case).get("known_miss")
    return pytest.param(case, marks=pytest.mark.xfail(reason=reason, strict=True)) if reason else case


@pytest.mark.parametrize("case", [_as_param(case) for case in LIVE])
def test_live_ending_reads_as_its_recording(diagnoses, case):
    expected = _expected(case)
    got, final = diagnoses[case]
    assert final == expected["outcome_state"], (final, got["summary"])
    assert got["outcome"]["state"] == expected["outcome_state"], got["outcome"]
    assert got["domain"] == expected["domain"], got["summary"]
    assert got["category"] in expected.get("category_allowed", [expected["category"]]), got["summary"]
    if "quality_allowed" in expected:
        assert got["quality"] in expected["quality_allowed"], got["summary"]
    # the live nodes differ from the recording's: a culprit is the node of rank 1, the second one listed
    if expected["culprit_nodes"]:
        assert got["culprit_nodes"] == [LIVE[case][0].split(",")[1]], got["summary"]
    else:
        assert got["culprit_nodes"] == [], got["summary"]
    assert got["drain"] == [], got["drain"]
