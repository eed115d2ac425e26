"""Forged lines in the places a job's user can write, shared by tests/test_hostile_forgery.py and
benchmarks/fuzz_hostile.py.

A forged line is the `examples.match` line of a rule that could name hardware (its sources include
`kernel`, or its event's domain is gpu, network or host), wrapped as a user would print it (ANSI
colours, a CR, a syslog header with another program or the tag `kernel`, `[rank3]:`, an srun
label, another node's name, a node outside the job).  A place writes a whole job folder around it:
the logs layout (job output, an NCCL debug file, a node's syslog, a node folder the user made) or
a capture spool job (the syslog, stdout or NCCL debug source of a node bundle).
"""

from __future__ import annotations

import gzip
import json
import os
import pwd
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from slurm_attrib.store.index import HARDWARE_DOMAINS

NODES = ("gpu01", "gpu02", "gpu03", "gpu04")
OUTSIDE = "gpu09"  # a node that is not in the job
JOB_ID = "4242"

# The fleet forgery: Slurm's own wordings printed by the job.
EXTRA_LINES = (
    ("issue18.srun_node_failure", f"srun: error: Node failure on {OUTSIDE}"),
    ("issue18.slurmstepd_node_fail", f"slurmstepd: error: *** JOB {JOB_ID} ON {OUTSIDE} CANCELLED AT "
                                     "2026-12-05T11:00:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"),
)


def forgeable_lines(rule_dirs: tuple[Path, ...] = ()) -> list[tuple[str, str]]:
    """(rule id, example line) of every rule that could name hardware, through the rule loader."""
    from slurm_attrib.ruleset.loader import load_rules

    lines = [
        (rule.id, example.line)
        for rule in load_rules(list(rule_dirs))
        if "kernel" in rule.sources or rule.event.domain in HARDWARE_DOMAINS
        for example in rule.examples.match
    ]
    return [*lines, *EXTRA_LINES]


# ------------------------------------------------------------------------------------ wrappings


def _rfc3164(when: datetime) -> str:
    return f"{when:%b} {when.day:2d} {when:%H:%M:%S}"


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f+0000")


Wrapping = Callable[[str, datetime], str]

WRAPPINGS: dict[str, Wrapping] = {
    "plain": lambda line, when: line,
    "ansi": lambda line, when: f"\x1b[1;31m{line}\x1b[0m",
    "cr-progress": lambda line, when: f"epoch 3:  41%|####      | 410/1000\r{line}",
    "trailing-cr": lambda line, when: f"{line}\r",
    "embedded-newline": lambda line, when: f"user says:\n{line}",
    "rank-prefix": lambda line, when: f"[rank3]:{line}",
    "srun-label": lambda line, when: f"12: {line}",
    "syslog-other-program": lambda line, when: f"{_rfc3164(when)} {NODES[0]} python3[4242]: {line}",
    "syslog-kernel-job-node": lambda line, when: f"{_rfc3164(when)} {NODES[1]} kernel: {line}",
    "syslog-kernel-outside-node": lambda line, when: f"{_rfc3164(when)} {OUTSIDE} kernel: {line}",
    "nccl-outside-node": lambda line, when: f"{OUTSIDE}:4242:4300 [0] {line}",
    "pdsh-outside-node": lambda line, when: f"{OUTSIDE}: {line}",
    "dmesg-stamp": lambda line, when: f"[ 4242.123456] {line}",
}


# ---------------------------------------------------------------------------------------- places


@dataclass(frozen=True)
class Window:
    """The job's window: it ran an hour, ending an hour ago (inside the fleet's repeat window)."""

    start: float
    end: float

    @property
    def when(self) -> datetime:
        return datetime.fromtimestamp((self.start + self.end) / 2, timezone.utc).replace(microsecond=123456)


def window(now: float | None = None) -> Window:
    now = time.time() if now is None else now
    return Window(now - 7200, now - 3600)


@contextmanager
def scratch(fallback: Path) -> Iterator[Path]:
    """A fresh folder in memory (/dev/shm) when there is one: the results store fsyncs every
    diagnosis, which on a busy disk costs 50 ms a job; else `fallback`."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield fallback
        return
    folder = Path(tempfile.mkdtemp(prefix="sattrib-hostile-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _job_json(root: Path, win: Window) -> None:
    job = {"job_id": JOB_ID, "user": "mallory", "state": "FAILED", "exit_code": "1:0",
           "start": datetime.fromtimestamp(win.start, timezone.utc).isoformat(),
           "end": datetime.fromtimestamp(win.end, timezone.utc).isoformat(), "nodes": list(NODES)}
    (root / "job.json").write_text(json.dumps(job))


def _benign_dmesg(win: Window) -> str:
    stamp = win.when.strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")
    return (f"{stamp} mlx5_core 0000:3b:00.0: mlx5_pcie_event:301: PCIe slot advertised sufficient power (75W).\n"
            f"{stamp} EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.\n")


def _benign_stdout() -> str:
    return "".join(f"step {i}/1000 loss={3.0 - i / 100:.3f} tokens/s=81234\n" for i in range(1, 6))


def _nccl_header(node: str) -> str:
    return (f"{node}:4242:4242 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
            f"{node}:4242:4300 [0] NCCL INFO Channel 00/08 :    0   1   2   3   4   5   6   7\n")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8", "surrogateescape"))


def _logs_layout(root: Path, win: Window) -> None:
    """job.json and what an operator copied in: each node's kernel log (benign), the job's output."""
    root.mkdir(parents=True, exist_ok=True)
    _job_json(root, win)
    for node in NODES[:2]:
        _write(root / node / "dmesg.txt", _benign_dmesg(win))


def unprivileged_uid() -> int:
    """A uid that is not root: `nobody` when the tests run as root, else our own."""
    if os.geteuid() != 0:
        return os.geteuid()
    return pwd.getpwnam("nobody").pw_uid


def place_job_stdout(root: Path, forged: list[str], win: Window) -> None:
    _logs_layout(root, win)
    _write(root / f"slurm-{JOB_ID}.out", _benign_stdout() + "".join(f"{line}\n" for line in forged))


def place_nccl_debug(root: Path, forged: list[str], win: Window) -> None:
    """NCCL_DEBUG_FILE output the operator copied into the node's folder."""
    _logs_layout(root, win)
    _write(root / NODES[0] / f"nccl-debug.{NODES[0]}.4242.txt",
           _nccl_header(NODES[0]) + "".join(f"{line}\n" for line in forged))


def _syslog_place(program: str) -> Callable[[Path, list[str], Window], None]:
    """/var/log/syslog of a node, copied by the operator, with the lines `logger -t <program>` wrote."""

    def place(root: Path, forged: list[str], win: Window) -> None:
        _logs_layout(root, win)
        header = f"{_rfc3164(win.when)} {NODES[0]}"
        benign = f"{header} systemd[1]: Started session-12.scope - Session 12 of User mallory.\n"
        _write(root / NODES[0] / "syslog", benign + "".join(f"{header} {program}: {line}\n" for line in forged))

    return place


def place_user_node_folder(root: Path, forged: list[str], win: Window) -> None:
    """A node folder the user made in the logs-layout folder: owned by a non-root uid."""
    _logs_layout(root, win)
    folder = root / NODES[2]
    stamp = win.when.strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")
    _write(folder / "dmesg.txt", "".join(f"{stamp} {line}\n" for line in forged))
    uid = unprivileged_uid()
    if os.geteuid() == 0:
        for path in (folder, folder / "dmesg.txt"):
            os.chown(path, uid, uid)


def _bundle_lines(text: str) -> list[list]:
    """Lines as the epilog keeps them: split at newlines only (grep -n), a CR stays inside its line."""
    return [[number, line] for number, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), 1)]


def _spool_place(source: str, kind: str, prefix: Callable[[Window], str],
                 provenance: str | None = None) -> Callable[[Path, list[str], Window], None]:
    """A capture spool job: every node's bundle with a benign kernel source; the first node's
    `source` (of `kind`) holds the forged lines, each after `prefix` (as the epilog captured them),
    with the provenance the epilog recorded for it (None: a bundle from before it recorded one)."""

    def place(root: Path, forged: list[str], win: Window) -> None:
        (root / "nodes").mkdir(parents=True, exist_ok=True)
        _job_json(root, win)
        head = prefix(win)
        for node in NODES:
            sources = [{"name": "kernel", "kind": "kernel", "status": "ok",
                        "lines": _bundle_lines(_benign_dmesg(win))}]
            if node == NODES[0]:
                # journalctl prints a message's further lines indented under its first
                indent = "\n" + " " * len(head) if head and kind != "app" else "\n"
                text = "".join(f"{head}{line.replace(chr(10), indent)}\n" for line in forged)
                sources.append({"name": source, "kind": kind, "status": "ok", "lines": _bundle_lines(text)})
                if provenance is not None:
                    sources[-1]["provenance"] = provenance
            bundle = {"format": "sattrib-node-bundle", "version": 1, "node": node,
                      "job": {"job_id": JOB_ID, "nodes": list(NODES), "start": win.start, "end": win.end,
                              "start_from": "prolog"},
                      "sources": sources}
            (root / "nodes" / f"{node}.json.gz").write_bytes(gzip.compress(json.dumps(bundle).encode(), 1))

    return place


PLACES: dict[str, Callable[[Path, list[str], Window], None]] = {
    "job-stdout": place_job_stdout,
    "nccl-debug-file": place_nccl_debug,
    "syslog-user-tag": _syslog_place("train.sh[4242]"),
    # Not a place: `logger -t kernel` in a plain text syslog an operator copied in is filed under
    # `kernel` like the kernel's own lines, and the operator vouches for it (README, Provenance;
    # tests/test_provenance.py).  The epilog never reads such a file as the daemons'.
    "user-node-folder": place_user_node_folder,
    # the epilog's syslog source before it recorded provenance (every uid's journal lines were read)
    "spool-syslog-user-tag": _spool_place("syslog", "syslog", lambda w: f"{_iso(w.when)} {NODES[0]} train.sh[4242]: "),
    "spool-syslog-kernel-tag": _spool_place("syslog", "syslog", lambda w: f"{_iso(w.when)} {NODES[0]} kernel: "),
    # now: root's journal lines (daemon), where a line filed under a user's program never acts, and
    # the /var/log/syslog fallback (user), where `logger -t kernel` lines are
    "spool-journal-user-tag": _spool_place("syslog", "syslog", lambda w: f"{_iso(w.when)} {NODES[0]} train.sh[4242]: ", "daemon"),
    "spool-syslog-file-kernel-tag": _spool_place("syslog", "syslog", lambda w: f"{_iso(w.when)} {NODES[0]} kernel: ", "user"),
    "spool-job-stdout": _spool_place("job_stdout", "app", lambda w: ""),
    "spool-nccl-debug": _spool_place("nccl_debug", "app", lambda w: f"{NODES[0]}:4242:4300 [0] "),
}


def positive_control(root: Path, win: Window) -> None:
    """The real thing: an Xid 79 in the kernel source (journalctl -k) of a node bundle."""
    place = _spool_place("kernel-extra", "kernel", lambda w: f"{_iso(w.when)} {NODES[0]} kernel: ")
    place(root, ["NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."], win)


# ------------------------------------------------------------------------------------ judgement


def hardware_verdict(diagnosis) -> bool:
    """A `confirmed` hardware cause: what the issue forbids from user-written lines."""
    return diagnosis.domain in HARDWARE_DOMAINS and diagnosis.quality == "confirmed"


@dataclass
class FleetAnswer:
    strikes: int  # jobs counted by a repeat offender (a node or a GPU)
    offenders: list[str]  # "node" or "node GPU bus-id", with the recommendation
    drains: list[str]  # what `sattrib drain --recommend` would list: "node (job N)" or "node (fleet)"


def ask_fleet(diagnoses: list, now: float, results: Path) -> FleetAnswer:
    """Store the diagnoses as jobs of one user (the way the worker does), then ask the fleet what it
    counts and what `sattrib drain --recommend` would list (its single-job and fleet parts).
    Only diagnoses that name a node are stored: the fleet counts nothing else; their text file
    holds the summary only (the fleet never reads it)."""
    from slurm_attrib.config import Config
    from slurm_attrib.drain import pending, plan
    from slurm_attrib.fleet.history import fleet_view
    from slurm_attrib.store import Store

    config = Config(results=str(results))
    store = Store(results)
    for number, diagnosis in enumerate(diagnoses, 1):
        if diagnosis.culprit_nodes or diagnosis.drain or diagnosis.gpus:
            entries, note = plan(diagnosis, config)
            store.save(str(number), diagnosis, diagnosis.summary, uid=None, user="mallory", state="FAILED",
                       drains=entries, drain_note=note)
    view = fleet_view(store, config, now)
    return FleetAnswer(
        strikes=len({s.job_id for o in view.offenders for s in o.strikes}),
        offenders=[f"{o.node} {o.pci_bus_id or ''} {o.recommendation}".replace("  ", " ") for o in view.offenders],
        drains=[*(f"{e['node']} (job {job})" for job, e in pending(store)), *(f"{e['node']} (fleet)" for e in view.drains)],
    )
