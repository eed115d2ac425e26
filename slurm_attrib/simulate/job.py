"""The simulated job: nodes, ranks, clocks and the log lines each source receives."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

from slurm_attrib.simulate.truth import Expectation, GroundTruth

# Bus ids of the eight GPUs of an HGX H100 board, as the Xid line prints them (domain:bus:device)
GPU_BUS = ("0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00", "0000:9a:00", "0000:ab:00", "0000:ba:00", "0000:db:00")
GPU_ROOT_PORT = ("0000:15:01.0", "0000:27:01.0", "0000:37:01.0", "0000:59:01.0", "0000:97:01.0", "0000:a8:01.0", "0000:b7:01.0", "0000:d7:01.0")
HCA_BUS = "0000:0c:00.0"
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
WDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
WATCHDOG_MS = 600000

# --------------------------------------------------------------------------------------------
# Time formatting (all from UNIX seconds, UTC; no wall clock)


def _tm(t: float) -> time.struct_time:
    return time.gmtime(int(t // 1))


def _frac(t: float, digits: int) -> str:
    return f"{int(round((t % 1) * 10**digits)) % 10**digits:0{digits}d}"


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", _tm(t))


def dmesg_ctime(t: float) -> str:  # dmesg -T style: "Wed Dec  2 13:04:06 2026"
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
class Node:
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


class Job:
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
        self.nodes: list[Node] = []
        for i in range(nodes):
            dfmt = ("boot", "ctime", "iso")[rng.randrange(3)]
            sfmt = ("rfc3164", "shortiso")[rng.randrange(2)]
            if dfmt != "boot" and rng.random() < 0.12:
                sfmt = None  # a node without syslog (never with an unanchored boot-seconds dmesg)
            sname = "journal.txt" if sfmt == "shortiso" else rng.choice(("syslog", "messages"))
            k = i + 10
            self.nodes.append(
                Node(
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
    def node_of(self, rank: int) -> Node:
        return self.nodes[rank // self.rpn]

    def ranks_of(self, node: Node) -> range:
        return range(node.index * self.rpn, (node.index + 1) * self.rpn)

    def gpu_bus(self, local: int) -> str:
        return GPU_BUS[local % len(GPU_BUS)]

    def pick_node(self, avoid: tuple[int, ...] = ()) -> Node:
        choices = [n for n in self.nodes if n.index not in avoid and n.index != 0] or [
            n for n in self.nodes if n.index not in avoid
        ]
        return self.rng.choice(choices)

    # -- emitting --------------------------------------------------------------------------
    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def kern(self, node: Node, t: float, *msgs: str, syslog: bool = True) -> None:
        for m in msgs:
            self.kernel[node.host].append((t, self._next(), m))
            if syslog:
                self.syslog[node.host].append((t, self._next(), "kernel", m))
        # consecutive lines of one event stay together by seq; times are equal

    def sys(self, node: Node, t: float, prog: str, *msgs: str) -> None:
        for m in msgs:
            self.syslog[node.host].append((t, self._next(), prog, m))

    def emit(self, node: Node | None, t: float, *lines: str) -> None:
        """Job output lines written by a process on `node` (srun --label adds the task id)."""
        for line in lines:
            if self.label and node is not None:
                line = f"{node.index}: {line}"
            self.out.append((t, self._next(), line))

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

    def torchrun_log(self, node: Node, t: float, level: str, where: str, msg: str) -> None:
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

    def _noise(self, node: Node, t: float) -> None:
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

    def torchrun_failure(self, node: Node, t: float, rank: int, exitcode: int, *, others: int = 0) -> None:
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

    def srun_exit(self, node: Node, t: float, code: int | str) -> None:
        what = f"Exited with exit code {code}" if isinstance(code, int) else code
        self.out.append((t, self._next(), f"srun: error: {node.host}: task {node.index}: {what}"))

    def step_abort(self, t: float, reason: str = "") -> None:
        if not reason:  # srun --kill-on-bad-exit ends the step after a task failed
            self.out.append((t - 0.01, self._next(), f"srun: Terminating StepId={self.job_id}.0"))
        self.out.append((t, self._next(), "srun: Job step aborted: Waiting up to 32 seconds for job step to finish."))
        stamp = iso(t + self.batch.skew)
        self.out.append((t + 0.01, self._next(), f"slurmstepd: error: *** STEP {self.job_id}.0 ON {self.batch.host} CANCELLED AT {stamp}{reason} ***"))

    def sigterm_workers(self, node: Node, t: float) -> None:
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

    def gpu_preamble(self, node: Node, t: float, bus: str) -> None:
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

    def _dmesg_line(self, node: Node, t: float, msg: str) -> str:
        local = t + node.skew
        if node.dmesg_fmt == "boot":
            return f"[{local - node.boot:12.6f}] {msg}\n"
        if node.dmesg_fmt == "ctime":
            return f"[{dmesg_ctime(local)}] {msg}\n"
        return f"{iso(local)},{_frac(local, 6)}+00:00 {msg}\n"

    def _syslog_line(self, node: Node, t: float, prog: str, msg: str) -> str:
        local = t + node.skew
        if node.syslog_fmt == "rfc3164":
            return f"{_rfc3164(local)} {node.host} {prog}: {msg}\n"
        return f"{iso(local)}+0000 {node.host} {prog}: {msg}\n"

    # -- ground truth ----------------------------------------------------------------------
    def truth(self, domain: str, category: str, culprits: list[Node], qualities: tuple[str, ...], drain: list[Node],
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
