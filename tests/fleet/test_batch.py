"""`sattrib batch`: finding jobs, parallel re-analysis into the store, skipping what is done, the summary."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_attrib.config import Config
from slurm_attrib.fleet.batch import find_jobs, in_shard, run_batch
from slurm_attrib.ruleset.loader import pack_version
from slurm_attrib.simulate import write_scenario
from slurm_attrib.store import Store

SCENARIOS = ("gpu_fell_off_bus", "link_down", "app_exception", "host_oom", "success")


@pytest.fixture(scope="module")
def spool(tmp_path_factory):
    root = tmp_path_factory.mktemp("spool")
    for number, scenario in enumerate(SCENARIOS, 101):
        write_scenario(scenario, root / str(number), nodes=4, ranks_per_node=2, seed=number)
        job_file = root / str(number) / "job.json"  # a spool folder is named by its job's id
        job_file.write_text(json.dumps({**json.loads(job_file.read_text()), "job_id": str(number)}))
    return root


def _config(tmp_path, spool) -> Config:
    return Config(results=str(tmp_path / "results"), spool=str(spool))


def _sattrib(config_file: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SATTRIB_CONFIG=str(config_file))
    return subprocess.run([sys.executable, "-m", "slurm_attrib", *args], capture_output=True, text=True, env=env, timeout=300)


def test_a_spool_is_analysed_in_parallel_then_skipped(tmp_path, spool, index_url):
    config = _config(tmp_path, spool)
    jobs, problems = find_jobs([spool])
    assert [j.job_id for j in jobs] == ["101", "102", "103", "104", "105"] and not problems
    store = Store(config.results, index_url=index_url)
    first = run_batch(jobs, store, config, workers=2)
    assert first.count("analysed") == 5 and not first.changed()
    assert dict(first.by_domain()) == {"gpu": 1, "network": 1, "application": 2, "none": 1}
    rows = {r.job_id: r for r in store.rows()}
    assert {r.rule_pack for r in rows.values()} == {pack_version()}
    assert rows["101"].domain == "gpu" and rows["101"].evidence == str(spool / "101")
    # batch never drains: the Xid job's recommendation is recorded as skipped
    assert [e["status"] for e in rows["101"].drains] == ["skipped"]
    second = run_batch(jobs, store, config, workers=2)
    assert second.count("skipped") == 5 and second.count("analysed") == 0


def test_a_diagnosis_from_an_older_rule_pack_is_redone_and_reported_changed(tmp_path, spool):
    config = _config(tmp_path, spool)
    store = Store(config.results)
    jobs, _ = find_jobs([spool])
    run_batch(jobs[:2], store, config, workers=1)
    old = store.get("102")
    store.put(type(old)(**{**vars(old), "rule_pack": "0.0.1+old", "domain": "unknown", "category": "no_evidence"}))
    summary = run_batch(jobs, store, config, workers=1)  # 101 done, 102 redone, 103-105 new
    assert [o.status for o in summary.outcomes] == ["skipped", "analysed", "analysed", "analysed", "analysed"]
    [changed] = summary.changed()
    assert changed.job_id == "102" and changed.before[:2] == ("unknown", "no_evidence") and changed.after[0] == "network"


def test_a_job_whose_evidence_arrived_after_its_analysis_is_analysed_again(tmp_path):
    """A node's bundle forwarded from its local spool after the job was analysed (the shared
    spool did not answer at the job's end): batch, without --force, analyses the job again."""
    root = tmp_path / "spool"
    write_scenario("app_exception", root / "201", nodes=2, ranks_per_node=2, seed=1)
    job_file = root / "201" / "job.json"
    job_file.write_text(json.dumps({**json.loads(job_file.read_text()), "job_id": "201"}))
    config = _config(tmp_path, root)
    store = Store(config.results)
    jobs, _ = find_jobs([root])
    assert run_batch(jobs, store, config).count("analysed") == 1
    analysed_at = store.get("201").analysed_at
    late = root / "201" / "gpu02" / "late.txt"
    late.parent.mkdir(exist_ok=True)
    late.write_text("2026-12-02T13:04:06,123456+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=4121, name=python, GPU has fallen off the bus.\n")
    os.utime(late, (analysed_at + 30, analysed_at + 30))  # within the clocks' margin: not yet
    assert run_batch(jobs, store, config).count("skipped") == 1
    os.utime(late, (analysed_at + 600, analysed_at + 600))
    again = run_batch(jobs, store, config)
    assert again.count("analysed") == 1 and store.get("201").analysed_at > analysed_at


def test_shards_split_the_jobs_without_overlap():
    ids = [str(n) for n in range(1000, 1300)] + ["77_3", "78+1"]
    shards = [{i for i in ids if in_shard(i, (k, 3))} for k in range(3)]
    assert set.union(*shards) == set(ids) and sum(len(s) for s in shards) == len(ids)
    assert all(len(s) > 60 for s in shards)


def test_cli_summary_progress_and_a_broken_job(tmp_path, spool):
    source = tmp_path / "jobs"
    source.mkdir()
    for name in ("101", "103"):
        os.symlink(spool / name, source / name)
    broken = source / "104"
    broken.mkdir()
    (broken / "job.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "config.yaml").write_text(f"results: {tmp_path / 'results'}\nspool: {spool}\n", encoding="utf-8")
    proc = _sattrib(tmp_path / "config.yaml", "batch", str(source), "--workers", "2")
    assert proc.returncode == 1, proc.stderr
    assert "2 analysed, 0 skipped (already stored with this rule pack), 1 failed" in proc.stdout
    assert "job 104: failed:" in proc.stdout and "job.json: not valid JSON" in proc.stdout
    assert "batch: 3/3 jobs" in proc.stderr  # not a terminal: plain progress lines
    assert "Traceback" not in proc.stderr
    # a results tree is a source too: its index names the evidence of each job
    again = _sattrib(tmp_path / "config.yaml", "batch", str(tmp_path / "results"), "--dry-run")
    assert again.returncode == 0 and again.stdout.split() == ["101", str(source / "101"), "103", str(source / "103")]


def test_selection_by_job_id_and_shard(tmp_path, spool):
    (tmp_path / "config.yaml").write_text(f"results: {tmp_path / 'results'}\nspool: {spool}\n", encoding="utf-8")
    proc = _sattrib(tmp_path / "config.yaml", "batch", "--jobs", "101,105,999", "--dry-run")
    assert proc.stdout.split()[::2] == ["101", "105"]
    assert "1 selected job(s) have no evidence folder here: 999" in proc.stderr
    shares = [_sattrib(tmp_path / "config.yaml", "batch", "--dry-run", "--shard", f"{k}/2").stdout.split()[::2] for k in range(2)]
    assert sorted(shares[0] + shares[1]) == ["101", "102", "103", "104", "105"]
    bad = _sattrib(tmp_path / "config.yaml", "batch", "--shard", "2/2")
    assert bad.returncode == 2 and "INDEX/COUNT" in bad.stderr


def test_an_interrupted_run_resumes_where_it_stopped(tmp_path):
    import signal
    import time as clock

    spool = tmp_path / "spool"
    for number in range(301, 313):
        write_scenario(SCENARIOS[number % len(SCENARIOS)], spool / str(number), nodes=8, ranks_per_node=8, seed=number)
        job_file = spool / str(number) / "job.json"
        job_file.write_text(json.dumps({**json.loads(job_file.read_text()), "job_id": str(number)}))
    (tmp_path / "config.yaml").write_text(f"results: {tmp_path / 'results'}\nspool: {spool}\n")
    env = dict(os.environ, SATTRIB_CONFIG=str(tmp_path / "config.yaml"))
    run = subprocess.Popen([sys.executable, "-m", "slurm_attrib", "batch", "--workers", "1"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = Store(tmp_path / "results")
    deadline = clock.monotonic() + 120
    while store.count() < 2 and clock.monotonic() < deadline and run.poll() is None:
        clock.sleep(0.05)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=120)
    if run.returncode == 0:
        pytest.skip("the batch finished before the interrupt arrived")
    assert run.returncode == 130 and "interrupted: run again to go on" in out and "Traceback" not in err
    done = store.count()
    assert 2 <= done < 12
    again = _sattrib(tmp_path / "config.yaml", "batch", "--workers", "2")
    assert again.returncode == 0
    assert f"{12 - done} analysed, {done} skipped" in again.stdout and store.count() == 12


@pytest.mark.skipif(not shutil.which("script"), reason="util-linux script(1) is needed for a terminal")
def test_on_a_terminal_a_progress_bar(tmp_path, spool):
    (tmp_path / "config.yaml").write_text(f"results: {tmp_path / 'results'}\nspool: {spool}\n")
    command = f"{sys.executable} -m slurm_attrib batch --workers 1"
    proc = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, timeout=300,
                          env=dict(os.environ, SATTRIB_CONFIG=str(tmp_path / "config.yaml")))
    assert proc.returncode == 0, proc.stdout
    assert b"\r[####" in proc.stdout and b"] 5/5 jobs" in proc.stdout and b"batch: " not in proc.stdout
