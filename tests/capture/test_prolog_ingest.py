"""Prolog record + IB deltas, import cost, hostlists/patterns, and load_spool_job round trip."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROLOG, REPO, source_of
from slurm_attrib.capture.common import expand_output_pattern, valid_job_id, valid_node
from slurm_attrib.hostlist import expand as expand_hostlist_py
from slurm_attrib.ingest.bundle import BundleSource, is_spool_job_dir, load_spool_job

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def fake_sysfs(root: Path, link_downed: int, state: str) -> None:
    port = root / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True, exist_ok=True)
    (port / "counters" / "link_downed").write_text(f"{link_downed}\n")
    (port / "counters" / "symbol_error").write_text("7\n")
    (port / "counters" / "port_rcv_errors").write_text("0\n")
    (port / "state").write_text(state + "\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    gpu = root / "proc" / "driver" / "nvidia" / "gpus" / "0000:3b:00.0"
    gpu.mkdir(parents=True, exist_ok=True)
    (gpu / "information").write_text("Model: \t NVIDIA H100\nDevice Minor: \t 2\nGPU UUID: \t GPU-1234\n")


def test_prolog_record_and_ib_deltas(node):
    fake_sysfs(node.tmp, 0, "4: ACTIVE")
    node.source(name="ib_counters", kind="sysfs")
    rc, elapsed = node.run(PROLOG)
    assert rc == 0 and elapsed < 6
    record = json.loads((node.local / "prolog" / "4242.json").read_text())
    assert record["format"] == "sattrib-prolog-record" and record["job_id"] == "4242"
    assert record["ib"][0]["counters"]["link_downed"] == 0
    assert record["gpus"]["proc"][0]["minor"] == "2"
    fake_sysfs(node.tmp, 3, "1: DOWN")
    rc, _ = node.run()
    assert rc == 0
    bundle = node.bundle()
    assert bundle["job"]["start_from"] == "prolog" and bundle["job"]["start"] == record["start"]
    port = bundle["counters"]["ib"][0]
    assert port["state"] == "1: DOWN"
    assert port["counters"]["link_downed"] == {"start": 0, "end": 3, "delta": 3}
    assert port["counters"]["symbol_error"]["delta"] == 0
    ib = source_of(bundle, "ib_counters")
    assert ib["status"] == "ok" and ib["kind"] == "sysfs"
    assert "link_downed=3 (+3 since prolog)" in ib["lines"][0][1]
    assert bundle["gpus"]["proc"][0]["pci"] == "0000:3b:00.0"
    assert not (node.local / "prolog" / "4242.json").exists()  # consumed


def test_epilog_without_prolog_record_reports_it(node):
    fake_sysfs(node.tmp, 1, "4: ACTIVE")
    node.source(name="ib_counters", kind="sysfs")
    node.run()
    bundle = node.bundle()
    assert source_of(bundle, "ib_counters")["counters"][0]["counters"]["link_downed"]["delta"] is None
    assert any("start time" in e for e in bundle["capture"]["errors"])


FORBIDDEN = ("pydantic", "jinja2", "click")


def test_capture_imports_only_what_it_needs(node, tmp_path):
    node.source(name="kernel", kind="kernel", path=str(tmp_path / "k.log"))
    (tmp_path / "k.log").write_text(XID + "\n")
    code = (
        "import sys, os\n"
        "from slurm_attrib.capture.epilog import Epilog\n"
        "e = Epilog(); e.run()\n"
        "import slurm_attrib.capture.prolog, slurm_attrib.ingest.bundle\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}]\n"
        "print('BAD', bad)\n"
        "print('WRITTEN', e.written.get('spool'))\n"
    )
    env = {"SATTRIB_CONFIG": str(node.write_config()), **node.env, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert "BAD []" in done.stdout, done.stdout + done.stderr
    assert "WRITTEN shared" in done.stdout
    # and -X importtime of the epilog module names none of them either
    t = subprocess.run([sys.executable, "-X", "importtime", "-c", "import slurm_attrib.capture.epilog"], env=env, capture_output=True, text=True)
    assert not any(f" {m}" in line for line in t.stderr.splitlines() for m in FORBIDDEN if line.rstrip().endswith(m))


def test_hostlist_expander():
    assert expand_hostlist_py("gpu[01-03,07],cpu1") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu1"]
    assert expand_hostlist_py("n[8-10]") == ["n8", "n9", "n10"]
    assert expand_hostlist_py("rack[1-2]-n[01-02]") == ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
    assert expand_hostlist_py("a,b") == ["a", "b"]
    with pytest.raises(ValueError):
        expand_hostlist_py("gpu[01-")


def test_validation_and_patterns():
    assert valid_job_id("123") and valid_job_id("123_4") and valid_job_id("123+1")
    for bad in ("", "../1", "12a", "1/2", "123_", "1 2"):
        assert not valid_job_id(bad)
    assert valid_node("gpu-01.rack") and not valid_node("a/b") and not valid_node("..")
    ctx = {"job_id": "77", "user": "bob"}
    assert expand_output_pattern("/h/%u/out-%j-%N-%n-%A_%a.%%.%5j", ctx, "gpu01") == "/h/bob/out-77-gpu01-0-77_4294967294.%.00077"
    from slurm_attrib.capture.common import CaptureError

    with pytest.raises(CaptureError):
        expand_output_pattern("%x.out", ctx, "gpu01")


def test_load_spool_job_round_trip(node):
    kernel = node.tmp / "kernel-gpu01.log"
    kernel.write_text("".join(f"filler {i}\n" for i in range(1, 500)) + XID + "\nend\n")
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    node.source(name="syslog", kind="syslog", command=["no-such-tool-sattrib"])
    node.env["SLURM_JOB_NODELIST"] = "gpu[01-03]"
    node.run()
    job_dir = node.spool / "4242"
    (job_dir / "nodes" / "gpu03.json.gz").write_bytes(b"\x1f\x8bnot really gzip")
    assert is_spool_job_dir(job_dir) and not is_spool_job_dir(node.tmp)
    ev = load_spool_job(job_dir)
    assert ev.job.job_id == "4242" and ev.job.user == "alice" and ev.job.exit_code == "1:0"
    assert ev.job.nodes == ("gpu01", "gpu02", "gpu03") and ev.job.end and ev.job.state is None
    (src,) = [f for f in ev.files if f.rel == "nodes/gpu01.json.gz/kernel"]
    assert isinstance(src, BundleSource) and src.node == "gpu01" and src.kind == "kernel" and src.trusted
    data_lines = src.data.decode().splitlines()
    i = next(i for i, line in enumerate(data_lines) if "NVRM: Xid" in line)
    assert src.line_numbers[i] == 500 and src.original_line(i + 1) == 500
    assert len(src.line_numbers) == len(data_lines)
    cov = {(c.node, c.source): c for c in ev.coverage}
    assert cov[("gpu01", "nodes/gpu01.json.gz/kernel")].status == "ok"
    assert cov[("gpu01", "nodes/gpu01.json.gz/syslog")].status == "missing"
    assert cov[("gpu02", "nodes/gpu02.json.gz")].status == "missing"
    assert cov[("gpu03", "nodes/gpu03.json.gz")].status == "unreadable"


def test_load_spool_job_app_sources_untrusted_and_bad_content(tmp_path):
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    bundle = {
        "format": "sattrib-node-bundle",
        "version": 1,
        "node": "n1",
        "job": {"job_id": "9", "nodes": ["n1"], "start": 10.0, "end": 20.0, "start_from": "prolog"},
        "sources": [
            {"name": "job_stdout", "kind": "app", "status": "ok", "lines": [[7, "hello"], [9, "world"]]},
            {"name": "weird", "kind": "nope", "status": "ok", "lines": [[1, "x"]]},
            "not a dict",
        ],
    }
    (nodes / "n1.json.gz").write_bytes(gzip.compress(json.dumps(bundle).encode()))
    (nodes / "n2.json.gz").write_bytes(gzip.compress(b'{"format": "other"}'))
    (nodes / "n3.json.gz").write_bytes(gzip.compress(b"[1, 2]"))
    ev = load_spool_job(tmp_path)
    (app,) = ev.files
    assert app.kind == "app" and not app.trusted and app.line_numbers == [7, 9] and app.data == b"hello\nworld\n"
    assert ev.job.start == 10.0 and ev.job.end == 20.0
    statuses = {c.node: c.status for c in ev.coverage if c.source.endswith(".json.gz")}
    assert statuses == {"n2": "unreadable", "n3": "unreadable"}
    assert load_spool_job(tmp_path / "nothing").files == []


def test_the_faulty_gpu_is_named_by_the_uuid_the_node_reported(node):
    """The bundle's GPU list (/proc/driver/nvidia UUIDs; nvidia-smi's serials when the prolog ran it)
    labels the GPU an Xid names, so the fleet can follow it when it moves."""
    from slurm_attrib.engine.pipeline import analyze_path

    uuid = "GPU-5d5b6c1e-8a3f-2c4b-9d7e-1f2a3b4c5d6e"
    fake_sysfs(node.tmp, 0, "4: ACTIVE")
    info = node.tmp / "proc" / "driver" / "nvidia" / "gpus" / "0000:3b:00.0" / "information"
    info.write_text(f"Model: \t NVIDIA H100\nDevice Minor: \t 2\nGPU UUID: \t {uuid}\n")
    kernel = node.tmp / "kernel-gpu01.log"
    kernel.write_text("2024-04-09T01:21:38,000000+00:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
                      "name=<unknown>, GPU has fallen off the bus.\n")
    node.source(name="kernel", kind="kernel", path=str(kernel))
    assert node.run()[0] == 0
    [gpu] = analyze_path(node.bundle_path().parents[1]).gpus
    assert (gpu.pci_bus_id, gpu.xid, gpu.uuid, gpu.serial) == ("0000:3b:00", 79, uuid, None)


def test_ib_counter_rises_become_links_of_the_port(node):
    """link_downed rising between prolog and epilog, and a port left DOWN, are read by rules on
    the ib_counters lines: the diagnosis lists the port for the fleet's fabric patterns."""
    from slurm_attrib.engine.pipeline import analyze_path

    fake_sysfs(node.tmp, 0, "4: ACTIVE")
    node.source(name="ib_counters", kind="sysfs")
    assert node.run(PROLOG)[0] == 0
    fake_sysfs(node.tmp, 3, "1: DOWN")
    assert node.run()[0] == 0
    diagnosis = analyze_path(node.bundle_path().parents[1])
    links = {(link.type, link.device, link.port, link.count) for link in diagnosis.links}
    assert ("ib_counter_link_downed", "mlx5_0", 1, 3) in links and ("ib_port_down", "mlx5_0", 1, 1) in links
    assert all(link.node == "gpu01" and link.trusted for link in diagnosis.links)
