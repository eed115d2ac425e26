"""The `sattrib analyze` contract: exit codes, one-line errors, keys, determinism, text output."""

import json
import os
import subprocess
from pathlib import Path

from support import CORPUS, sattrib_argv

CONTRACT_KEYS = {"domain", "category", "culprit_nodes", "quality", "drain", "evidence", "summary"}


def run(*args, **kwargs):
    return subprocess.run([*sattrib_argv(), *args], capture_output=True, text=True, timeout=120, **kwargs)


def test_missing_path_is_one_line_exit_2(tmp_path):
    result = run("analyze", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "nope" in result.stderr and "Traceback" not in result.stderr


def test_file_instead_of_directory_is_exit_2(tmp_path):
    target = tmp_path / "file.log"
    target.write_text("hello\n")
    result = run("analyze", str(target))
    assert result.returncode == 2 and "file.log" in result.stderr


def test_invalid_job_json_names_the_file(tmp_path):
    (tmp_path / "job.json").write_text("{not json")
    output = tmp_path / "out.json"
    result = run("analyze", str(tmp_path), "--output", str(output))
    assert result.returncode == 2
    assert "job.json" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not output.exists()


def test_empty_directory_is_a_diagnosis(tmp_path):
    result = run("analyze", str(tmp_path))
    assert result.returncode == 0
    diagnosis = json.loads(result.stdout)
    assert CONTRACT_KEYS <= set(diagnosis)
    assert diagnosis["drain"] == []


def test_json_is_byte_identical_across_runs():
    case = sorted(CORPUS.iterdir())[0]
    first, second = run("analyze", str(case)), run("analyze", str(case))
    assert first.returncode == 0 and first.stdout == second.stdout


def test_output_file_and_text_format(tmp_path):
    case = next(p for p in sorted(CORPUS.iterdir()) if "xid79" in p.name)
    output = tmp_path / "d.txt"
    result = run("analyze", str(case), "--format", "text", "--output", str(output))
    assert result.returncode == 0 and result.stdout == ""
    text = output.read_text()
    assert "gpu_fell_off_bus" in text and "Evidence" in text and "dmesg.txt:" in text



def test_output_to_a_fifo_writes_into_it_and_leaves_it_a_fifo(tmp_path):
    """`--output /dev/null` or a pipe must be written to, never renamed over (that replaced
    /dev/null with a regular file once)."""
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    sample = Path(__file__).resolve().parents[1] / "slurm_attrib" / "samples" / "demo"
    result = run("analyze", str(sample), "--format", "json", "--output", str(fifo))
    reader.join(timeout=60)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(received[0])["category"] == "gpu_fell_off_bus"

def test_demo_names_the_failed_gpu():
    result = run("demo", "--format", "json")
    assert result.returncode == 0, result.stderr
    diagnosis = json.loads(result.stdout)
    assert diagnosis["domain"] == "gpu" and diagnosis["category"] == "gpu_fell_off_bus"
    assert len(diagnosis["culprit_nodes"]) == 1
    assert diagnosis["quality"] == "confirmed"
    assert [d["node"] for d in diagnosis["drain"]] == diagnosis["culprit_nodes"]
    assert diagnosis["drain"][0]["reason"].startswith("sattrib: Xid79")


def test_schema_is_json_schema():
    result = run("schema")
    schema = json.loads(result.stdout)
    assert CONTRACT_KEYS <= set(schema["properties"])
    assert set(schema["required"]) >= CONTRACT_KEYS


def test_rules_test_and_list():
    listed = run("rules", "list")
    assert listed.returncode == 0 and "gpu.xid" in listed.stdout
    tested = run("rules", "test")
    assert tested.returncode == 0, tested.stdout
    assert "examples: 0 failed" in tested.stdout
    assert tested.stdout.strip().endswith("wordings: 0 not covered as stated")
