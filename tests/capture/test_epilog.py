"""The real epilog/sattrib-epilog script: normal capture and the epilog fault matrix."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import time
from pathlib import Path


from conftest import EPILOG, source_of

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
BOUND = 4  # epilog_timeout in the test config
SLACK = 1.5  # interpreter start-up and shell wrapper


def kernel_file(tmp: Path, xid_at: int = 400, total: int = 1000) -> Path:
    lines = [f"2024-04-09T01:{i // 60 % 60:02d}:{i % 60:02d},000000+00:00 gpu01 kernel: filler line {i}" for i in range(1, total + 1)]
    lines[xid_at - 1] = f"2024-04-09T01:21:38,000000+00:00 gpu01 kernel: {XID}"
    path = tmp / "kernel-gpu01.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_normal_capture_keeps_xid_with_original_line_number(node):
    kernel_file(node.tmp)
    out = node.tmp / "slurm-4242.out"
    out.write_text("step 1\n" * 300 + "Traceback (most recent call last):\n  File x\nRuntimeError: NCCL error\n" + "tail\n")
    node.env["SLURM_JOB_STDOUT"] = str(node.tmp / "slurm-%j.out")
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    node.source(name="job_stdout", kind="app")
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    bundle = node.bundle()
    assert bundle["format"] == "sattrib-node-bundle" and bundle["version"] == 1
    assert bundle["node"] == "gpu01"
    assert bundle["job"]["job_id"] == "4242" and bundle["job"]["nodes"] == ["gpu01", "gpu02"]
    assert bundle["job"]["exit_code"] == "1:0" and bundle["job"]["user"] == "alice"
    kernel = source_of(bundle, "kernel")
    assert kernel["status"] == "ok" and kernel["lines_total"] == 1000
    lines = dict(kernel["lines"])
    assert XID in lines[400]
    assert 1 in lines and 1000 in lines  # first and last line for time anchoring
    assert 398 in lines and 401 in lines  # context
    assert kernel["lines_kept"] < 60  # pre-filtered
    app = source_of(bundle, "job_stdout")
    assert app["status"] == "ok" and app["kind"] == "app"
    assert any("Traceback" in text and n == 301 for n, text in app["lines"])
    assert bundle["capture"]["duration"] < BOUND
    # no temp files left behind
    assert [p.name for p in node.bundle_path().parent.iterdir()] == ["gpu01.json.gz"]


def test_python_engine_matches_grep(node):
    kernel_file(node.tmp, xid_at=10, total=200)
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    node.run()
    grep_lines = source_of(node.bundle(), "kernel")["lines"]
    node.bundle_path().unlink()
    node.run(extra_env={"SATTRIB_FILTER_ENGINE": "python"})
    src = source_of(node.bundle(), "kernel")
    assert src["filter"] == "python"
    assert src["lines"] == grep_lines


def test_unwritable_spool_falls_back_to_local(node):
    kernel_file(node.tmp)
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    blocker = node.tmp / "not-a-dir"
    blocker.write_text("x")
    node.config["spool"] = str(blocker)
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    bundle = node.bundle(local=True)
    assert bundle["capture"]["spool"] == "local"
    assert any("shared spool" in e for e in bundle["capture"]["errors"])
    assert XID in dict(source_of(bundle, "kernel")["lines"])[400]


def test_a_bundle_left_in_the_local_spool_is_forwarded_by_the_next_epilog(node):
    """Nothing captured is lost: job 4242's bundle went to the local spool (the shared one was not
    writable); the node's next epilog, with the shared spool back, moves it there."""
    kernel_file(node.tmp)
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    blocker = node.tmp / "not-a-dir"
    blocker.write_text("x")
    node.config["spool"] = str(blocker)
    assert node.run()[0] == 0
    stranded = node.bundle_path(local=True)
    assert stranded.is_file()
    (node.local / "junk").mkdir()  # not a job id: left alone
    (node.local / "4240").symlink_to(node.tmp)  # a symlink: never followed
    node.env["SLURM_JOB_ID"] = "4243"
    assert node.run()[0] == 0  # the shared spool still unwritable: the stranded bundle stays
    assert stranded.is_file() and node.bundle_path(local=True).is_file()

    node.config["spool"] = str(node.spool)
    node.env["SLURM_JOB_ID"] = "4244"
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    assert node.bundle()["job"]["job_id"] == "4244"
    for job in ("4242", "4243"):
        node.env["SLURM_JOB_ID"] = job
        forwarded = node.bundle()
        assert forwarded["job"]["job_id"] == job and forwarded["capture"]["spool"] == "local"
        assert XID in dict(source_of(forwarded, "kernel")["lines"])[400]
        assert not (node.local / job).exists()
    assert (node.local / "junk").is_dir() and (node.local / "4240").is_symlink()


def test_symlinked_job_dir_is_not_followed(node):
    kernel_file(node.tmp)
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    elsewhere = node.tmp / "elsewhere"
    elsewhere.mkdir()
    (node.spool / "4242").symlink_to(elsewhere)
    rc, _ = node.run()
    assert rc == 0
    assert list(elsewhere.iterdir()) == []  # nothing written through the symlink
    assert node.bundle(local=True)["capture"]["spool"] == "local"


def test_missing_commands_and_paths(node):
    node.source(name="kernel", kind="kernel", command=["/nonexistent/dmesg"])
    node.source(name="syslog", kind="syslog", command=["no-such-tool-sattrib"])
    node.source(name="nvidia_smi", kind="nvidia_smi", path=str(node.tmp / "nope.txt"))
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    bundle = node.bundle()
    for name in ("kernel", "syslog", "nvidia_smi"):
        assert source_of(bundle, name)["status"] == "missing", name


def _leftover(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


def test_hanging_commands_are_bounded_and_killed(node):
    kernel_file(node.tmp)
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"))
    node.source(name="syslog", kind="syslog", command=["sleep", "107.25"], timeout=30)
    node.source(name="nvidia_smi", kind="nvidia_smi", command=["sh", "-c", "trap '' TERM; echo started; sleep 108.25; echo never"], timeout=30)
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    bundle = node.bundle()
    assert source_of(bundle, "syslog")["status"] == "timeout"
    smi = source_of(bundle, "nvidia_smi")
    assert smi["status"] == "timeout" and smi["lines"] == [[1, "started"]]
    assert source_of(bundle, "kernel")["status"] == "ok"  # the others are unaffected
    time.sleep(0.2)
    assert _leftover("107.25") == [] and _leftover("108.25") == []


def test_per_source_timeout(node):
    node.source(name="syslog", kind="syslog", command=["sleep", "30"], timeout=0.5)
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < 2.5
    assert source_of(node.bundle(), "syslog")["status"] == "timeout"


def test_huge_sources_are_capped(node):
    node.config["bundle_max_bytes"] = 2 * 1024 * 1024
    # 1 GB without a newline, from a command: read to its end (or the time bound), the line cut
    node.source(name="kernel", kind="kernel", command=["head", "-c", "1G", "/dev/zero"], max_bytes=4 * 1024 * 1024)
    # endless matching lines: killed at the time bound, kept lines bounded by the bundle share
    node.source(name="syslog", kind="syslog", command=["yes", XID], max_bytes=8 * 1024 * 1024)
    # a 1 GB sparse file with lines at both ends: only the newest max_bytes are scanned
    big = node.tmp / "big.log"
    with open(big, "wb") as f:
        f.write(b"early line\n" * 1000)
        f.seek(1 << 30)
        f.write(b"\nafter the hole\n" + XID.encode() + b"\nlast\n")
    node.source(name="nvidia_smi", kind="nvidia_smi", path=str(big), max_bytes=1024 * 1024)
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    assert node.bundle_path().stat().st_size < 2 * 1024 * 1024
    bundle = node.bundle()
    kernel = source_of(bundle, "kernel")
    assert kernel["status"] in ("ok", "timeout") and kernel["bytes_read"] > 4 * 1024 * 1024
    assert kernel["lines_kept"] == 1 and len(kernel["lines"][0][1]) <= 4096
    syslog = source_of(bundle, "syslog")
    assert syslog["status"] == "timeout"
    assert all(XID in text for _, text in syslog["lines"][1:-1])  # the last one is cut at the bound
    nums = [n for n, _ in syslog["lines"]]
    assert nums == sorted(nums) and nums[-1] == syslog["lines_total"] and nums[1] > 1000  # newest survive
    sparse = source_of(bundle, "nvidia_smi")
    assert sparse["status"] in ("truncated", "timeout")
    if sparse["line_base_known"]:
        lines = {text: n for n, text in sparse["lines"]}
        assert lines[XID] == 1003 and lines["last"] == 1004


def test_garbage_bytes(node):
    path = node.tmp / "garbage.log"
    junk = bytes(range(256)) * 40
    path.write_bytes(junk + b"\n\xff\xfe\x00 " + XID.encode() + b" \xc3\x28\n" + junk)
    node.source(name="kernel", kind="kernel", path=str(path))
    rc, _ = node.run()
    assert rc == 0
    kernel = source_of(node.bundle(), "kernel")
    assert kernel["status"] == "ok"
    hits = [n for n, text in kernel["lines"] if "NVRM: Xid" in text]
    assert hits == [kernel["lines"][[n for n, _ in kernel["lines"]].index(hits[0])][0]]
    assert json.dumps(node.bundle())  # valid JSON, text decoded


def test_a_file_read_whole_over_its_share_says_so_once(node):
    node.config["bundle_max_bytes"] = 64 * 1024
    (node.tmp / "kernel.log").write_text("".join(f"kernel: line {i} {XID}\n" for i in range(1, 5001)))
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel.log"))
    rc, _ = node.run()
    assert rc == 0
    kernel = source_of(node.bundle(), "kernel")
    assert kernel["status"] == "ok" and kernel["lines"][-1][0] == 5000
    assert kernel["detail"] == f"{5000 - kernel['lines_kept'] + 1} older kept lines dropped (bundle share full)"


def test_bundle_over_its_limit_drops_older_kept_lines(node):
    """Control characters take six bytes each in JSON: kept lines within their share can still
    make the bundle too big, and then the older half of the biggest source goes, its first line kept."""
    limit = 256 * 1024
    node.config["bundle_max_bytes"] = limit
    lines = [f"kernel: line {i} {XID} " + "\x01" * 100 for i in range(1, 2001)]
    (node.tmp / "kernel.log").write_text("\n".join(lines) + "\n")
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel.log"))
    rc, _ = node.run()
    assert rc == 0
    with gzip.open(node.bundle_path()) as f:
        assert len(f.read()) <= limit
    kernel = source_of(node.bundle(), "kernel")
    assert kernel["status"] == "truncated" and "older kept lines dropped (bundle_max_bytes)" in kernel["detail"]
    nums = [n for n, _ in kernel["lines"]]
    assert nums[0] == 1 and nums[-1] == 2000 and nums[1:] == list(range(nums[1], 2001)) and nums[1] > 1000
    assert kernel["lines_kept"] == len(nums)
    assert all(text == lines[n - 1] for n, text in kernel["lines"])


def test_sigkill_during_write_leaves_no_partial_bundle(node):
    kernel_file(node.tmp, total=20000)
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel-%N.log"), prefilter=False)
    env = {"SATTRIB_CONFIG": str(node.write_config()), **node.env}
    nodes_dir = node.bundle_path().parent
    for delay in (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.6):
        proc = subprocess.Popen([str(EPILOG)], env=env, start_new_session=True)
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if nodes_dir.is_dir():
            for p in nodes_dir.iterdir():
                if p.name.endswith(".json.gz"):
                    with gzip.open(p) as f:
                        assert json.load(f)["format"] == "sattrib-node-bundle"
                else:
                    assert p.name.startswith(".")
    # and a complete run afterwards still produces the bundle
    rc, _ = node.run()
    assert rc == 0 and node.bundle()["node"] == "gpu01"


def test_invalid_job_id_writes_nothing(node):
    node.env["SLURM_JOB_ID"] = "../../etc"
    rc, _ = node.run()
    assert rc == 0
    assert list(node.spool.iterdir()) == []
    assert not node.local.exists()


def test_broken_config_still_exits_zero(node, tmp_path):
    """...and says so in the local spool's hook-failures.log (the wrapper reads local_spool's line)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"local_spool: {node.local}\nspool: [unclosed\n")
    node.local.mkdir(mode=0o750)
    env = {**node.env, "SATTRIB_CONFIG": str(bad)}
    done = subprocess.run([str(EPILOG)], env=env, timeout=30, capture_output=True)
    assert done.returncode == 0
    assert f"config: {bad}: not valid YAML" in (node.local / "hook-failures.log").read_text()


def test_broken_interpreter_still_exits_zero(node):
    rc, _ = node.run(extra_env={"SATTRIB_PYTHON": "/nonexistent/python3"})
    assert rc == 0


def test_job_output_only_on_batch_host_and_checked(node):
    out = node.tmp / "out.txt"
    out.write_text("Traceback (most recent call last):\n")
    node.env["SLURM_JOB_STDOUT"] = str(out)
    node.source(name="job_stdout", kind="app")
    node.env["SLURMD_NODENAME"] = "gpu02"
    node.run()
    assert source_of(node.bundle(node="gpu02"), "job_stdout")["status"] == "skipped"
    # on the batch host a symlink is refused
    node.env["SLURMD_NODENAME"] = "gpu01"
    link = node.tmp / "link.txt"
    link.symlink_to(out)
    node.env["SLURM_JOB_STDOUT"] = str(link)
    node.run()
    assert source_of(node.bundle(), "job_stdout")["status"] == "forbidden"
    # a file owned by someone else is refused
    node.env["SLURM_JOB_STDOUT"] = str(out)
    node.env["SLURM_JOB_UID"] = "12345"
    if os.getuid() == 0:
        os.chown(out, 54321, 54321)
        node.run()
        assert source_of(node.bundle(), "job_stdout")["status"] == "forbidden"


def test_fabric_managers_own_log_is_kept_as_the_daemons_word(node):
    """NVSwitch systems: the built-in fabricmanager source (here pointed at a test file) keeps
    Fabric Manager's SXid lines as a daemon's, and the analysis reads them as trusted, timed by the
    log's own `[Dec 02 2026 13:04:06]` stamps."""
    from slurm_attrib.capture.sources import default_sources
    from slurm_attrib.engine.pipeline import judge_path

    builtin = next(s for s in default_sources() if s.name == "fabricmanager")
    assert (builtin.path, builtin.kind, builtin.provenance) == ("/var/log/fabricmanager.log", "app", "daemon")
    log = node.tmp / "fabricmanager.log"
    log.write_text("[Dec 02 2026 12:58:00] [INFO] [tid 800] Successfully configured all the available NVSwitches\n" * 50
                   + "[Dec 02 2026 13:04:06] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on NVSwitch "
                     "pci bus id 00000000:86:00.0 physical id 3 port 33\n")
    node.source(name="fabricmanager", kind="app", path=str(log), provenance="daemon")
    rc, _ = node.run()
    assert rc == 0
    kept = source_of(node.bundle(), "fabricmanager")
    assert kept["status"] == "ok" and kept["provenance"] == "daemon"
    assert any("NVSwitch fatal error 20034" in text for _, text in kept["lines"])
    _, events = judge_path(node.spool / "4242")
    fault = next(e for e in events if e.rule_id == "gpu.fabricmanager_nvswitch_error")
    assert fault.trusted and fault.node == "gpu01" and fault.time is not None


def test_a_journal_of_roots_senders_says_so_and_its_daemons_lines_act(node):
    """The journal source read with `_UID=0` (here a command printing what it would) records that
    root sent every line, and slurmd's own `GPU is lost` line there drains the node."""
    line = "2026-12-02T13:04:06.000000+00:00 gpu01 slurmd[4242]: error: Failed to get UUID of GPU: GPU is lost"
    node.source(name="syslog", kind="syslog", command=["sh", "-c", f"echo '{line}'"], senders="root")
    rc, _ = node.run()
    assert rc == 0
    journal = source_of(node.bundle(), "syslog")
    assert (journal["status"], journal["provenance"], journal["senders"]) == ("ok", "daemon", "root")
    from slurm_attrib.engine.pipeline import analyze_path

    diagnosis = analyze_path(node.spool / "4242")
    assert diagnosis.category == "gpu_fell_off_bus" and [d.node for d in diagnosis.drain] == ["gpu01"]


def test_builtin_default_sources_run_on_this_machine(node):
    """No source config at all: the built-in sources run (whatever this machine has) in the bound."""
    node.config.pop("sources")
    rc, elapsed = node.run()
    assert rc == 0 and elapsed < BOUND + SLACK
    names = {s["name"] for s in node.bundle()["sources"]}
    assert {"kernel", "syslog", "nvidia_smi", "ib_counters", "flight_recorder"} <= names
    for src in node.bundle()["sources"]:
        assert src["status"] in ("ok", "empty", "missing", "forbidden", "timeout", "truncated", "error", "skipped")


def test_command_output_over_its_cap_keeps_the_newest_lines_with_their_numbers(node):
    """journalctl prints the oldest lines first: the end of the job, where failures are, is
    past any byte cap on a node with a large journal."""
    journal = node.tmp / "journal.txt"
    lines = [f"2024-04-09T01:{i // 60 % 60:02d}:{i % 60:02d}+0000 gpu01 kernel: filler line {i}" for i in range(1, 200_001)]
    lines[99] = f"2024-04-09T01:00:00+0000 gpu01 kernel: {XID}"  # line 100
    lines[199_899] = "2024-04-09T01:21:38+0000 gpu01 kernel: mlx5_core 0000:0c:00.0 ib0: Link down"  # line 199,900
    journal.write_text("\n".join(lines) + "\n")
    assert journal.stat().st_size > 8 * 1024 * 1024
    node.source(name="kernel", kind="kernel", command=["cat", str(journal)], max_bytes=1024 * 1024)
    rc, _ = node.run()
    assert rc == 0
    kernel = source_of(node.bundle(), "kernel")
    assert kernel["status"] == "ok" and kernel["lines_total"] == 200_000
    assert kernel["bytes_read"] == journal.stat().st_size
    kept = dict(kernel["lines"])
    assert "ib0: Link down" in kept[199_900] and XID in kept[100]
    assert kept[200_000].endswith("filler line 200000") and kept[199_898].endswith("filler line 199898")


def nccl_init(host: str, rank: int, nranks: int, comm: str) -> str:
    return (f"{host}:4242:4300 [{rank % 8}] NCCL INFO comm {comm} rank {rank} nranks {nranks} cudaDev {rank % 8} "
            f"nvmlDev {rank % 8} busId {rank % 8 + 1}b000 commId 0x8f2a9c1d2e3f4a5b - Init COMPLETE")


def test_job_output_over_its_share_keeps_the_rank_map(node):
    """NCCL maps ranks to hosts at start-up, the oldest lines of the output: the first line of
    each rank is kept apart when later kept lines overflow the source's share."""
    world = [nccl_init(f"gpu{rank // 8 + 1:02d}", rank, 64, "0x55d4f0a0b2c0") for rank in range(64)]
    tensor_parallel = [nccl_init(f"gpu{rank // 8 + 1:02d}", rank % 8, 8, "0x66d4f0a0b2c1") for rank in range(64)]
    warnings = [f"[rank{i % 64}]:Traceback (most recent call last): {i}" for i in range(20_000)]
    out = node.tmp / "slurm-4242.out"
    out.write_text("\n".join(["start", *world, *tensor_parallel, *warnings, "end"]) + "\n")
    node.env["SLURM_JOB_STDOUT"] = str(out)
    node.config["bundle_max_bytes"] = 1024 * 1024
    node.source(name="job_stdout", kind="app", max_bytes=256 * 1024)
    rc, _ = node.run()
    assert rc == 0
    app = source_of(node.bundle(), "job_stdout")
    assert "older kept lines dropped" in app["detail"] and "64 rank/address map lines kept apart" in app["detail"]
    kept = dict(app["lines"])
    for rank, line in enumerate(world):
        assert kept[rank + 2] == line  # every world rank, at its own line number
    assert not any(65 < n <= 129 for n in kept)  # later lines of the same ranks are ordinary lines
    total = 2 + 64 + 64 + 20_000
    assert kept[total] == "end" and kept[total - 1].endswith(" 19999")  # the newest lines survive
    assert len("".join(kept.values())) < 256 * 1024


def test_sources_are_filtered_with_the_literals_of_their_kind(node):
    """The analyzer tries a rule only on the kinds its `sources` name: the capture keeps a line
    for the rule only in those kinds of sources."""
    rules = node.tmp / "rules"
    rules.mkdir()
    (rules / "site.yaml").write_text(
        "id: site.app_only\ntitle: t\nsources: [app]\nmatch:\n  contains: ['zzsattrib app only']\n"
        "  regex: 'zzsattrib app only'\nevent: {type: app_error, domain: app, role: symptom, severity: error}\n"
        "references: [https://example.org]\nexamples: {match: ['zzsattrib app only']}\n")
    node.config["rule_dirs"] = [str(rules)]
    text = "\n".join(["first", *(f"filler {i}" for i in range(50)), "zzsattrib app only", *(f"filler {i}" for i in range(50)), "last"]) + "\n"
    (node.tmp / "kernel.log").write_text(text)
    (node.tmp / "slurm-4242.out").write_text(text)
    node.env["SLURM_JOB_STDOUT"] = str(node.tmp / "slurm-%j.out")
    node.source(name="kernel", kind="kernel", path=str(node.tmp / "kernel.log"))
    node.source(name="job_stdout", kind="app")
    rc, _ = node.run()
    assert rc == 0
    bundle = node.bundle()
    assert "zzsattrib app only" in dict(source_of(bundle, "job_stdout")["lines"]).values()
    assert "zzsattrib app only" not in dict(source_of(bundle, "kernel")["lines"]).values()
