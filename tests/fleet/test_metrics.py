"""Prometheus metrics of the store, checked by the real promtool, and the textfile written atomically."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_attrib.config import Config
from slurm_attrib.drain import plan
from slurm_attrib.engine.pipeline import analyze_path
from slurm_attrib.fleet.metrics import TEXTFILE, render_metrics, write_textfile
from slurm_attrib.simulate import write_scenario
from slurm_attrib.store import APPLIED, Store

PROMTOOL = shutil.which("promtool")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("metrics")
    store = Store(root / "results")
    for job_id, scenario in (("11", "gpu_fell_off_bus"), ("12", "link_down"), ("13", "app_exception"), ("14", "gpu_fell_off_bus")):
        write_scenario(scenario, root / job_id, nodes=4, ranks_per_node=2, seed=int(job_id))
        diagnosis = analyze_path(root / job_id)
        entries, note = plan(diagnosis, Config())
        if job_id == "14":
            entries = [{**e, "status": APPLIED} for e in entries]
        store.save(job_id, diagnosis, "t\n", uid=None, user="alice", state="FAILED", drains=entries, drain_note=note)
    return store


def _value(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{series} not in the metrics")


def test_values_follow_the_store(store):
    text = render_metrics(store, fleet_drains=1)
    culprit = store.get("11").culprit_nodes[0]
    pci = store.get("11").gpus[0]["pci_bus_id"]
    assert _value(text, 'sattrib_diagnoses_total{domain="gpu",category="gpu_fell_off_bus",quality="confirmed"}') == 2
    assert _value(text, 'sattrib_diagnoses_total{domain="application",category="app_exception",quality="likely"}') == 1
    assert _value(text, 'sattrib_drains_total{status="recommended"}') == 2  # jobs 11 and 12
    assert _value(text, 'sattrib_drains_total{status="applied"}') == 1
    assert _value(text, f'sattrib_node_hardware_attributions_total{{node="{culprit}",domain="gpu",category="gpu_fell_off_bus"}}') >= 1
    assert _value(text, f'sattrib_gpu_hardware_attributions_total{{node="{culprit}",pci_bus_id="{pci}",xid="79"}}') >= 1
    assert _value(text, "sattrib_pending_drain_recommendations") == 2
    assert _value(text, "sattrib_fleet_drain_recommendations") == 1
    assert _value(text, "sattrib_last_analysis_timestamp_seconds") == pytest.approx(max(r.analysed_at for r in store.rows()))
    assert "job_id=" not in text and "user=" not in text and "alice" not in text  # no unbounded labels


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package prometheus; contrib/testcluster/install.sh)")
def test_promtool_accepts_the_metrics_without_lint_problems(store):
    text = render_metrics(store)
    check = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), check.stdout + check.stderr
    broken = subprocess.run([PROMTOOL, "check", "metrics"], input=text.replace("sattrib_drains_total", "sattrib_drains"),
                            capture_output=True, text=True, timeout=60)
    assert broken.returncode != 0  # promtool does lint what we give it


def test_label_values_are_escaped(tmp_path):
    from slurm_attrib.fleet.metrics import _escape

    assert _escape('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_textfile_is_replaced_atomically_and_readable(tmp_path, store):
    target = write_textfile(tmp_path / "textfile", render_metrics(store))
    assert target.name == TEXTFILE and stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in target.parent.iterdir()] == [TEXTFILE]  # no temporary left behind


def test_cli_and_worker_write_the_textfile(tmp_path, store):
    config = tmp_path / "config.yaml"
    config.write_text(f"results: {store.root}\nmetrics_textfile_dir: {tmp_path / 'worker'}\n")
    env = dict(os.environ, SATTRIB_CONFIG=str(config))
    proc = subprocess.run([sys.executable, "-m", "slurm_attrib", "metrics", "--textfile", str(tmp_path / "cli")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "sattrib_diagnoses_total" in (tmp_path / "cli" / TEXTFILE).read_text()
    # the worker rewrites it after storing a diagnosis (analyse_job on a spool job folder)
    from slurm_attrib.config import load_config
    from slurm_attrib.worker import analyse_job

    spool = tmp_path / "spool"
    write_scenario("host_oom", spool / "15", nodes=2, ranks_per_node=2, seed=15)
    conf = load_config(config)
    from dataclasses import replace

    analyse_job("15", replace(conf, spool=str(spool)), nodes=[], deadline=0, backend=None, env={}, apply=False)
    text = (tmp_path / "worker" / TEXTFILE).read_text()
    assert _value(text, 'sattrib_diagnoses_total{domain="application",category="host_oom",quality="confirmed"}') == 1
