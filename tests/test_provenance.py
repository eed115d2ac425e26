"""Provenance decides trust: only what no user could have written drains or confirms hardware.

Every case is analysed twice where it matters: once as the operator's (files root owns) to show
the line itself is one the rules read as a cause, and once as a user's to show it then acts on
nothing.  The user is a real unprivileged uid (`nobody`) owning real files.
"""

from __future__ import annotations

import gzip
import json
import os
import pwd
import shutil
from pathlib import Path

import pytest

from slurm_attrib.capture.sources import declared_provenance, default_sources, file_provenance
from slurm_attrib.engine.pipeline import analyze_evidence, analyze_path, judge_path, load_any
from slurm_attrib.ingest.ownership import OwnerCheck
from slurm_attrib.provenance import Provenance, supports_verdict

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
JOB = {"job_id": "7", "state": "FAILED", "exit_code": "1:0", "start": "2026-12-02T13:00:00", "end": "2026-12-02T13:10:00",
       "nodes": ["gpu01", "gpu02"]}
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand files to another uid")


def logs_folder(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "job.json").write_text(json.dumps(JOB))
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    return path


def chown_tree(path: Path, user: str = "nobody") -> None:
    entry = pwd.getpwnam(user)
    for folder, dirs, files in os.walk(path):
        for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            os.chown(name, entry.pw_uid, entry.pw_gid)


KERNEL_XID = {"gpu02/dmesg.txt": f"2026-12-02T13:04:06,000000+00:00 {XID}\n", "slurm-7.out": "Traceback: boom\n"}


def test_the_operators_kernel_log_drains(tmp_path):
    diagnosis = analyze_path(logs_folder(tmp_path / "job", KERNEL_XID))
    assert (diagnosis.category, diagnosis.quality) == ("gpu_fell_off_bus", "confirmed")
    assert [d.node for d in diagnosis.drain] == ["gpu02"]


@root_only
def test_a_node_folder_a_user_made_is_a_claim(tmp_path):
    folder = logs_folder(tmp_path / "job", KERNEL_XID)
    chown_tree(folder / "gpu02")
    diagnosis = analyze_path(folder)
    assert diagnosis.category == "gpu_fell_off_bus"  # the claim keeps its meaning...
    assert diagnosis.quality != "confirmed" and diagnosis.drain == []  # ...and acts on nothing


@root_only
def test_a_folder_others_may_write_is_a_claim(tmp_path):
    folder = logs_folder(tmp_path / "job", KERNEL_XID)
    os.chmod(folder / "gpu02", 0o777)
    assert analyze_path(folder).drain == []


@root_only
def test_a_job_record_a_user_wrote_is_no_slurm_verdict(tmp_path):
    folder = logs_folder(tmp_path / "job", {"slurm-7.out": "hello\n"})
    (folder / "job.json").write_text(json.dumps({**JOB, "state": "NODE_FAIL"}))
    assert load_any(folder).job.provenance is Provenance.DAEMON
    os.chown(folder / "job.json", pwd.getpwnam("nobody").pw_uid, -1)
    evidence = load_any(folder)
    assert evidence.job.provenance is Provenance.USER
    diagnosis = analyze_evidence(evidence)
    assert diagnosis.drain == [] and diagnosis.quality != "confirmed"


@pytest.mark.parametrize("name", ["nccl-debug.gpu02.4242.txt", "slurm-7.out", "train.err", "stdout.txt"])
def test_a_jobs_own_file_in_a_node_folder_stays_the_jobs(tmp_path, name):
    """The job chose its NCCL debug file's content: copied into gpu02/ it may look like dmesg."""
    folder = logs_folder(tmp_path / "job", {f"gpu02/{name}": f"gpu02:1:1 [0] NCCL INFO x\n2026-12-02T13:04:06,000000+00:00 {XID}\n",
                                            "slurm-7.out": "Traceback: boom\n"})
    evidence = load_any(folder)
    assert [f.provenance for f in evidence.files if f.rel.startswith("gpu02/")] == [Provenance.USER]
    assert analyze_evidence(evidence).drain == []


def test_an_upload_vouches_for_nothing(tmp_path):
    folder = logs_folder(tmp_path / "job", KERNEL_XID)
    evidence = load_any(folder, vouch=False)
    assert {f.provenance for f in evidence.files} == {Provenance.USER}
    diagnosis = analyze_evidence(evidence)
    assert diagnosis.drain == [] and diagnosis.quality != "confirmed"


@pytest.mark.parametrize(("program", "drains"), [("alice[4242]", False), ("python3", False), ("nvidia-smi", False), ("kernel", True)])
def test_an_operators_syslog_counts_only_what_it_files_as_the_kernels(tmp_path, program, drains):
    """A node's syslog the operator vouches for: a user's `logger` line quoting an Xid is a claim;
    a line filed under `kernel` is the kernel's as far as a plain text syslog can tell (a user's
    `logger -t kernel` in such a file is the documented limit: give journalctl -k or dmesg)."""
    folder = logs_folder(tmp_path / "job", {
        "gpu02/syslog": f"Dec  2 13:04:00 gpu02 systemd[1]: Started Session 4.\nDec  2 13:04:06 gpu02 {program}: {XID}\n",
        "slurm-7.out": "Traceback: boom\n",
    })
    diagnosis = analyze_path(folder)
    assert bool(diagnosis.drain) is drains
    assert (diagnosis.quality == "confirmed") is drains


def test_the_further_line_of_a_users_message_is_still_the_users(tmp_path):
    """`logger "$(printf 'x\\nNVRM: Xid ...')"`: the second line has no header of its own."""
    folder = logs_folder(tmp_path / "job", {
        "gpu02/syslog": f"Dec  2 13:04:06 gpu02 alice[4242]: user says:\n{XID}\n    {XID}\n",
        "slurm-7.out": "Traceback: boom\n",
    })
    diagnosis = analyze_path(folder)
    assert diagnosis.drain == [] and diagnosis.quality != "confirmed"


def test_a_syslog_a_users_lines_make_look_like_ibstat_is_still_a_syslog(tmp_path):
    """Content decides how a file is read, its name what it is: a copied syslog whose lines are
    mostly a user's pasted `ibstat` output is no root-run probe."""
    ibstat = "CA 'mlx5_0'\n\tCA type: MT4123\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Disabled\n"
    folder = logs_folder(tmp_path / "job", {"gpu02/syslog": f"Dec  2 13:04:06 gpu02 alice[4242]: user says:\n{ibstat}",
                                            "slurm-7.out": "Traceback: boom\n"})
    evidence = load_any(folder)
    assert [f.provenance for f in evidence.files if f.node == "gpu02"] == [Provenance.DAEMON]
    diagnosis = analyze_evidence(evidence)
    assert diagnosis.drain == [] and diagnosis.quality != "confirmed"


def test_the_node_failure_banner_of_a_survivor_drains_not_the_survivor(tmp_path):
    """slurmstepd prints `*** JOB ... ON gpu01 CANCELLED ... DUE TO NODE FAILURE ***` on the nodes that
    are still up: the operator's slurmd.log of gpu01 holding it says another node of the job failed."""
    banner = ("[2026-12-02T13:05:00.123] [7.batch] error: *** JOB 7 ON gpu01 CANCELLED AT 2026-12-02T13:05:00 "
              "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n")
    diagnosis = analyze_path(logs_folder(tmp_path / "job", {"gpu01/slurmd.log": banner}))
    assert diagnosis.category == "node_failure"
    assert "gpu01" not in diagnosis.culprit_nodes
    assert diagnosis.drain == []


def test_a_line_never_makes_a_node_outside_the_job_a_culprit(tmp_path):
    folder = logs_folder(tmp_path / "job", {"slurm-7.out": "srun: error: Node failure on gpu09\nsrun: error: gpu09: task 3: Killed\n"})
    diagnosis = analyze_path(folder)
    assert "gpu09" not in diagnosis.culprit_nodes
    assert all(d.node != "gpu09" for d in diagnosis.drain)


def bundle(folder: Path, node: str, sources: list[dict]) -> None:
    (folder / "nodes").mkdir(parents=True, exist_ok=True)
    data = {"format": "sattrib-node-bundle", "version": 1, "node": node,
            "job": {"job_id": "7", "state": "FAILED", "nodes": ["gpu01", "gpu02"], "start": 1796216400, "end": 1796217000},
            "sources": sources}
    with gzip.open(folder / "nodes" / f"{node}.json.gz", "wt") as out:
        json.dump(data, out)


def source(name: str, kind: str, line: str, provenance: str | None) -> dict:
    entry = {"name": name, "kind": kind, "status": "ok", "lines": [[1, line]]}
    if provenance is not None:
        entry["provenance"] = provenance
    return entry


KERNEL_LINE = f"2026-12-02T13:04:06.000000+00:00 gpu02 kernel: {XID}"


@pytest.mark.parametrize(
    ("name", "kind", "provenance", "drains"),
    [
        ("kernel", "kernel", "kernel", True),
        ("kernel", "kernel", None, True),  # a bundle from before provenance was recorded: its kind's
        ("kernel", "kernel", "daemon", True),  # rsyslog's kern.log: lines filed as the kernel's
        ("syslog", "syslog", "daemon", True),  # root's journal, under `kernel`: only root writes that
        ("syslog", "syslog", None, False),  # old bundles read every uid's journal lines
        ("syslog", "syslog", "user", False),  # /var/log/syslog, which `logger` writes
        ("kernel", "kernel", "nonsense", False),
    ],
)
def test_bundle_sources_act_only_on_kernel_provenance(tmp_path, name, kind, provenance, drains):
    folder = tmp_path / "7"
    bundle(folder, "gpu02", [source(name, kind, KERNEL_LINE, provenance)])
    bundle(folder, "gpu01", [])
    diagnosis = analyze_path(folder)
    assert diagnosis.category == "gpu_fell_off_bus"
    assert bool(diagnosis.drain) is drains


@root_only
def test_a_bundle_a_user_owns_is_a_claim(tmp_path):
    folder = tmp_path / "7"
    bundle(folder, "gpu02", [source("kernel", "kernel", KERNEL_LINE, "kernel")])
    bundle(folder, "gpu01", [])
    assert analyze_path(folder).drain
    chown_tree(folder)
    assert analyze_path(folder).drain == []


@root_only
def test_owner_check_walks_every_folder_from_the_root(tmp_path):
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    assert OwnerCheck(tmp_path).vouches(Path("a/b/c/f"))
    os.chown(tmp_path / "a" / "b", pwd.getpwnam("nobody").pw_uid, -1)
    assert not OwnerCheck(tmp_path).vouches(Path("a/b/c/f"))
    assert not OwnerCheck(tmp_path, enabled=False).vouches(Path("a/b/c/f"))


def test_a_root_services_line_quoting_an_xid_is_no_kernel_report(tmp_path):
    folder = tmp_path / "7"
    line = f"2026-12-02T13:04:06.000000+00:00 gpu02 nv-hostengine[991]: {XID}"
    bundle(folder, "gpu02", [source("syslog", "syslog", line, "daemon")])
    bundle(folder, "gpu01", [])
    assert analyze_path(folder).drain == []


FABRIC_MANAGER_LINE = ("[Dec 02 2026 13:04:06] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on "
                       "NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33")


@pytest.mark.parametrize(("name", "kind", "provenance", "trusted"), [
    ("fabricmanager", "app", "daemon", True),  # root's nv-fabricmanager's own log: its lines name no program
    ("fabricmanager", "app", "user", False),
    ("syslog", "app", "daemon", False),  # a log kept for others: a line naming no sender stays a claim
])
def test_a_daemons_own_log_needs_no_sender_on_its_lines(tmp_path, name, kind, provenance, trusted):
    folder = tmp_path / "7"
    bundle(folder, "gpu02", [source(name, kind, FABRIC_MANAGER_LINE, provenance)])
    bundle(folder, "gpu01", [])
    _, events = judge_path(folder)
    fault = next(e for e in events if e.rule_id == "gpu.fabricmanager_nvswitch_error")
    assert fault.trusted is trusted and fault.node == "gpu02"


@root_only
def test_a_fabric_manager_log_the_operator_copied_is_the_daemons(tmp_path):
    folder = logs_folder(tmp_path / "job", {"gpu02/fabricmanager.log": FABRIC_MANAGER_LINE + "\n",
                                            "gpu01/fabricmanager.log.out": FABRIC_MANAGER_LINE + "\n"})
    _, events = judge_path(folder)
    trusted = {e.source: e.trusted for e in events if e.rule_id == "gpu.fabricmanager_nvswitch_error"}
    assert trusted == {"gpu02/fabricmanager.log": True, "gpu01/fabricmanager.log.out": False}  # .out: a job's output


@root_only
@pytest.mark.parametrize(("name", "trusted"), [
    ("lspci.txt", True),  # a root-run probe's output the operator copied: the hardware's own state
    ("lspci.out", False),  # named like a job's output
    ("notes.txt", False),  # a name that says nothing: its content (a plain line) is a user's
])
def test_a_probes_output_the_operator_copied_is_the_probes(tmp_path, name, trusted):
    line = "3b:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev ff)\n"
    folder = logs_folder(tmp_path / "job", {f"gpu02/{name}": line})
    _, events = judge_path(folder)
    fault = next(e for e in events if e.rule_id == "cmd.lspci_gpu_rev_ff")
    assert fault.trusted is trusted
    chown_tree(folder)
    _, events = judge_path(folder)
    assert not next(e for e in events if e.rule_id == "cmd.lspci_gpu_rev_ff").trusted  # a folder a user owns


SLURMD_GPU_LOST = "2026-12-02T13:04:06.000000+00:00 gpu02 {program}[4242]: error: Failed to get UUID of GPU: GPU is lost"


def journal(line: str, senders: str | None) -> dict:
    entry = source("syslog", "syslog", line, "daemon")
    if senders is not None:
        entry["senders"] = senders
    return entry


@pytest.mark.parametrize(("program", "senders", "drains"), [
    ("slurmd", "root", True),  # root's journal (_UID=0): slurmd's own report that NVML lost the GPU
    ("slurmd", None, False),  # a journal of every uid: a user's `logger -t slurmd` reads the same
    ("sudo", "root", False),  # root's, but sudo logs the command a user ran
    ("alice", "root", False),
])
def test_a_root_daemons_line_acts_only_from_a_log_of_roots_lines(tmp_path, program, senders, drains):
    folder = tmp_path / "7"
    bundle(folder, "gpu02", [journal(SLURMD_GPU_LOST.format(program=program), senders)])
    bundle(folder, "gpu01", [])
    diagnosis = analyze_path(folder)
    assert (diagnosis.category, diagnosis.culprit_nodes) == ("gpu_fell_off_bus", ["gpu02"])
    assert [d.node for d in diagnosis.drain] == (["gpu02"] if drains else [])


def test_root_senders_never_make_a_daemon_line_a_kernel_report(tmp_path):
    """A root daemon quoting an Xid is still no kernel report (kernel-reading rules need `kernel`)."""
    assert not supports_verdict(Provenance.DAEMON, reads_kernel=True, filed_under="slurmd", root_senders=True)
    assert supports_verdict(Provenance.DAEMON, reads_kernel=False, filed_under="slurmd", root_senders=True)
    assert not supports_verdict(Provenance.DAEMON, reads_kernel=False, filed_under="?", root_senders=True)
    assert not supports_verdict(Provenance.USER, reads_kernel=False, filed_under="slurmd", root_senders=True)


def test_kernel_reading_rules_need_the_kernels_own_log():
    assert supports_verdict(Provenance.KERNEL, reads_kernel=True)
    assert not supports_verdict(Provenance.DAEMON, reads_kernel=True)
    assert supports_verdict(Provenance.DAEMON, reads_kernel=True, filed_under="kernel")
    assert not supports_verdict(Provenance.USER, reads_kernel=True, filed_under="kernel")
    assert supports_verdict(Provenance.DAEMON, reads_kernel=False)  # a daemon's own log: no header
    assert not supports_verdict(Provenance.DAEMON, reads_kernel=False, filed_under="alice")
    assert supports_verdict(Provenance.DAEMON, reads_kernel=False)
    assert supports_verdict(Provenance.PROBE, reads_kernel=False)
    assert not supports_verdict(Provenance.USER, reads_kernel=False)


def test_capture_sources_say_who_can_write_them(tmp_path):
    by_origin = {(s.name, s.path or (s.command[:1] or ("",))[0]): declared_provenance(s) for s in default_sources()}
    assert by_origin[("kernel", "journalctl")] is Provenance.KERNEL
    assert by_origin[("kernel", "dmesg")] is Provenance.KERNEL
    assert by_origin[("kernel", "/var/log/kern.log")] is Provenance.DAEMON
    assert by_origin[("syslog", "journalctl")] is Provenance.DAEMON
    assert by_origin[("syslog", "/var/log/syslog")] is Provenance.USER
    assert by_origin[("job_stdout", "")] is Provenance.USER
    assert by_origin[("nvidia_smi", "nvidia-smi")] is Provenance.PROBE
    assert by_origin[("fabricmanager", "/var/log/fabricmanager.log")] is Provenance.DAEMON
    journal = next(s for s in default_sources() if s.name == "syslog" and s.command)
    assert "_UID=0" in journal.command  # root's services only: a user's `logger` line is not read
    assert journal.senders == "root"
    assert {s.senders for s in default_sources() if s != journal} == {""}


def test_a_configured_file_vouches_for_its_kind_only_when_only_root_writes_it(tmp_path):
    from slurm_attrib.config import SourceConfig

    src = SourceConfig(name="gpu_log", kind="kernel", path=str(tmp_path / "f"))
    (tmp_path / "f").write_text("x")
    os.chmod(tmp_path / "f", 0o644)
    info = os.stat(tmp_path / "f")
    assert file_provenance(src, info) is (Provenance.KERNEL if info.st_uid == 0 else Provenance.USER)
    os.chmod(tmp_path / "f", 0o666)
    assert file_provenance(src, os.stat(tmp_path / "f")) is Provenance.USER


@pytest.mark.skipif(shutil.which("logger") is None, reason="no logger")
def test_the_hook_layouts_forged_logger_line_recommends_no_drain(tmp_path):
    """The developers' before-stop check, as a test: a user's logger line in a node's syslog."""
    folder = tmp_path / "c"
    (folder / "gpu02").mkdir(parents=True)
    (folder / "job.json").write_text('{"job_id": "1", "state": "FAILED", "nodes": ["gpu01", "gpu02"]}')
    (folder / "gpu02" / "syslog").write_text(
        "Dec  2 13:30:00 gpu02 alice[4242]: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.\n")
    assert analyze_path(folder).drain == []


def test_a_source_says_only_that_root_sent_its_lines(tmp_path):
    from slurm_attrib.config import ConfigError, load_config

    path = tmp_path / "config.yaml"
    path.write_text("sources:\n  - {name: syslog, kind: syslog, command: [journalctl], senders: root}\n")
    assert load_config(path).sources[0].senders == "root"
    path.write_text("sources:\n  - {name: syslog, kind: syslog, command: [journalctl], senders: everyone}\n")
    with pytest.raises(ConfigError, match="senders"):
        load_config(path)
