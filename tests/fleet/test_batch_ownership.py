"""`sattrib batch` never lets a folder choose which stored job it replaces, nor whose job a new
one is: real folders (chowned to `nobody`, so most tests need root), a real store."""

from __future__ import annotations

import json
import os
import pwd
import shutil
from pathlib import Path

import pytest

from slurm_attrib.config import Config
from slurm_attrib.fleet.batch import find_jobs, read_job_list, run_batch
from slurm_attrib.simulate import write_scenario
from slurm_attrib.store import Store

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="folders of another user need root (chown)")


def _job(folder: Path, scenario: str, **job_json) -> Path:
    write_scenario(scenario, folder, nodes=2, ranks_per_node=2, seed=7)
    path = folder / "job.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **job_json}))
    return folder


def _give(folder: Path, user: pwd.struct_passwd) -> None:
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid)


@pytest.fixture
def setting(tmp_path):
    config = Config(results=str(tmp_path / "results"), spool=str(tmp_path / "spool"))
    store = Store(config.results)
    # the real job 4242 of root, analysed from a root-owned spool folder: an Xid
    run_batch(find_jobs([_job(tmp_path / "spool" / "4242", "gpu_fell_off_bus", job_id="4242", user="root")])[0], store, config)
    assert store.get("4242").domain == "gpu" and store.get("4242").uid == 0
    return tmp_path, config, store


def test_a_folder_named_by_a_job_id_cannot_claim_another(setting):
    tmp_path, config, store = setting
    forged = _job(tmp_path / "mine" / "777", "app_exception", job_id="4242", user="root")
    jobs, problems = find_jobs([forged])
    assert jobs == [] and "job.json names job '4242', the folder job 777" in problems[0]
    jobs, problems = find_jobs([tmp_path / "mine"])  # as a folder of job folders
    assert jobs == [] and "the folder job 777" in problems[0]
    assert store.get("4242").domain == "gpu"


def test_a_job_list_cannot_point_a_job_at_another_folder(setting):
    tmp_path, _, _ = setting
    other = _job(tmp_path / "spool" / "5555", "app_exception", job_id="5555", user="root")
    listing = tmp_path / "jobs.tsv"
    listing.write_text(f"4242\t{other}\n5555\t{other}\n")
    jobs, problems = read_job_list(listing)
    assert [j.job_id for j in jobs] == ["5555"] and "is job 5555, not 4242" in problems[0]


def test_evidence_naming_another_user_does_not_replace_a_stored_job(setting):
    tmp_path, config, store = setting
    folder = tmp_path / "elsewhere" / "4242"
    _job(folder, "app_exception", job_id="4242", user="nobody")
    summary = run_batch(find_jobs([folder])[0], store, config, force=True)
    [outcome] = summary.outcomes
    assert outcome.status == "failed" and "stored for user root" in outcome.error and "names user nobody" in outcome.error
    assert store.get("4242").domain == "gpu" and store.get("4242").user == "root"


@as_root
def test_a_users_folder_does_not_replace_someone_elses_job(setting):
    tmp_path, config, store = setting
    nobody = pwd.getpwnam("nobody")
    folder = tmp_path / "home" / "run1"  # not named by a job id: job.json names the job
    _job(folder, "app_exception", job_id="4242", user="root")
    _give(folder, nobody)
    summary = run_batch(find_jobs([folder])[0], store, config, force=True)
    [outcome] = summary.outcomes
    assert outcome.status == "failed" and f"belongs to uid {nobody.pw_uid}" in outcome.error
    assert store.get("4242").domain == "gpu"


@as_root
def test_a_new_job_from_a_users_folder_is_that_users(setting):
    tmp_path, config, store = setting
    nobody = pwd.getpwnam("nobody")
    claims_root = _job(tmp_path / "home" / "6001", "app_exception", job_id="6001", user="root")
    unnamed = _job(tmp_path / "home" / "6002", "app_exception", job_id="6002")
    json_file = unnamed / "job.json"
    json_file.write_text(json.dumps({k: v for k, v in json.loads(json_file.read_text()).items() if k != "user"}))
    for folder in (claims_root, unnamed):
        _give(folder, nobody)
    summary = run_batch(find_jobs([tmp_path / "home"])[0], store, config)
    status = {o.job_id: (o.status, o.error) for o in summary.outcomes}
    assert status["6001"][0] == "failed" and "names user root: not stored" in status["6001"][1]
    assert store.get("6001") is None
    assert status["6002"][0] == "analysed"
    row = store.get("6002")
    assert (row.uid, row.user) == (nobody.pw_uid, "nobody")


def test_the_batch_users_own_folders_still_replace(setting):
    """Re-analysis of root's spool by root (the normal case) goes on replacing."""
    tmp_path, config, store = setting
    summary = run_batch(find_jobs([tmp_path / "spool"])[0], store, config, force=True)
    assert [o.status for o in summary.outcomes] == ["analysed"]
    shutil.rmtree(tmp_path / "spool")
