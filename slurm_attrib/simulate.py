"""Scenario simulator: logs-layout job directories with known ground truth.

`write_scenario(name, out_dir, nodes, ranks_per_node, seed)` writes one job in the contract's
"logs layout" and returns what a correct analysis must say about it:

    out_dir/job.json              job context (job_id, user, state, exit_code, start, end, nodes)
    out_dir/slurm-<id>.out        job-level output: every rank's NCCL/PyTorch/torchrun lines,
                                  srun and slurmstepd messages (optionally `srun --label` prefixed)
    out_dir/<host>/dmesg.txt      kernel ring buffer (boot seconds, `dmesg -T` or `--time-format iso`)
    out_dir/<host>/syslog|messages|journal.txt
                                  RFC 3164 syslog or `journalctl -o short-iso` (some nodes have none)

Everything is drawn from a `random.Random` seeded with the scenario name, sizes and seed, and no
wall clock is read, so the same arguments always give the same bytes.  Each node's clock is skewed
by up to 2 s; kernel and syslog lines carry benign noise (cable events, corrected EDAC/AER errors,
systemd, slurmd, chrony, nvidia-peermem), and the job output carries NCCL init lines that map ranks
to hosts, GPUs (busId) and IPoIB addresses.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SCENARIOS", "Expectation", "GroundTruth", "Scenario", "write_scenario"]

QUALITY_ORDER = ("confirmed", "likely", "ambiguous", "insufficient")
HARD = ("confirmed", "likely")  # trusted hardware/kernel evidence of a single fault

# Bus ids of the eight GPUs of an HGX H100 board, as the Xid line prints them (domain:bus:device)
GPU_BUS = ("0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00", "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00")
GPU_ROOT_PORT = ("0000:15:01.0", "0000:27:01.0", "0000:37:01.0", "0000:59:01.0", "0000:97:01.0", "0000:a8:01.0", "0000:b7:01.0", "0000:d7:01.0")
HCA_BUS = "0000:0c:00.0"
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
WDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
WATCHDOG_MS = 600000


# --------------------------------------------------------------------------------------------
# Ground truth


@dataclass(frozen=True)
class Expectation:
    """One acceptable reading of a job."""

    domain: str
    category: str
    culprit_nodes: tuple[str, ...]
    allowed_qualities: tuple[str, ...]
    drain_nodes: tuple[str, ...]


@dataclass
class GroundTruth:
    """What a correct analysis of a simulated job says (plus, optionally, tolerated alternatives)."""

    scenario: str
    domain: str
    category: str
    culprit_nodes: list[str]
    allowed_qualities: tuple[str, ...]
    drain_nodes: list[str]
    description: str = ""
    job_id: str = ""
    nodes: list[str] = field(default_factory=list)
    fault_time: str | None = None  # ISO 8601 UTC of the injected fault, when there is one
    alternatives: list[Expectation] = field(default_factory=list)

    @property
    def quality_at_least(self) -> str:
        """The weakest quality still accepted (order: confirmed, likely, ambiguous, insufficient)."""
        return max(self.allowed_qualities, key=QUALITY_ORDER.index)

    def expectations(self) -> list[Expectation]:
        primary = Expectation(
            self.domain, self.category, tuple(self.culprit_nodes), self.allowed_qualities, tuple(self.drain_nodes)
        )
        return [primary, *self.alternatives]

    def problems(self, diagnosis: Any) -> list[str]:
        """Differences between a diagnosis (pydantic Diagnosis or its dict) and this truth; [] if it fits."""
        d = diagnosis.model_dump() if hasattr(diagnosis, "model_dump") else dict(diagnosis)
        got_drain = sorted({x["node"] for x in d.get("drain", [])})
        best: list[str] | None = None
        for exp in self.expectations():
            issues = []
            if (d.get("domain"), d.get("category")) != (exp.domain, exp.category):
                issues.append(f"domain/category {d.get('domain')}/{d.get('category')} != {exp.domain}/{exp.category}")
            if set(d.get("culprit_nodes", [])) != set(exp.culprit_nodes):
                issues.append(f"culprit_nodes {sorted(d.get('culprit_nodes', []))} != {sorted(exp.culprit_nodes)}")
            if d.get("quality") not in exp.allowed_qualities:
                issues.append(f"quality {d.get('quality')} not in {list(exp.allowed_qualities)}")
            if got_drain != sorted(exp.drain_nodes):
                issues.append(f"drain {got_drain} != {sorted(exp.drain_nodes)}")
            if not issues:
                return []
            if best is None:
                best = issues
        return best or []

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "domain": self.domain,
            "category": self.category,
            "culprit_nodes": self.culprit_nodes,
            "allowed_qualities": list(self.allowed_qualities),
            "drain_nodes": self.drain_nodes,
            "description": self.description,
            "fault_time": self.fault_time,
        }


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    build: Callable[["_Job"], GroundTruth]
    min_nodes: int = 2


# --------------------------------------------------------------------------------------------
# Time formatting (all from UNIX seconds, UTC; no wall clock)


def _tm(t: float) -> time.struct_time:
    return time.gmtime(int(t // 1))


def _frac(t: float, digits: int) -> str:
    return f"{int(round((t % 1) * 10**digits)) % 10**digits:0{digits}d}"


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", _tm(t))


def _ctime(t: float) -> str:  # dmesg -T style: "Wed Dec  2 13:04:06 2026"
    s = _tm(t)
    return f"{WDAYS[s.tm_wday]} {MONTHS[s.tm_mon - 1]} {s.tm_mday:2d} {s.tm_hour:02d}:{s.tm_min:02d}:{s.tm_sec:02d} {s.tm_year}"


def _rfc3164(t: float) -> str:
    s = _tm(t)
    return f"{MONTHS[s.tm_mon - 1]} {s.tm_mday:2d} {s.tm_hour:02d}:{s.tm_min:02d}:{s.tm_sec:02d}"


def _glog(t: float, digits: int = 6) -> str:  # E1202 13:04:06.123456 (without the letter)
    s = _tm(t)
    return f"{s.tm_mon:02d}{s.tm_mday:02d} {s.tm_hour:02d}:{s.tm_min:02d}:{s.tm_sec:02d}.{_frac(t, digits)}"


# --------------------------------------------------------------------------------------------
# The job model


@dataclass
class _Node:
    index: int
    host: str
    ip: str
    skew: float
    boot: float
    dmesg_fmt: str  # boot | ctime | iso
    syslog_fmt: str | None  # rfc3164 | shortiso | None (no syslog captured)
    syslog_name: str
    kpid: int
    slurmd_pid: int
    networkd_pid: int
    torchrun_pid: int
    cut: float | None = None  # logs stop at this time (node died)


class _Job:
    def __init__(self, name: str, nodes: int, rpn: int, seed: int):
        rng = self.rng = random.Random(f"slurm-attrib-sim:{name}:{nodes}:{rpn}:{seed}")
        self.name = name
        self.rpn = rpn
        self.nranks = nodes * rpn
        self.job_id = str(4000000 + rng.randrange(900000))
        self.user = rng.choice(("alice", "bob", "chen", "dana", "emeka"))
        self.uid = 1000 + rng.randrange(4000)
        self.start = float(1796212800 + rng.randrange(0, 6 * 3600))  # 2026-12-02 12:00..18:00 UTC
        self.end = self.start + 3600.0
        self.state, self.exit_code = "FAILED", "1:0"
        self.nccl_new = rng.random() < 0.5  # 2.26 (timestamped WARN) vs 2.21
        self.nccl_version = "2.26.2+cuda12.8" if self.nccl_new else "2.21.5+cuda12.4"
        self.label = seed % 2 == 1  # srun --label output
        self.script = rng.choice(("train.py", "pretrain_gpt.py", "main.py", "finetune.py"))
        width = max(3, len(str(nodes)))
        prefix = rng.choice(("gpu", "dgx", "node", "hgx"))
        self.nodes: list[_Node] = []
        for i in range(nodes):
            dfmt = ("boot", "ctime", "iso")[rng.randrange(3)]
            sfmt = ("rfc3164", "shortiso")[rng.randrange(2)]
            if dfmt != "boot" and rng.random() < 0.12:
                sfmt = None  # a node without syslog (never with an unanchored boot-seconds dmesg)
            sname = "journal.txt" if sfmt == "shortiso" else rng.choice(("syslog", "messages"))
            k = i + 10
            self.nodes.append(
                _Node(
                    index=i,
                    host=f"{prefix}{i + 1:0{width}d}",
                    ip=f"10.1.{k // 250}.{k % 250 + 1}",
                    skew=round(rng.uniform(-2.0, 2.0), 3),
                    boot=self.start - rng.uniform(0.5, 40.0) * 86400,
                    dmesg_fmt=dfmt,
                    syslog_fmt=sfmt,
                    syslog_name=sname,
                    kpid=rng.randrange(1000, 60000),
                    slurmd_pid=rng.randrange(1500, 3000),
                    networkd_pid=rng.randrange(600, 1500),
                    torchrun_pid=rng.randrange(100000, 900000),
                )
            )
        self.batch = self.nodes[0]
        self.pids = [rng.randrange(100000, 4000000) for _ in range(self.nranks)]
        self.kernel: dict[str, list[tuple[float, int, str]]] = {n.host: [] for n in self.nodes}
        self.syslog: dict[str, list[tuple[float, int, str, str]]] = {n.host: [] for n in self.nodes}
        self.out: list[tuple[float, int, str]] = []
        self.seq = 0
        self.missing: set[tuple[str, str]] = set()
        self.progress_until: float | None = None
        self.progress_text_end: list[str] = []

    # -- addressing ------------------------------------------------------------------------
    def node_of(self, rank: int) -> _Node:
        return self.nodes[rank // self.rpn]

    def ranks_of(self, node: _Node) -> range:
        return range(node.index * self.rpn, (node.index + 1) * self.rpn)

    def gpu_bus(self, local: int) -> str:
        return GPU_BUS[local % len(GPU_BUS)]

    def pick_node(self, avoid: tuple[int, ...] = ()) -> _Node:
        choices = [n for n in self.nodes if n.index not in avoid and n.index != 0] or [
            n for n in self.nodes if n.index not in avoid
        ]
        return self.rng.choice(choices)

    # -- emitting --------------------------------------------------------------------------
    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def kern(self, node: _Node, t: float, *msgs: str, syslog: bool = True) -> None:
        for m in msgs:
            self.kernel[node.host].append((t, self._next(), m))
            if syslog:
                self.syslog[node.host].append((t, self._next(), "kernel", m))
        # consecutive lines of one event stay together by seq; times are equal

    def sys(self, node: _Node, t: float, prog: str, *msgs: str) -> None:
        for m in msgs:
            self.syslog[node.host].append((t, self._next(), prog, m))

    def emit(self, node: _Node | None, t: float, *lines: str) -> None:
        """Job output lines written by a process on `node` (srun --label adds the task id)."""
        for line in lines:
            if self.label and node is not None:
                line = f"{node.index}: {line}"
            self.out.append((t, self._next(), line))

    def nccl_prefix(self, rank: int) -> str:
        node = self.node_of(rank)
        pid = self.pids[rank]
        return f"{node.host}:{pid}:{pid}"

    def nccl_warn(self, rank: int, t: float, where: str, msg: str, tid_off: int = 57) -> None:
        node = self.node_of(rank)
        pid = self.pids[rank]
        local = rank % self.rpn
        stamp = f"[{time.strftime('%Y-%m-%d %H:%M:%S', _tm(t + node.skew))}] " if self.nccl_new else ""
        self.emit(node, t, "", f"{stamp}{node.host}:{pid}:{pid + tid_off} [{local}] {where} NCCL WARN {msg}")

    def nccl_info(self, rank: int, t: float, msg: str, tid_off: int = 0) -> None:
        node = self.node_of(rank)
        pid = self.pids[rank]
        self.emit(node, t, f"{node.host}:{pid}:{pid + tid_off} [{rank % self.rpn}] NCCL INFO {msg}")

    def glog_rank(self, rank: int, t: float, level: str, where: str, msg: str) -> None:
        node = self.node_of(rank)
        self.emit(node, t, f"[rank{rank}]:[{level}{_glog(t + node.skew, 9)} {where}] {msg}")

    def torchrun_log(self, node: _Node, t: float, level: str, where: str, msg: str) -> None:
        self.emit(node, t, f"{level}{_glog(t + node.skew)} {node.torchrun_pid} {where}] {msg}")

    def rank_lines(self, rank: int, t: float, *lines: str) -> None:
        node = self.node_of(rank)
        self.emit(node, t, *(f"[rank{rank}]:{line}" for line in lines))

    # -- building blocks -------------------------------------------------------------------
    def baseline(self) -> None:
        """Boot lines, benign kernel/syslog noise, job start, NCCL init and training progress."""
        rng = self.rng
        for node in self.nodes:
            b = node.boot
            self.kern(
                node,
                b + 0.000001,
                "Linux version 5.15.0-124-generic (buildd@lcy02-amd64-089) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #134-Ubuntu SMP Fri Sep 27 20:20:17 UTC 2024 (Ubuntu 5.15.0-124.134-generic 5.15.163)",
                "Command line: BOOT_IMAGE=/vmlinuz-5.15.0-124-generic root=UUID=3b1f0c6e-4f7a-4c55-9a7e-2d0e8a1f6c11 ro iommu=pt pci=realloc=off",
                syslog=False,
            )
            self.kern(node, b + 12.48, f"mlx5_core {HCA_BUS}: firmware version: 28.39.1002", syslog=False)
            self.kern(node, b + 19.913, "nvidia: module license 'NVIDIA' taints kernel.", syslog=False)
            self.kern(node, b + 19.97, "nvidia-nvlink: Nvlink Core is being initialized, major device number 508", syslog=False)
            self.kern(
                node,
                b + 20.31,
                "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024",
                syslog=False,
            )
            self.kern(node, b + 21.02, "nvidia-peermem: module verification failed: signature and/or required key missing - tainting kernel", syslog=False)
            self.kern(node, b + 24.66, "IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready", syslog=False)
            # noise inside (and around) the job window
            t = self.start - rng.uniform(300, 900)
            horizon = self.end + 30
            while t < horizon:
                t += rng.expovariate(1 / 300.0)
                self._noise(node, t)
            self.sys(node, self.start + 0.4, f"slurmd[{node.slurmd_pid}]", f"slurmd: launch task StepId={self.job_id}.0 request from UID:{self.uid} GID:{self.uid} HOST:{self.batch.ip} PORT:{rng.randrange(30000, 60000)}")
            self.sys(node, self.start + 0.2, "systemd[1]", f"Started Slurm job {self.job_id} extern step.")
        self.sys(self.batch, self.start, f"slurmd[{self.batch.slurmd_pid}]", f"slurmd: Launching batch job {self.job_id} for UID {self.uid}")

        # job output: launch, NCCL init, progress
        t0 = self.start + 2
        self.emit(None, t0, f"+ srun --kill-on-bad-exit=1 torchrun --nnodes={len(self.nodes)} --nproc-per-node={self.rpn} --rdzv-backend=c10d --rdzv-endpoint={self.batch.host}:29500 {self.script} --config configs/run.yaml")
        for node in self.nodes[: min(4, len(self.nodes))]:
            self.emit(node, t0 + 3, "W" + _glog(t0 + 3 + node.skew) + f" {node.torchrun_pid} torch/distributed/run.py:793] *****************************************",
                      "W" + _glog(t0 + 3 + node.skew) + f" {node.torchrun_pid} torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed.")
        tinit = self.start + 25
        r0 = 0
        self.nccl_info(r0, tinit, f"Bootstrap : Using ib0:{self.batch.ip}<0>")
        self.nccl_info(r0, tinit, f"NCCL version {self.nccl_version}")
        comm = f"0x{rng.getrandbits(48):012x}"
        commid = f"0x{rng.getrandbits(64):016x}"
        for rank in range(self.nranks):
            node = self.node_of(rank)
            local = rank % self.rpn
            tr = tinit + 0.5 + rng.random() * 2
            self.nccl_info(rank, tr, f"NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB ib0:{node.ip}<0>")
        for rank in range(self.nranks):
            local = rank % self.rpn
            bus = self.gpu_bus(local)
            busid = f"{int(bus.split(':')[1], 16):x}000"
            tr = tinit + 6 + rng.random() * 2
            self.nccl_info(rank, tr, f"comm {comm} rank {rank} nranks {self.nranks} cudaDev {local} nvmlDev {local} busId {busid} commId {commid} - Init COMPLETE")
        # a couple of harmless warnings from random ranks
        for _ in range(2):
            rank = rng.randrange(self.nranks)
            self.rank_lines(rank, tinit + 20 + rng.random() * 5,
                            "/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:1399: FutureWarning: `torch.cpu.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cpu', args...)` instead.",
                            "  with device_autocast_ctx, torch.cpu.amp.autocast(**cpu_autocast_kwargs), recompute_context:  # type: ignore[attr-defined]")

    def _noise(self, node: _Node, t: float) -> None:
        rng = self.rng
        r = rng.randrange(12)
        if r == 0:
            self.kern(node, t, f"mlx5_core {HCA_BUS}: Port module event: module 0, Cable plugged")
        elif r == 1:
            page = rng.randrange(0x10000, 0xFFFFF)
            self.kern(node, t, f"EDAC MC{rng.randrange(2)}: 1 CE memory read error on CPU_SrcID#{rng.randrange(2)}_MC#{rng.randrange(2)}_Chan#{rng.randrange(4)}_DIMM#0 (channel:{rng.randrange(4)} slot:0 page:0x{page:x} offset:0x0 grain:32 syndrome:0x0 - err_code:0x0000:0x009f socket:0 imc:0 rank:1 bg:0 ba:2 row:0x{rng.randrange(0x1000, 0xffff):x} col:0x3c8)")
        elif r == 2:
            port = GPU_ROOT_PORT[rng.randrange(8)]
            self.kern(node, t,
                      f"pcieport {port}: AER: Corrected error received: {port}",
                      f"pcieport {port}: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
                      f"pcieport {port}:   device [8086:352a] error status/mask=00000001/00002000",
                      f"pcieport {port}:    [ 0] RxErr                  (First)")
        elif r == 3:
            self.kern(node, t, f"perf: interrupt took too long ({rng.randrange(2501, 4000)} > 2500), lowering kernel.perf_event_max_sample_rate to {rng.randrange(40000, 79000)}")
        elif r == 4:
            self.kern(node, t, f"nvidia-peermem nv_mem_client_get_pages: peer memory client registered, pages pinned (context {rng.getrandbits(32):08x})")
        elif r == 5:
            self.sys(node, t, "systemd[1]", f"Started Session {rng.randrange(100, 9000)} of User root.")
        elif r == 6:
            self.sys(node, t, f"CRON[{rng.randrange(10000, 99999)}]", "(root) CMD (/usr/sbin/nhc -d >/dev/null 2>&1)")
        elif r == 7:
            self.sys(node, t, f"chronyd[{rng.randrange(700, 900)}]", f"Selected source 10.0.0.{rng.randrange(1, 4)} (ntp{rng.randrange(1, 3)}.cluster.internal)")
        elif r == 8:
            self.sys(node, t, "systemd[1]", "Starting Cleanup of Temporary Directories...", "systemd-tmpfiles-clean.service: Deactivated successfully.", "Finished Cleanup of Temporary Directories.")
        elif r == 9:
            self.sys(node, t, f"nvidia-persistenced[{rng.randrange(1100, 1300)}]", "Verbose syslog connection opened")
        elif r == 10:
            self.sys(node, t, f"dcgm-exporter[{rng.randrange(3000, 3900)}]", 'level=info msg="Collecting metrics" interval=30000ms')
        else:
            self.kern(node, t, f"audit: type=1400 audit({int(t)}.{rng.randrange(1000):03d}:{rng.randrange(100, 999)}): apparmor=\"DENIED\" operation=\"open\" class=\"file\" profile=\"snap.lxd.activate\" name=\"/proc/{rng.randrange(1000, 9999)}/mountinfo\" pid={rng.randrange(1000, 9999)} comm=\"snap-exec\" requested_mask=\"r\" denied_mask=\"r\" fsuid=0 ouid=0")

    def progress(self, until: float, every: float = 90.0) -> int:
        """Rank 0 training progress lines from start until `until`; returns the last step."""
        rng = self.rng
        t = self.start + 60
        step = 0
        loss = 10.5
        while t < until:
            step += 50
            loss = max(1.6, loss * rng.uniform(0.965, 0.999))
            node = self.nodes[0]
            self.emit(node, t, f"[rank0]:iteration {step:7d}/  200000 | consumed samples: {step * 512:11d} | elapsed time per iteration (ms): {rng.uniform(1800, 2100):.1f} | learning rate: {3e-4 * min(1, step / 2000):.3E} | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {rng.uniform(0.2, 1.5):.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |")
            t += every * rng.uniform(0.9, 1.1)
        return step

    def watchdog_timeouts(self, ranks: list[int], t_issue: float, seq: int) -> float:
        """PyTorch watchdog timeouts on `ranks` for a collective issued at t_issue; returns the last time."""
        rng = self.rng
        last = t_issue
        numel = rng.choice((1, 4096, 33554432, 131072000))
        for rank in ranks:
            ran = WATCHDOG_MS + rng.randrange(20, 900)
            t = t_issue + ran / 1000.0
            last = max(last, t)
            work = f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, NumelOut={numel}, Timeout(ms)={WATCHDOG_MS})"
            self.glog_rank(rank, t, "E", "ProcessGroupNCCL.cpp:632", f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out.")
            self.glog_rank(rank, t + 0.001, "E", "ProcessGroupNCCL.cpp:2271", f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]  failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, last completed work: {seq - 1}")
            self.glog_rank(rank, t + 0.002, "E", "ProcessGroupNCCL.cpp:1664", f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread terminated with exception: [Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out.")
        return last

    def torchrun_failure(self, node: _Node, t: float, rank: int, exitcode: int, *, others: int = 0) -> None:
        """torchrun's failure report on `node` naming `rank` as the root cause."""
        local = rank % self.rpn
        pid = self.pids[rank]
        stamp = time.strftime("%Y-%m-%d_%H:%M:%S", _tm(t + node.skew))
        if exitcode < 0:
            sig = {-6: "SIGABRT", -9: "SIGKILL", -11: "SIGSEGV", -15: "SIGTERM", -7: "SIGBUS"}[exitcode]
            tb = f"Signal {-exitcode} ({sig}) received by PID {pid}"
        else:
            tb = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        self.torchrun_log(node, t, "E", "torch/distributed/elastic/multiprocessing/api.py:869", f"failed (exitcode: {exitcode}) local_rank: {local} (pid: {pid}) of binary: /usr/bin/python3")
        failures = ["  <NO_OTHER_FAILURES>"]
        if others:
            failures = []
            for i, other in enumerate(r for r in self.ranks_of(node) if r != rank):
                if i >= others:
                    break
                failures += [f"[{i + 1}]:", f"  time      : {stamp}", f"  host      : {node.host}", f"  rank      : {other} (local_rank: {other % self.rpn})",
                             f"  exitcode  : {exitcode} (pid: {self.pids[other]})", "  error_file: <N/A>",
                             f"  traceback : Signal {-exitcode} ({sig}) received by PID {self.pids[other]}" if exitcode < 0 else f"  traceback : {tb}"]
        self.emit(node, t + 0.05,
                  "Traceback (most recent call last):",
                  '  File "/usr/local/bin/torchrun", line 8, in <module>',
                  "    sys.exit(main())",
                  '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 355, in wrapper',
                  "    return f(*args, **kwargs)",
                  '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 263, in launch_agent',
                  "    raise ChildFailedError(",
                  "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                  "============================================================",
                  f"{self.script} FAILED",
                  "------------------------------------------------------------",
                  "Failures:", *failures,
                  "------------------------------------------------------------",
                  "Root Cause (first observed failure):",
                  "[0]:",
                  f"  time      : {stamp}",
                  f"  host      : {node.host}",
                  f"  rank      : {rank} (local_rank: {local})",
                  f"  exitcode  : {exitcode} (pid: {pid})",
                  "  error_file: <N/A>",
                  f"  traceback : {tb}",
                  "============================================================")

    def srun_exit(self, node: _Node, t: float, code: int | str) -> None:
        what = f"Exited with exit code {code}" if isinstance(code, int) else code
        self.out.append((t, self._next(), f"srun: error: {node.host}: task {node.index}: {what}"))

    def step_abort(self, t: float, reason: str = "") -> None:
        if not reason:  # srun --kill-on-bad-exit ends the step after a task failed
            self.out.append((t - 0.01, self._next(), f"srun: Terminating StepId={self.job_id}.0"))
        self.out.append((t, self._next(), "srun: Job step aborted: Waiting up to 32 seconds for job step to finish."))
        stamp = iso(t + self.batch.skew)
        self.out.append((t + 0.01, self._next(), f"slurmstepd: error: *** STEP {self.job_id}.0 ON {self.batch.host} CANCELLED AT {stamp}{reason} ***"))

    def sigterm_workers(self, node: _Node, t: float) -> None:
        self.torchrun_log(node, t, "W", "torch/distributed/elastic/agent/server/api.py:704", "Received Signals.SIGTERM death signal, shutting down workers")
        for rank in list(self.ranks_of(node))[:2]:
            self.torchrun_log(node, t + 0.001, "W", "torch/distributed/elastic/multiprocessing/api.py:897", f"Sending process {self.pids[rank]} closing signal SIGTERM")

    def kill_rest(self, t: float, failed: set[int], code: int | str = 1) -> float:
        """srun tears down the step after a task failed: SIGTERM on the other nodes."""
        for node in self.nodes:
            if node.index in failed:
                continue
            self.sigterm_workers(node, t + 0.2 + self.rng.random())
        self.step_abort(t + 1.5)
        return t + 3

    def python_traceback(self, rank: int, t: float, frames: list[tuple[str, int, str, str]], exc: str) -> None:
        lines = ["Traceback (most recent call last):"]
        for path, line, fn, code in frames:
            lines += [f'  File "{path}", line {line}, in {fn}', f"    {code}"]
        lines += exc.split("\n")
        self.rank_lines(rank, t, *lines)

    def train_frames(self) -> list[tuple[str, int, str, str]]:
        return [
            (f"/home/{self.user}/llm/{self.script}", 412, "<module>", "main(cfg)"),
            (f"/home/{self.user}/llm/{self.script}", 377, "main", "loss = train_step(model, batch, optimizer)"),
            (f"/home/{self.user}/llm/trainer.py", 158, "train_step", "outputs = model(**batch)"),
        ]

    def gpu_preamble(self, node: _Node, t: float, bus: str) -> None:
        uuid = "GPU-%08x-%04x-%04x-%04x-%012x" % tuple(self.rng.getrandbits(b) for b in (32, 16, 16, 16, 48))
        self.kern(node, t, f"NVRM: GPU at PCI:{bus}: {uuid}", f"NVRM: GPU Board Serial Number: 1652{self.rng.randrange(10**8, 10**9)}")

    def finish_after_hang(self, failing_ranks: list[int], t_fault: float, seq: int, skip_nodes: set[int] = frozenset()) -> float:
        """Everyone in failing_ranks times out 10 min after t_fault; torchrun and srun end the step."""
        last = self.watchdog_timeouts(failing_ranks, t_fault + self.rng.uniform(0.05, 0.4), seq)
        t = last + 62  # watchdog waits for flight-recorder dumps before throwing
        by_node: dict[int, list[int]] = {}
        for r in failing_ranks:
            by_node.setdefault(r // self.rpn, []).append(r)
        first = None
        for idx in sorted(by_node):
            if idx in skip_nodes:
                continue
            node = self.nodes[idx]
            tn = t + self.rng.uniform(0, 3)
            self.torchrun_failure(node, tn, by_node[idx][0], -6, others=min(1, len(by_node[idx]) - 1))
            first = first if first is not None and first[0] <= tn else (tn, node)
            self.srun_exit(node, tn + 0.5, 1)
        end = (first[0] if first else t) + 2
        self.step_abort(end)
        return end + 30

    # -- writing ---------------------------------------------------------------------------
    def write(self, out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        job = {
            "job_id": self.job_id,
            "user": self.user,
            "state": self.state,
            "exit_code": self.exit_code,
            "start": iso(self.start),
            "end": iso(self.end),
            "nodes": [n.host for n in self.nodes],
        }
        (out_dir / "job.json").write_text(json.dumps(job, indent=2) + "\n", encoding="utf-8")
        self.out.sort(key=lambda x: (x[0], x[1]))
        (out_dir / f"slurm-{self.job_id}.out").write_text("".join(line + "\n" for _, _, line in self.out), encoding="utf-8")
        for node in self.nodes:
            folder = out_dir / node.host
            folder.mkdir(exist_ok=True)
            cut = node.cut if node.cut is not None else float("inf")
            horizon = min(cut, self.end + 45)
            kern = sorted(x for x in self.kernel[node.host] if x[0] <= horizon)
            if (node.host, "dmesg") not in self.missing:
                (folder / "dmesg.txt").write_text("".join(self._dmesg_line(node, t, m) for t, _, m in kern), encoding="utf-8")
            if node.syslog_fmt and (node.host, "syslog") not in self.missing:
                logs = sorted(x for x in self.syslog[node.host] if node.boot + 30 <= x[0] <= horizon)
                (folder / node.syslog_name).write_text("".join(self._syslog_line(node, t, p, m) for t, _, p, m in logs), encoding="utf-8")

    def _dmesg_line(self, node: _Node, t: float, msg: str) -> str:
        local = t + node.skew
        if node.dmesg_fmt == "boot":
            return f"[{local - node.boot:12.6f}] {msg}\n"
        if node.dmesg_fmt == "ctime":
            return f"[{_ctime(local)}] {msg}\n"
        return f"{iso(local)},{_frac(local, 6)}+00:00 {msg}\n"

    def _syslog_line(self, node: _Node, t: float, prog: str, msg: str) -> str:
        local = t + node.skew
        if node.syslog_fmt == "rfc3164":
            return f"{_rfc3164(local)} {node.host} {prog}: {msg}\n"
        return f"{iso(local)}+0000 {node.host} {prog}: {msg}\n"

    # -- ground truth ----------------------------------------------------------------------
    def truth(self, domain: str, category: str, culprits: list[_Node], qualities: tuple[str, ...], drain: list[_Node],
              description: str, fault_time: float | None = None, alternatives: list[Expectation] | None = None) -> GroundTruth:
        return GroundTruth(
            scenario=self.name,
            domain=domain,
            category=category,
            culprit_nodes=sorted(n.host for n in culprits),
            allowed_qualities=qualities,
            drain_nodes=sorted(n.host for n in drain),
            description=description,
            job_id=self.job_id,
            nodes=[n.host for n in self.nodes],
            fault_time=iso(fault_time) if fault_time is not None else None,
            alternatives=alternatives or [],
        )


# --------------------------------------------------------------------------------------------
# Scenario builders


def _fault_time(job: _Job) -> float:
    return job.start + job.rng.uniform(1500, 2700)


def _gpu_hang(job: _Job, lines: Callable[[_Node, float, int, str], None], domain: str, category: str, desc: str,
              crash: Callable[[int, float], None] | None = None) -> GroundTruth:
    """A GPU fault on one GPU of one node; that rank stops, everybody else times out 10 min later."""
    tf = _fault_time(job)
    job.progress(tf)
    node = job.pick_node()
    local = job.rng.randrange(job.rpn)
    bus = job.gpu_bus(local)
    rank = node.index * job.rpn + local
    lines(node, tf, rank, bus)
    if crash:
        crash(rank, tf + 0.5)
    seq = job.rng.randrange(20000, 90000)
    others = [r for r in range(job.nranks) if r != rank]
    job.end = job.finish_after_hang(others, tf, seq)
    return job.truth(domain, category, [node], HARD, [node], desc, tf)


def _xid(bus: str, xid: int, rest: str, pid: int | None = None, name: str = "python3") -> str:
    who = f"pid={pid}, name={name}, " if pid is not None else "pid='<unknown>', name=<unknown>, "
    return f"NVRM: Xid (PCI:{bus}): {xid}, {who}{rest}"


def s_gpu_fell_off_bus(job: _Job) -> GroundTruth:
    def lines(node: _Node, t: float, rank: int, bus: str) -> None:
        job.gpu_preamble(node, t - 0.002, bus)
        job.kern(node, t, _xid(bus, 79, "GPU has fallen off the bus."))
        job.kern(node, t + 0.001, f"NVRM: GPU {bus}.0: GPU has fallen off the bus.")
        job.kern(node, t + 0.4, f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")

    return _gpu_hang(job, lines, "gpu", "gpu_fell_off_bus", "Xid 79 on one GPU; NCCL watchdog timeouts on every other rank 10 min later")


def s_gpu_uncorrectable_ecc(job: _Job) -> GroundTruth:
    use95 = job.rng.random() < 0.5

    def lines(node: _Node, t: float, rank: int, bus: str) -> None:
        pid = job.pids[rank]
        job.gpu_preamble(node, t - 0.002, bus)
        if use95:
            job.kern(node, t, _xid(bus, 95, "Uncontained: FBHUB. RST: Yes, D-RST: No", pid))
        else:
            job.kern(node, t, _xid(bus, 48, "Ch 00000008, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 4, subpartition 0.", pid))
        job.kern(node, t + 0.01, _xid(bus, 45, "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x3c008", pid))
        job.kern(node, t + 0.02, _xid(bus, 45, "Ch 00000009, errorString CTX SWITCH TIMEOUT, Info 0x3c009", pid))

    def crash(rank: int, t: float) -> None:
        job.python_traceback(rank, t, job.train_frames(), "RuntimeError: CUDA error: uncorrectable ECC error encountered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")

    return _gpu_hang(job, lines, "gpu", "gpu_uncorrectable_ecc", f"Xid {'95' if use95 else '48'} (uncorrectable ECC) on one GPU; the rank dies with a CUDA ECC error, the others time out", crash)


def s_gpu_row_remap_failure(job: _Job) -> GroundTruth:
    def lines(node: _Node, t: float, rank: int, bus: str) -> None:
        pid = job.pids[rank]
        job.gpu_preamble(node, t - 0.002, bus)
        job.kern(node, t - 0.001, _xid(bus, 63, "Row Remapper: New row marked for remapping, reset gpu to activate.", pid))
        job.kern(node, t, _xid(bus, 64, "Row Remapper: Failed to remap row (bank 7, row 0x1a2c3): no spare rows left in bank, reset gpu.", pid))

    return _gpu_hang(job, lines, "gpu", "gpu_row_remap_failure", "Xid 63 then Xid 64 (row remapping failure) on one GPU; peers time out")


def s_gpu_nvlink(job: _Job) -> GroundTruth:
    def lines(node: _Node, t: float, rank: int, bus: str) -> None:
        job.gpu_preamble(node, t - 0.002, bus)
        job.kern(node, t, _xid(bus, 74, "NVLink: fatal error detected on link 11(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", job.pids[rank]))

    return _gpu_hang(job, lines, "gpu", "gpu_nvlink", "Xid 74 (fatal NVLink error) on one GPU; peers time out")


def s_gpu_firmware(job: _Job) -> GroundTruth:
    def lines(node: _Node, t: float, rank: int, bus: str) -> None:
        job.gpu_preamble(node, t - 0.002, bus)
        job.kern(node, t, _xid(bus, 119, "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 76 (GSP_RM_CONTROL) (0x2080014b 0x5).", job.pids[rank]))
        job.kern(node, t + 0.001,
                 f"NVRM: GPU{rank % job.rpn} GSP RPC buffer contains function 76 (GSP_RM_CONTROL) and data 0x000000002080014b 0x0000000000000005.",
                 f"NVRM: GPU{rank % job.rpn} RPC history (CPU -> GSP):")
        job.kern(node, t + 6.2, _xid(bus, 119, "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 10 (FREE) (0xa55a0020 0x0).", job.pids[rank]))
        job.kern(node, t + 6.5, f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")

    return _gpu_hang(job, lines, "gpu", "gpu_firmware", "Xid 119 (GSP RPC timeout) then Xid 154 on one GPU; peers time out")


def s_gpu_hardware_other(job: _Job) -> GroundTruth:
    def lines(node: _Node, t: float, rank: int, bus: str) -> None:
        job.gpu_preamble(node, t - 0.002, bus)
        job.kern(node, t, _xid(bus, 46, "GPU stopped processing"))
        job.kern(node, t + 0.3, _xid(bus, 45, "Ch 00000010, errorString CTX SWITCH TIMEOUT, Info 0x1c010", job.pids[rank]))

    return _gpu_hang(job, lines, "gpu", "gpu_hardware_other", "Xid 46 (GPU stopped processing) on one GPU followed by Xid 45; peers time out")


def _ib_errors(job: _Job, reporters: list[int], peer: _Node, t: float) -> None:
    """NCCL IB completion errors on `reporters` naming `peer`'s IP, then PyTorch's ncclRemoteError."""
    rng = job.rng
    for rank in reporters:
        tr = t + rng.uniform(0, 1.5)
        port = rng.randrange(32768, 61000)
        vendor = (129, 244, 249)[rng.randrange(3)]
        if job.nccl_new:
            msg12 = f"NET/IB: Got completion from peer {peer.ip}<{port}> with status=12 opcode=129 len=0 vendor err {vendor} (Recv) hca mlx5_{rank % 4}"
            msg5 = f"NET/IB: Got completion from peer {peer.ip}<{port}> with status=5 opcode=0 len=0 vendor err 249 (Send) hca mlx5_{rank % 4}"
            where = "transport/net_ib.cc:2341"
        else:
            msg12 = f"NET/IB : Got completion from peer {peer.ip}<{port}> with status=12 opcode=129 len=0 vendor err {vendor} (Recv)"
            msg5 = f"NET/IB : Got completion from peer {peer.ip}<{port}> with status=5 opcode=0 len=0 vendor err 249 (Send)"
            where = "transport/net_ib.cc:1696"
        job.nccl_warn(rank, tr, where, msg12)
        job.nccl_info(rank, tr + 0.0001, "transport/net.cc:1298 -> 6", tid_off=57)
        job.nccl_warn(rank, tr + 0.002, where, msg5)
        job.glog_rank(rank, tr + 0.4, "E", "ProcessGroupNCCL.cpp:1664",
                      f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version {job.nccl_version.split('+')[0]}")
        job.rank_lines(rank, tr + 0.4, "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.", "Last error:", msg12)


def _network_fault(job: _Job, peer: _Node | None, t: float, reporters_per_peer: int = 6) -> float:
    """IB errors on ranks of the neighbouring nodes; torchrun aborts there; srun ends the step."""
    n = len(job.nodes)
    if peer is not None:
        neigh = [job.nodes[(peer.index - 1) % n], job.nodes[(peer.index + 1) % n]]
        reporters = sorted({r for nb in neigh if nb is not peer for r in list(job.ranks_of(nb))[: max(1, reporters_per_peer // 2)]})
        _ib_errors(job, reporters, peer, t)
    else:
        # errors spread over several pairs: no single node is named
        pairs = min(3, n // 2) or 1
        starts = job.rng.sample(range(n), k=min(n, pairs * 2))
        reporters = []
        for a, b in zip(starts[::2], starts[1::2] or starts[:1]):
            rep = list(job.ranks_of(job.nodes[a]))[:2]
            _ib_errors(job, rep, job.nodes[b], t + job.rng.uniform(0, 20))
            reporters += rep
    t_exit = t + 25
    failed_nodes = sorted({r // job.rpn for r in reporters})
    for idx in failed_nodes:
        node = job.nodes[idx]
        first = min(r for r in reporters if r // job.rpn == idx)
        job.torchrun_failure(node, t_exit + job.rng.random(), first, -6)
        job.srun_exit(node, t_exit + 1.5, 1)
    return job.kill_rest(t_exit + 2, set(failed_nodes)) + 30


def s_link_down(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    node = job.pick_node()
    if node.syslog_fmt is None:  # the carrier loss is logged by systemd-networkd: keep a syslog here
        node.syslog_fmt, node.syslog_name = "rfc3164", "syslog"
    job.kern(node, tf, f"mlx5_core {HCA_BUS} ib0: Link down")
    job.sys(node, tf + 0.05, f"systemd-networkd[{node.networkd_pid}]", "ib0: Lost carrier")
    job.end = _network_fault(job, node, tf + job.rng.uniform(28, 33))
    return job.truth("network", "link_down", [node], HARD, [node], "IB link down on one node (kernel + Lost carrier); peers report NCCL IB status 12 naming its IP", tf)


def s_transport_error(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    job.end = _network_fault(job, None, tf)
    return job.truth("network", "transport_error", [], ("likely", "ambiguous", "insufficient"), [],
                     "NCCL IB completion errors (status 12) between several node pairs, no kernel evidence anywhere", tf)


def s_fabric_other(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    node = job.pick_node()
    job.kern(node, tf, f"mlx5_core {HCA_BUS}: poll_health:852:(pid 0): device's health compromised - reached miss count")
    job.kern(node, tf + 0.001,
             f"mlx5_core {HCA_BUS}: print_health_info:458:(pid 0): Health issue observed, firmware internal error, severity(2) ERROR:",
             f"mlx5_core {HCA_BUS}: print_health_info:462:(pid 0): synd 0x8: unrecoverable hardware error")
    job.end = _network_fault(job, node, tf + job.rng.uniform(28, 33))
    return job.truth("network", "fabric_other", [node], HARD, [node], "ConnectX HCA health failure (mlx5 unrecoverable hardware error) on one node; peers report NCCL IB errors", tf)


def s_node_failure(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    node = job.pick_node()
    node.cut = tf - job.rng.uniform(1, 30)  # its logs stop before the failure
    if node.syslog_fmt is None or job.rng.random() < 0.5:
        job.missing.add((node.host, "syslog"))
    reporters = sorted({r for nb in (job.nodes[(node.index - 1) % len(job.nodes)], job.nodes[(node.index + 1) % len(job.nodes)])
                        if nb is not node for r in list(job.ranks_of(nb))[:2]})
    _ib_errors(job, reporters, node, tf + 30)
    tk = tf + 300 + job.rng.uniform(0, 20)  # SlurmdTimeout
    job.out.append((tk, job._next(), f"srun: error: Node failure on {node.host}"))
    job.out.append((tk + 0.1, job._next(), f"slurmstepd: error: *** JOB {job.job_id} ON {job.batch.host} CANCELLED AT {iso(tk + job.batch.skew)} DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"))
    job.step_abort(tk + 0.5)
    job.state, job.exit_code, job.end = "NODE_FAIL", "0:0", tk + 2
    # Slurm already sets a failed node DOWN, so not recommending a drain is acceptable too
    alt = Expectation("host", "node_failure", (node.host,), HARD, ())
    return job.truth("host", "node_failure", [node], HARD, [node], "Job state NODE_FAIL; one node's logs stop before the failure and peers lose it on IB", tf, [alt])


def s_pcie_error(job: _Job) -> GroundTruth:
    def lines(node: _Node, t: float, rank: int, bus: str) -> None:
        port = GPU_ROOT_PORT[GPU_BUS.index(bus)]
        dev = f"{bus}.0"
        job.kern(node, t,
                 f"pcieport {port}: AER: Uncorrected (Fatal) error received: {dev}",
                 f"nvidia {dev}: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)",
                 f"nvidia {dev}:   device [10de:2330] error status/mask=00000020/00000000",
                 f"nvidia {dev}:    [ 5] SDES                   (First)",
                 f"pcieport {port}: AER: Root Port link has been reset (0)",
                 f"pcieport {port}: AER: device recovery failed")

    return _gpu_hang(job, lines, "host", "pcie_error", "PCIe AER Uncorrected (Fatal) error on a GPU's link; peers time out")


def s_kernel_fault(job: _Job) -> GroundTruth:
    def lines(node: _Node, t: float, rank: int, bus: str) -> None:
        pid = job.pids[rank]
        job.kern(node, t,
                 "BUG: unable to handle page fault for address: ffffb8a2c4f3a008",
                 "#PF: supervisor read access in kernel mode",
                 "#PF: error_code(0x0000) - not-present page",
                 "Oops: 0000 [#1] SMP NOPTI",
                 f"CPU: 57 PID: {pid} Comm: python3 Tainted: P           OE     5.15.0-124-generic #134-Ubuntu",
                 "Hardware name: NVIDIA DGXH100/DGXH100, BIOS 1.5.0 05/24/2024",
                 "RIP: 0010:__list_del_entry_valid+0x2a/0xa0",
                 "Call Trace:",
                 " <TASK>",
                 " ? __die_body.cold+0x1a/0x1f",
                 " ? page_fault_oops+0x13d/0x2b0",
                 " ib_umem_release+0x3a/0xb0 [ib_uverbs]",
                 " </TASK>",
                 "---[ end trace 8f2c1d0a6b3e4f11 ]---")
        job.kern(node, t + 26.0, f"watchdog: BUG: soft lockup - CPU#57 stuck for 26s! [python3:{pid}]")

    return _gpu_hang(job, lines, "host", "kernel_fault", "Kernel oops (BUG: unable to handle page fault) then soft lockup on one node; peers time out")


def s_host_hardware_other(job: _Job) -> GroundTruth:
    def lines(node: _Node, t: float, rank: int, bus: str) -> None:
        job.kern(node, t,
                 "mce: [Hardware Error]: Machine check events logged",
                 "mce: [Hardware Error]: CPU 41: Machine Check: 0 Bank 13: bd80000000100134",
                 "mce: [Hardware Error]: RIP !INEXACT! 33:<00007f3c2b1d4e10>",
                 "mce: [Hardware Error]: TSC 2c1b3f4a9d81e ADDR 5f7e3c2000 MISC 86 PPIN 2b4c6d8e0f1a3c5e",
                 f"mce: [Hardware Error]: PROCESSOR 0:806f8 TIME {int(t)} SOCKET 1 APIC 52 microcode 2b000590",
                 "Memory failure: 0x5f7e3c2: Sending SIGBUS to python3:%d due to hardware memory corruption" % job.pids[rank],
                 "Memory failure: 0x5f7e3c2: recovery action for dirty LRU page: Recovered")
        job.rank_lines(rank, t + 0.01, "Fatal Python error: Bus error", "", "Thread 0x00007f3c2b1d4740 (most recent call first):",
                       f'  File "/home/{job.user}/llm/data/loader.py", line 88 in __getitem__')

    return _gpu_hang(job, lines, "host", "host_hardware_other", "Uncorrected machine check (MCE) with memory failure on one node; peers time out")


def s_filesystem_error(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    ost = f"lustre-OST{job.rng.randrange(16):04x}"
    nid = f"10.2.0.{job.rng.randrange(10, 60)}@o2ib"
    for node in job.nodes:
        t = tf + job.rng.uniform(0, 0.8)
        client = f"{ost}-osc-ffff{job.rng.getrandbits(32):08x}"
        job.kern(node, t,
                 f"LustreError: 11-0: {client}: operation ost_write to node {nid} failed: rc = -107",
                 f"Lustre: {client}: Connection to {ost} (at {nid}) was lost; in progress operations using this service will wait for recovery to complete")
        job.kern(node, t + 100.5, f"LustreError: 167-0: {client}: This client was evicted by {ost}; in progress operations using this service will fail.")
    rank = 0
    job.python_traceback(rank, tf + 101, [
        (f"/home/{job.user}/llm/{job.script}", 398, "main", "save_checkpoint(model, optimizer, step, cfg.ckpt_dir)"),
        (f"/home/{job.user}/llm/ckpt.py", 54, "save_checkpoint", "torch.save(state, path)"),
    ], f"OSError: [Errno 108] Cannot send after transport endpoint shutdown: '/lustre/scratch/{job.user}/ckpt/iter_0012000/model_optim_rng.pt'")
    job.torchrun_failure(job.nodes[0], tf + 103, rank, 1)
    job.srun_exit(job.nodes[0], tf + 104, 1)
    job.end = job.kill_rest(tf + 105, {0}) + 30
    return job.truth("storage", "filesystem_error", [], HARD, [], "Lustre OST connection lost and client evicted on every node at once; checkpoint write fails with EIO-like errno", tf)


def _app_failure(job: _Job, rank: int, t: float, lines: Callable[[int, float], None], exitcode: int = 1,
                 srun_msg: int | str = 1) -> float:
    """One rank fails; torchrun on its node reports it; srun kills the rest."""
    node = job.node_of(rank)
    lines(rank, t)
    job.torchrun_failure(node, t + 2.5, rank, exitcode)
    job.srun_exit(node, t + 3, srun_msg)
    return job.kill_rest(t + 3.2, {node.index}) + 30


def _app_rank(job: _Job, avoid: tuple[int, ...] = ()) -> int:
    node = job.pick_node(avoid)
    return node.index * job.rpn + job.rng.randrange(job.rpn)


def s_app_exception(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    rank = _app_rank(job)

    def lines(r: int, t: float) -> None:
        job.python_traceback(r, t, [*job.train_frames(), (f"/home/{job.user}/llm/data/loader.py", 131, "collate", "input_ids = torch.stack([s['input_ids'] for s in samples])")],
                             "RuntimeError: stack expects each tensor to be equal size, but got [4096] at entry 0 and [4095] at entry 3")

    job.end = _app_failure(job, rank, tf, lines)
    return job.truth("application", "app_exception", [job.node_of(rank)], HARD, [], "Python exception on one rank; torchrun's root-cause table names its host", tf)


def s_cuda_error(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    rank = _app_rank(job)
    node = job.node_of(rank)
    bus = job.gpu_bus(rank % job.rpn)
    job.kern(node, tf - 0.05, _xid(bus, 31, "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f2a_1c400000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ", job.pids[rank]))

    def lines(r: int, t: float) -> None:
        job.python_traceback(r, t, job.train_frames(),
                             "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")

    job.end = _app_failure(job, rank, tf, lines)
    return job.truth("application", "cuda_error", [node], HARD, [], "CUDA illegal memory access on one rank with an application-class Xid 31 in the kernel log", tf)


def s_gpu_oom(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    rank = _app_rank(job)

    def lines(r: int, t: float) -> None:
        job.python_traceback(r, t, job.train_frames(),
                             f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {r % job.rpn} has a total capacity of 79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. Of the allocated memory 74.12 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")

    job.end = _app_failure(job, rank, tf, lines)
    return job.truth("application", "gpu_oom", [job.node_of(rank)], HARD, [], "torch.OutOfMemoryError (CUDA out of memory) on one rank", tf)


def s_host_oom(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    rank = _app_rank(job)
    node = job.node_of(rank)
    pid = job.pids[rank]
    memcg = f"/slurm/uid_{job.uid}/job_{job.job_id}/step_0"
    job.kern(node, tf,
             "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
             f"CPU: 33 PID: {pid} Comm: python3 Tainted: P           OE     5.15.0-124-generic #134-Ubuntu",
             "memory: usage 2013265920kB, limit 2013265920kB, failcnt 4819",
             f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=step_0,mems_allowed=0-1,oom_memcg={memcg},task_memcg={memcg}/task_0,task=python3,pid={pid},uid={job.uid}",
             f"Memory cgroup out of memory: Killed process {pid} (python3) total-vm:402653184kB, anon-rss:251658240kB, file-rss:524288kB, shmem-rss:0kB, UID:{job.uid} pgtables:493568kB oom_score_adj:0")
    job.kern(node, tf + 0.9, f"oom_reaper: reaped process {pid} (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB")

    def lines(r: int, t: float) -> None:
        job.out.append((t + 1.0, job._next(), f"slurmstepd: error: Detected 1 oom_kill event in StepId={job.job_id}.0. Some of the step tasks have been OOM Killed."))

    job.end = _app_failure(job, rank, tf + 1, lines, exitcode=-9, srun_msg="Out Of Memory")
    job.state, job.exit_code = "OUT_OF_MEMORY", "0:125"
    return job.truth("application", "host_oom", [node], HARD, [], "Kernel memory-cgroup OOM killer kills one rank; slurmstepd reports the oom_kill event", tf)


def s_nccl_usage(job: _Job) -> GroundTruth:
    node = job.pick_node()
    ranks = list(job.ranks_of(node))
    a, b = ranks[0], ranks[1] if len(ranks) > 1 else ranks[0]
    t = job.start + 40
    busid = f"{int(job.gpu_bus(0).split(':')[1], 16):x}000"
    job.nccl_warn(b, t, "init.cc:1046", f"Duplicate GPU detected : rank {a} and rank {b} both on CUDA device {busid}")
    job.nccl_info(b, t + 0.001, "init.cc:1540 -> 5")
    err = (f"torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2052, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version {job.nccl_version.split('+')[0]}\n"
           f"ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\nDuplicate GPU detected : rank {a} and rank {b} both on CUDA device {busid}")
    job.python_traceback(b, t + 0.3, [(f"/home/{job.user}/llm/{job.script}", 88, "setup", "dist.barrier()"),
                                      ("/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py", 4166, "barrier", "work = group.barrier(opts=opts)")], err)
    job.torchrun_failure(node, t + 2, b, 1)
    job.srun_exit(node, t + 2.5, 1)
    job.end = job.kill_rest(t + 3, {node.index}) + 30
    return job.truth("application", "nccl_usage", [node], HARD, [], "ncclInvalidUsage (duplicate GPU: two ranks on one CUDA device) at start-up", t)


def s_app_killed_signal(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    rank = _app_rank(job)
    node = job.node_of(rank)
    pid = job.pids[rank]
    job.kern(node, tf, f"python3[{pid}]: segfault at 0 ip 00007f9c3a2b1c4d sp 00007ffd5e8f7a20 error 4 in libcustom_ops.so[7f9c3a200000+1c0000]",
             "Code: 48 8b 07 48 85 c0 74 0a 48 8b 40 08 c3 0f 1f 40 00 31 c0 c3 66 2e 0f 1f 84 00 00 00 00 00")

    def lines(r: int, t: float) -> None:
        job.rank_lines(r, t, "Fatal Python error: Segmentation fault", "", "Current thread 0x00007f9c4b8e1740 (most recent call first):",
                       f'  File "/home/{job.user}/llm/ops/fused.py", line 41 in forward')

    job.end = _app_failure(job, rank, tf, lines, exitcode=-11, srun_msg="Segmentation fault (core dumped)")
    return job.truth("application", "app_killed_signal", [node], HARD, [], "One rank dies of SIGSEGV in a custom extension (user-space segfault line in the kernel log)", tf)


def _scheduler_end(job: _Job, t: float, banner: str) -> None:
    for node in job.nodes:
        job.sigterm_workers(node, t + job.rng.uniform(0.1, 1.0))
    for node in job.nodes[: min(3, len(job.nodes))]:
        job.emit(node, t + 1.2, "Traceback (most recent call last):", '  File "/usr/local/bin/torchrun", line 8, in <module>', "    sys.exit(main())",
                 f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {node.torchrun_pid} got signal: 15")
    job.out.append((t, job._next(), f"slurmstepd: error: *** JOB {job.job_id} ON {job.batch.host} CANCELLED AT {iso(t + job.batch.skew)}{banner} ***"))
    job.step_abort(t + 0.3, banner)
    job.end = t + 35


def s_time_limit(job: _Job) -> GroundTruth:
    tl = job.start + 3600 + job.rng.uniform(0, 1)
    job.progress(tl)
    _scheduler_end(job, tl, " DUE TO TIME LIMIT")
    job.state, job.exit_code = "TIMEOUT", "0:15"
    return job.truth("scheduler", "time_limit", [], HARD, [], "Slurm time limit reached; torchrun agents get SIGTERM", tl)


def s_cancelled(job: _Job) -> GroundTruth:
    tc = _fault_time(job)
    job.progress(tc)
    _scheduler_end(job, tc, "")
    job.state, job.exit_code = "CANCELLED", "0:15"
    return job.truth("scheduler", "cancelled", [], HARD, [], "Job cancelled with scancel; workers get SIGTERM", tc)


def s_preempted(job: _Job) -> GroundTruth:
    tc = _fault_time(job)
    job.progress(tc)
    _scheduler_end(job, tc, " DUE TO PREEMPTION")
    job.state, job.exit_code = "PREEMPTED", "0:15"
    return job.truth("scheduler", "preempted", [], HARD, [], "Job preempted by a higher-priority job", tc)


def s_success(job: _Job) -> GroundTruth:
    te = job.start + job.rng.uniform(2400, 3300)
    job.progress(te - 30)
    job.emit(job.nodes[0], te - 20, "[rank0]:Saving checkpoint to /lustre/scratch/ckpt/iter_0020000 ... done", "[rank0]:Training finished.")
    for node in job.nodes:
        job.torchrun_log(node, te - 5 + job.rng.random(), "I", "torch/distributed/elastic/agent/server/api.py:879", "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.")
    job.state, job.exit_code, job.end = "COMPLETED", "0:0", te
    return job.truth("none", "success", [], HARD, [], "Job completed; logs hold only benign noise (corrected AER/EDAC, cable events)")


def s_hang_unattributed(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    node = job.pick_node()
    silent = set(job.ranks_of(node))
    seq = job.rng.randrange(20000, 90000)
    job.end = job.finish_after_hang([r for r in range(job.nranks) if r not in silent], tf, seq)
    return job.truth("unknown", "hang_unattributed", [node], ("likely",), [],
                     "Collective timeouts from every rank except those of one node, with no kernel evidence", tf)


def s_no_evidence(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    job.end = tf + 40
    job.state, job.exit_code = "FAILED", "1:0"
    return job.truth("unknown", "no_evidence", [], ("insufficient",), [], "Job FAILED with exit code 1, logs hold only noise")


def s_stale_xid79(job: _Job) -> GroundTruth:
    stale = job.pick_node()
    if stale.dmesg_fmt == "boot" and stale.syslog_fmt is None:
        stale.syslog_fmt = "rfc3164"
    bus = job.gpu_bus(job.rng.randrange(job.rpn))
    ts = job.start - job.rng.uniform(3 * 3600, 5 * 3600)
    job.gpu_preamble(stale, ts - 0.002, bus)
    job.kern(stale, ts, _xid(bus, 79, "GPU has fallen off the bus."))
    job.kern(stale, ts + 0.001, f"NVRM: GPU {bus}.0: GPU has fallen off the bus.")
    truth = s_app_exception(job)
    truth.scenario = "stale_xid79"
    truth.description = "Xid 79 hours before the job started (context only); the job fails with a Python exception elsewhere"
    truth.culprit_nodes = [h for h in truth.culprit_nodes]
    return truth


def s_forged_xid(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    rank = _app_rank(job)
    node = job.node_of(rank)
    bus = job.gpu_bus(rank % job.rpn)
    stamp = _ctime(tf - 1 + node.skew)
    job.emit(node, tf - 1, f"[{stamp}] NVRM: Xid (PCI:{bus}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
             f"[{stamp}] NVRM: GPU {bus}.0: GPU has fallen off the bus.")

    def lines(r: int, t: float) -> None:
        job.python_traceback(r, t, [(f"/home/{job.user}/llm/{job.script}", 377, "main", "chaos.maybe_inject(step)"),
                                    (f"/home/{job.user}/llm/chaos.py", 22, "maybe_inject", "raise RuntimeError(f'injected GPU failure on {socket.gethostname()}')")],
                             f"RuntimeError: injected GPU failure on {node.host}")

    job.end = _app_failure(job, rank, tf, lines)
    alt = Expectation("gpu", "gpu_fell_off_bus", (node.host,), ("ambiguous", "insufficient"), ())
    return job.truth("application", "app_exception", [node], HARD, [],
                     "Xid 79 lines printed by the job itself (untrusted: no drain, never confirmed); the job raises an exception", tf, [alt])


def s_dual_xid79(job: _Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    a = job.pick_node()
    b = job.pick_node(avoid=(a.index,))
    ranks = []
    for node, dt in ((a, 0.0), (b, job.rng.uniform(0.1, 0.9))):
        local = job.rng.randrange(job.rpn)
        bus = job.gpu_bus(local)
        job.gpu_preamble(node, tf + dt - 0.002, bus)
        job.kern(node, tf + dt, _xid(bus, 79, "GPU has fallen off the bus."))
        ranks.append(node.index * job.rpn + local)
    seq = job.rng.randrange(20000, 90000)
    job.end = job.finish_after_hang([r for r in range(job.nranks) if r not in ranks], tf, seq)
    return job.truth("gpu", "gpu_fell_off_bus", [a, b], ("ambiguous",), [a, b], "Two independent Xid 79 on two nodes within 1 s: cannot be ordered", tf)


def s_xid45_79_burst(job: _Job) -> GroundTruth:
    def lines(node: _Node, t: float, rank: int, bus: str) -> None:
        pid = job.pids[rank]
        job.gpu_preamble(node, t - 0.06, bus)
        for i, dt in enumerate((-0.05, -0.03)):
            job.kern(node, t + dt, _xid(bus, 45, f"Ch 0000000{i + 2}, errorString CTX SWITCH TIMEOUT, Info 0x{0x1c000 + i:x}", pid))
        job.kern(node, t, _xid(bus, 79, "GPU has fallen off the bus."))
        job.kern(node, t + 0.001, f"NVRM: GPU {bus}.0: GPU has fallen off the bus.")
        for i in range(6):
            job.kern(node, t + 0.01 * (i + 1), _xid(bus, 45, f"Ch 000000{i + 10:02x}, errorString CTX SWITCH TIMEOUT, Info 0x{0x1c010 + i:x}", job.pids[node.index * job.rpn + (i % job.rpn)]))

    return _gpu_hang(job, lines, "gpu", "gpu_fell_off_bus", "A burst of Xid 45 (follow-on) around an Xid 79 on one GPU")


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in sorted(
        [
            Scenario("gpu_fell_off_bus", "Xid 79 on one GPU, NCCL timeouts 10 min later", s_gpu_fell_off_bus),
            Scenario("gpu_uncorrectable_ecc", "Xid 48 or 95 on one GPU", s_gpu_uncorrectable_ecc),
            Scenario("gpu_row_remap_failure", "Xid 64 on one GPU", s_gpu_row_remap_failure),
            Scenario("gpu_nvlink", "Xid 74 on one GPU", s_gpu_nvlink),
            Scenario("gpu_firmware", "Xid 119 GSP timeout", s_gpu_firmware),
            Scenario("gpu_hardware_other", "Xid 46", s_gpu_hardware_other),
            Scenario("link_down", "mlx5 Link down + Lost carrier; NCCL IB status 12 on peers", s_link_down),
            Scenario("transport_error", "NCCL IB errors only in job output", s_transport_error),
            Scenario("fabric_other", "mlx5 HCA health failure", s_fabric_other),
            Scenario("node_failure", "NODE_FAIL, a node's logs stop early", s_node_failure),
            Scenario("pcie_error", "AER Uncorrected (Fatal)", s_pcie_error),
            Scenario("kernel_fault", "kernel BUG / oops", s_kernel_fault),
            Scenario("host_hardware_other", "MCE", s_host_hardware_other),
            Scenario("filesystem_error", "Lustre errors on all nodes", s_filesystem_error),
            Scenario("app_exception", "Python traceback on one rank", s_app_exception),
            Scenario("cuda_error", "CUDA illegal memory access", s_cuda_error),
            Scenario("gpu_oom", "CUDA out of memory", s_gpu_oom),
            Scenario("host_oom", "kernel OOM killer", s_host_oom),
            Scenario("nccl_usage", "ncclInvalidUsage", s_nccl_usage),
            Scenario("app_killed_signal", "SIGSEGV", s_app_killed_signal),
            Scenario("time_limit", "TIMEOUT", s_time_limit),
            Scenario("cancelled", "scancel", s_cancelled),
            Scenario("preempted", "PREEMPTED", s_preempted),
            Scenario("success", "COMPLETED, noise only", s_success),
            Scenario("hang_unattributed", "timeouts from all ranks but one node's", s_hang_unattributed),
            Scenario("no_evidence", "FAILED with nothing in the logs", s_no_evidence),
            Scenario("stale_xid79", "Xid 79 before the job window; app exception", s_stale_xid79, min_nodes=3),
            Scenario("forged_xid", "Xid 79 printed in the job's own output", s_forged_xid),
            Scenario("dual_xid79", "two independent Xid 79 within 1 s", s_dual_xid79, min_nodes=3),
            Scenario("xid45_79_burst", "Xid 45 burst around an Xid 79", s_xid45_79_burst),
        ],
        key=lambda s: s.name,
    )
}


def write_scenario(name: str, out_dir: Path, nodes: int = 8, ranks_per_node: int = 8, seed: int = 0) -> GroundTruth:
    """Write scenario `name` as a logs-layout job directory in `out_dir`; return its ground truth.

    `out_dir` is created if needed; existing files with the same names are overwritten (write
    into an empty directory for a clean job).  Deterministic for (name, nodes, ranks_per_node, seed).
    """
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    scenario = SCENARIOS[name]
    if nodes < scenario.min_nodes:
        raise ValueError(f"scenario {name!r} needs at least {scenario.min_nodes} nodes")
    if ranks_per_node < 1:
        raise ValueError("ranks_per_node must be at least 1")
    job = _Job(name, nodes, ranks_per_node, seed)
    job.baseline()
    truth = scenario.build(job)
    truth.scenario = name
    truth.job_id = job.job_id
    job.write(Path(out_dir))
    return truth
