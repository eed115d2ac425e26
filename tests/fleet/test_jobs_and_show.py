"""For the ML engineer: `sattrib jobs` (my recent jobs with their one-line diagnosis) and `sattrib
show JOBID --format markdown | --html FILE` over a store that `sattrib batch` filled."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_attrib.simulate import write_scenario
from slurm_attrib.store import Store

REPO = Path(__file__).resolve().parents[2]
ME = pwd.getpwuid(os.getuid()).pw_name


def _sattrib(config: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SATTRIB_CONFIG=str(config), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "slurm_attrib", *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    root = tmp_path_factory.mktemp("jobs")
    for job_id, scenario, user in (("601", "gpu_fell_off_bus", ME), ("602", "host_oom", ME), ("603", "link_down", "nobody")):
        folder = root / "spool" / job_id
        write_scenario(scenario, folder, nodes=2, ranks_per_node=2, seed=int(job_id))
        job_file = folder / "job.json"
        job_file.write_text(json.dumps({**json.loads(job_file.read_text()), "job_id": job_id, "user": user}))
    config = root / "config.yaml"
    config.write_text(f"results: {root / 'results'}\nspool: {root / 'spool'}\n")
    batch = _sattrib(config, "batch", "--workers", "1")
    assert batch.returncode == 0, batch.stdout + batch.stderr
    return config, Store(root / "results")


def test_jobs_lists_my_recent_jobs_newest_first_with_their_diagnosis(filled):
    config, store = filled
    out = _sattrib(config, "jobs")
    assert out.returncode == 0, out.stderr
    lines = [line.split("\t") for line in out.stdout.splitlines()]
    assert [fields[0] for fields in lines] == ["602", "601"]  # not job 603 (another user's)
    by_id = {fields[0]: fields for fields in lines}
    assert by_id["601"][2] == "gpu/gpu_fell_off_bus (confirmed)" and by_id["601"][4] == store.get("601").summary[:160]
    assert _sattrib(config, "jobs", "--limit", "1").stdout.split("\t")[0] == "602"
    # an administrator (root here) asks for another user's
    other = _sattrib(config, "jobs", "--user", "nobody")
    assert [line.split("\t")[0] for line in other.stdout.splitlines()] == ["603"]
    assert _sattrib(config, "jobs", "--user", "nosuchuser").stdout.strip() == "no diagnosed job of nosuchuser in the last 7d"


def test_show_as_markdown_and_as_a_page(filled, tmp_path):
    config, store = filled
    markdown = _sattrib(config, "show", "601", "--format", "markdown")
    assert markdown.returncode == 0, markdown.stderr
    assert markdown.stdout.startswith("### sattrib: job 601 ")
    assert "| **how sure** | CONFIRMED |" in markdown.stdout and "**Cause evidence**\n\n```text\n" in markdown.stdout
    page = tmp_path / "601.html"
    html = _sattrib(config, "show", "601", "--html", str(page))
    assert html.returncode == 0 and html.stdout == "", html.stderr
    assert page.read_text().startswith("<!DOCTYPE html>") and "<dt>where</dt>" in page.read_text()
    assert _sattrib(config, "show", "601", "--format", "json").stdout == store.read("601", "diagnosis.json")
