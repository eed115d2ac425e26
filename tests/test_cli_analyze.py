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


def test_neither_directory_nor_regular_file_is_exit_2(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    result = run("analyze", str(tmp_path / "pipe"))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == f"sattrib: {tmp_path / 'pipe'}: not a directory or a regular file"


def test_a_single_slurm_output_file_names_the_failing_rank(tmp_path):
    """`sattrib analyze slurm-123.out`: a logs layout holding just that file; its name gives the job
    id, and a `[rank11]` OOM names rank 11 (no rank->node map in the file: the node is not known)."""
    log = CORPUS / "039-msswift-4x4-a100-rank11-oom-watchdog" / "log.txt"
    single = tmp_path / "slurm-123.out"
    single.write_bytes(log.read_bytes())
    result = run("analyze", str(single))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["domain"], data["category"], data["outcome"]["job_id"]) == ("application", "gpu_oom", "123")
    assert (data["cause"]["rank"], data["cause"]["rank_node"]) == (11, None)
    assert {e["source"] for e in data["evidence"]} == {"slurm-123.out"}
    text = run("analyze", str(single), "--format", "text").stdout
    assert "  where    rank 11 (node not known)\n" in text
    # with NCCL's init line the rank->node map knows rank 11: its node is named
    mapped = tmp_path / "mapped.out"
    mapped.write_bytes(b"gpu03:2521735:2521735 [3] NCCL INFO comm 0x5566 rank 11 nranks 16 cudaDev 3 nvmlDev 3 "
                       b"busId 4b000 commId 0xabc - Init COMPLETE\n" + log.read_bytes())
    data = json.loads(run("analyze", str(mapped)).stdout)
    assert (data["cause"]["rank"], data["cause"]["rank_node"], data["culprit_nodes"]) == (11, "gpu03", ["gpu03"])
    assert "  where    gpu03 (rank 11)\n" in run("analyze", str(mapped), "--format", "text").stdout
    page = run("analyze", str(mapped), "--format", "html").stdout
    assert "<dt>where</dt><dd>gpu03 (rank 11)" in page


def test_markdown_for_a_github_issue(tmp_path):
    result = run("demo", "--format", "json")
    markdown = run("analyze", str(Path(__file__).resolve().parents[1] / "slurm_attrib" / "samples" / "demo"), "--format", "markdown")
    assert result.returncode == 0 and markdown.returncode == 0, markdown.stderr
    text = markdown.stdout
    assert text.startswith("### sattrib: job 4189877 FAILED, exit 1:0\n\nJob 4189877 failed, caused by Xid 79")
    assert "| **what** | gpu / gpu\\_fell\\_off\\_bus |" in text
    assert "| **where** | dgx004, GPU 0000:5d:00 (Xid 79) |" in text and "| **how sure** | CONFIRMED |" in text
    block = text.split("**Cause evidence**\n\n```text\n", 1)[1].split("\n```\n", 1)[0]
    assert block.splitlines()[:2] == ["dgx004 dgx004/journal.txt:11", "2026-12-02T16:46:53+0000 dgx004 kernel: NVRM: Xid "
                                      "(PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."]
    assert "| count | what | nodes | ranks | explained by |" in text
    assert "| 126 | collective\\_timeout | 8 | 63 | gpu.xid |" in text


def test_markdown_keeps_hostile_lines_inert(tmp_path):
    """A job's line can hold backticks, pipes, links and tags: the code fence is longer than any
    run of backticks in it, and table cells and the summary escape markup and HTML."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "slurm-9.out").write_text(
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. ```` | <img src=x onerror=alert(1)> [x](http://evil)\n")
    text = run("analyze", str(job), "--format", "markdown").stdout
    assert "`````text\n" in text and "\n`````\n" in text
    body = text.split("`````text\n", 1)[0] + text.split("\n`````\n", 1)[1]
    assert "<img" not in body and "](http" not in body


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
    assert "wordings: 0 not covered as stated" in tested.stdout
    assert tested.stdout.strip().endswith("tests: 0 failed") and " relations, " in tested.stdout


def test_a_reader_that_stops_reading_is_no_error():
    """`sattrib rules list | head -1`: the reader closes the pipe while sattrib still writes (its
    list is larger than a pipe's buffer): sattrib ends as a tool SIGPIPE ended, with nothing on
    stderr (it said `internal error: BrokenPipeError`)."""
    listing = subprocess.Popen([*sattrib_argv(), "rules", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert listing.stdout.readline()
    listing.stdout.close()
    _, stderr = listing.communicate(timeout=120)
    assert listing.returncode == 141
    assert stderr == b""


SITE_RULE = r"""id: site.acme_allocation_spent
title: The site launcher stopped the job (its project's allocation is spent)
description: ACME's launcher stops a job whose project has spent its GPU hours.
sources: [app]
match:
  contains: ['allocation spent']
  regex: 'acme-launcher: stopping job: project (?P<project>\S+) allocation spent'
event: {type: site_allocation, domain: scheduler, category: cancelled, role: cause, severity: error, strength: 2}
references: ['https://wiki.example.org/acme-launcher']
examples:
  match:
    - line: 'acme-launcher: stopping job: project ml-42 allocation spent'
      fields: {project: ml-42}
  no_match: ['acme-launcher: project ml-42 allocation 80 % spent']
"""


def test_rules_adds_a_site_rule_folder_that_reads_a_wording_the_pack_does_not(tmp_path):
    """`--rules DIR`: a site's rule for its own launcher's message makes it the cause."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "slurm-77.out").write_text("acme-launcher: stopping job: project ml-42 allocation spent\n")
    site = tmp_path / "site-rules"
    site.mkdir()
    (site / "acme.yaml").write_text(SITE_RULE)
    plain = json.loads(run("analyze", str(job)).stdout)
    assert plain["domain"] != "scheduler"
    with_site = json.loads(run("analyze", str(job), "--rules", str(site)).stdout)
    assert (with_site["domain"], with_site["category"]) == ("scheduler", "cancelled")
    assert "site.acme_allocation_spent" in with_site["rules_fired"]


def test_simulate_lists_its_scenarios_and_writes_one_the_analysis_reads_back(tmp_path):
    listed = run("simulate")
    assert listed.returncode == 0 and "gpu_fell_off_bus" in listed.stdout
    written = run("simulate", "gpu_fell_off_bus", str(tmp_path / "job"), "--nodes", "4", "--seed", "3")
    assert written.returncode == 0, written.stderr
    truth = json.loads(written.stdout)
    diagnosis = json.loads(run("analyze", str(tmp_path / "job")).stdout)
    assert (diagnosis["domain"], diagnosis["category"]) == (truth["domain"], truth["category"])
    assert diagnosis["culprit_nodes"] == truth["culprit_nodes"] and len(json.loads((tmp_path / "job" / "job.json").read_text())["nodes"]) == 4
    again = run("simulate", "gpu_fell_off_bus", str(tmp_path / "again"), "--nodes", "4", "--seed", "3")
    assert again.stdout == written.stdout  # the seed decides
