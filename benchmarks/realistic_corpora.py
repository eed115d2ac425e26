"""Realistic job folders for the benchmarks: what GPU training jobs really print, nothing removed.

The failure itself (the Xid, the link loss, the watchdog timeouts, torchrun's report, srun's
teardown) comes from `slurm_attrib.simulate`; around it this module streams the bulk that real
jobs carry, in the formats of the tool versions in use:

- NCCL INFO start-up per rank and communicator: plugin probing, `NET/IB : Using ...`, the
  `comm ... nRanks ... MNNVL 0` summary, `Trees [0] ...`, channel connections
  (2.19+ `Channel 00/0 : 3[3] -> 4[4] via P2P/CUMEM/read`, `7[7] -> 8[0] [send] via NET/IB/0/GDRDMA`;
  2.4-2.6 `Ring 00 : 7 -> 8 [send] via NET/IB/0`), `Connected all rings|trees`, tuning dumps,
  `Init COMPLETE` and (2.23+) `Init timings` lines;
- PyTorch c10d start-up warnings and, in a collective timeout, every rank's full cascade (2.4+
  `[rank12]:[E1202 13:04:06.123456789 ProcessGroupNCCL.cpp:632]` glog lines, or 2.1-2.3
  `[E ProcessGroupNCCL.cpp:475]`), `terminate called ...`, `what():`, the C++ frames;
- progress lines of Megatron-LM, DeepSpeed, PyTorch Lightning, the HF Trainer, or a per-rank loop;
- torchrun and srun launch lines;
- kernel and journal noise of GPU nodes: audit records, mlx5 command-interface errors, EDAC
  corrected errors, Lustre `slow reply` / `Connection restored`, systemd, sshd, slurmd, chrony.

No line is filtered by what the rules match: the whole point is that real logs are made of lines
that hold rule literals.  Everything is drawn from seeded `random.Random`s, so the same corpus
name and scale always give the same bytes.  Lines are streamed to disk (a 400 MB job never sits in
memory); only the simulator's skeleton (a few lines per rank) is held.
"""

from __future__ import annotations

import heapq
import json
import random
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from slurm_attrib.simulate.job import GPU_BUS, HCA_BUS, Job, Node, _glog, iso
from slurm_attrib.simulate.scenarios import SCENARIOS

GENERATOR_VERSION = 2  # bump when the bytes a spec produces change


@dataclass(frozen=True)
class Spec:
    """One corpus: a job shape.  Counts are per full-size corpus; `scaled` shrinks them."""

    name: str
    description: str
    scenario: str
    nodes: int
    rpn: int = 8
    seed: int = 1
    nccl: str = "2.21.5+cuda12.4"  # the version decides the line formats
    nccl_debug: str = "INFO"  # INFO prints the start-up; WARN prints nothing on success
    comms: int = 1  # communicators each rank initialises (world, TP, DP, PP groups ...)
    channels: int = 16
    torch: str = "2.5.1"
    progress: str = "megatron"  # megatron | deepspeed | lightning | hf | per_rank
    iterations: int = 500
    kernel_lines: int = 300  # kernel noise lines per node (into dmesg and the journal)
    journal_lines: int = 300  # user-space journal lines per node
    kernel_mix: str = "gpu"  # gpu | heavy (mlx5/EDAC/Lustre-heavy)
    lustre_slow: float = 0.0  # fraction of kernel lines that are Lustre slow-reply lines
    approx_mb: float = 0.0  # the size the full corpus comes to (documentation only)

    @property
    def nccl_minor(self) -> int:
        return int(self.nccl.split(".")[1])

    @property
    def torch_minor(self) -> int:
        return int(self.torch.split(".")[1])

    def scaled(self, factor: float, nodes: int | None = None) -> Spec:
        """The same shape with counts multiplied by `factor` (at least a handful of each)."""
        return replace(
            self,
            nodes=nodes if nodes is not None else max(2, round(self.nodes * factor)),
            iterations=max(20, round(self.iterations * factor)),
            kernel_lines=max(20, round(self.kernel_lines * factor)),
            journal_lines=max(20, round(self.journal_lines * factor)),
            approx_mb=round(self.approx_mb * factor, 1),
        )


SPECS: dict[str, Spec] = {
    s.name: s
    for s in [
        Spec("a_1024n_nccl_info", "1,024 nodes x 8 ranks, NCCL_DEBUG=INFO start-up (2.21, 4 communicators), "
             "Megatron, 3,000 iterations, one Xid 79", "gpu_fell_off_bus", nodes=1024, comms=4, channels=16,
             iterations=3000, kernel_lines=250, journal_lines=250, approx_mb=420),
        Spec("b_16n_nccl_legacy", "16 nodes, NCCL 2.4-2.6 `Ring 00 : 7 -> 8 [send]` format, PyTorch 2.1, "
             "DeepSpeed, 48 communicators, Xid 48/95", "gpu_uncorrectable_ecc", nodes=16, nccl="2.6.4+cuda10.2",
             comms=48, channels=8, torch="2.1.2", progress="deepspeed", iterations=40000, kernel_lines=15000,
             journal_lines=15000, approx_mb=200),
        Spec("c_16n_journal_heavy", "16 nodes x 49 MB journals (audit, mlx5 command noise, EDAC CE, Lustre), "
             "IB link down", "link_down", nodes=16, nccl_debug="WARN", progress="megatron", iterations=3000,
             kernel_lines=40000, journal_lines=200000, kernel_mix="heavy", approx_mb=780),
        Spec("d_64n_healthy", "healthy 64-node job, NCCL_DEBUG=WARN, per-rank progress lines, COMPLETED",
             "success", nodes=64, nccl_debug="WARN", progress="per_rank", iterations=1100, kernel_lines=1200,
             journal_lines=1200, approx_mb=115),
        Spec("e_64n_healthy_lustre", "d plus 0.5 % Lustre slow-reply lines in the kernel logs (must read as "
             "success)", "success", nodes=64, nccl_debug="WARN", progress="per_rank", iterations=1100,
             kernel_lines=1200, journal_lines=1200, lustre_slow=0.005, approx_mb=115),
        Spec("f_16n_modern", "16 nodes, NCCL 2.26 INFO + PyTorch 2.6 + Lightning, one rank raises",
             "app_exception", nodes=16, nccl="2.26.2+cuda12.8", torch="2.6.0", comms=2, channels=24,
             progress="lightning", iterations=20000, kernel_lines=12000, journal_lines=12000, approx_mb=210),
        Spec("g_32768_rank_cascade", "4,096 nodes x 8 ranks: Xid 79, then 32,767 per-rank watchdog cascades "
             "(PyTorch 2.5)", "gpu_fell_off_bus", nodes=4096, nccl_debug="WARN", progress="hf", iterations=400,
             kernel_lines=40, journal_lines=40, approx_mb=250),
    ]
}
# h: the scaling series, the same shape at each size
SCALING_NODES = (8, 64, 512, 4096)
SCALING = Spec("h_scaling", "gpu_fell_off_bus, NCCL_DEBUG=WARN, Megatron, the same per-node content at every size",
               "gpu_fell_off_bus", nodes=8, nccl_debug="WARN", iterations=500, kernel_lines=150, journal_lines=150)


def scaling_spec(nodes: int) -> Spec:
    return replace(SCALING, name=f"h_scaling_{nodes}n", nodes=nodes)


# --------------------------------------------------------------------------------------------
# Writing a corpus


def write_corpus(spec: Spec, folder: Path, truth_file: Path) -> dict:
    """Write the job folder and its truth file (outside the folder); return the truth."""
    job = Job(spec.scenario, spec.nodes, spec.rpn, spec.seed)
    job.nccl_new = spec.nccl_minor >= 26
    job.nccl_version = spec.nccl
    for node in job.nodes:  # every node has a journal (`journalctl -o short-iso`)
        node.syslog_fmt, node.syslog_name = "shortiso", "journal.txt"
    progress_until = [job.start + 600.0]
    original_progress = job.progress

    def progress(until: float, every: float = 90.0) -> int:
        progress_until[0] = until
        return original_progress(until, every)

    job.progress = progress
    job.baseline()
    truth = SCENARIOS[spec.scenario].build(job)
    folder.mkdir(parents=True, exist_ok=True)
    job_json = {"job_id": job.job_id, "user": job.user, "state": job.state, "exit_code": job.exit_code,
                "start": iso(job.start), "end": iso(job.end), "nodes": [n.host for n in job.nodes]}
    (folder / "job.json").write_text(json.dumps(job_json, indent=2) + "\n", encoding="utf-8")
    bulk = Bulk(spec, job, progress_until[0])
    job.out.sort(key=lambda x: (x[0], x[1]))
    skeleton_out = ((t, line) for t, _, line in job.out)
    _write_lines(folder / f"slurm-{job.job_id}.out", heapq.merge(skeleton_out, *bulk.job_output(), key=_time))
    for node in job.nodes:
        _write_node(job, node, bulk, folder / node.host)
    record = {
        "corpus": spec.name,
        "spec": asdict(spec),
        "generator_version": GENERATOR_VERSION,
        "job_id": job.job_id,
        "expectations": [
            {"domain": e.domain, "category": e.category, "culprit_nodes": sorted(e.culprit_nodes),
             "allowed_qualities": list(e.allowed_qualities), "drain_nodes": sorted(e.drain_nodes)}
            for e in truth.expectations()
        ],
        "description": truth.description,
        "fault_time": truth.fault_time,
    }
    truth_file.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


def _time(item: tuple) -> float:
    return item[0]


def _write_lines(path: Path, lines: Iterator[tuple[float, str]]) -> None:
    with path.open("w", encoding="utf-8", buffering=1 << 20) as out:
        batch: list[str] = []
        for _, line in lines:
            batch.append(line)
            if len(batch) >= 4096:
                out.write("\n".join(batch) + "\n")
                batch.clear()
        if batch:
            out.write("\n".join(batch) + "\n")


def _write_node(job: Job, node: Node, bulk: Bulk, folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    horizon = min(node.cut if node.cut is not None else float("inf"), job.end + 45)
    kernel_noise, journal_noise = bulk.node_noise(node)
    if (node.host, "dmesg") not in job.missing:
        skeleton = ((t, m) for t, _, m in sorted(job.kernel[node.host]))
        lines = ((t, job._dmesg_line(node, t, m)[:-1]) for t, m in heapq.merge(skeleton, kernel_noise(), key=_time)
                 if t <= horizon)
        _write_lines(folder / "dmesg.txt", lines)
    if node.syslog_fmt and (node.host, "syslog") not in job.missing:
        skeleton = ((t, p, m) for t, _, p, m in sorted(job.syslog[node.host]))
        kernel_copy = ((t, "kernel", m) for t, m in kernel_noise())
        merged = heapq.merge(skeleton, kernel_copy, journal_noise(), key=_time)
        lines = ((t, job._syslog_line(node, t, p, m)[:-1]) for t, p, m in merged if node.boot + 30 <= t <= horizon)
        _write_lines(folder / node.syslog_name, lines)


# --------------------------------------------------------------------------------------------
# The bulk: streams of (time, line), each sorted by time


class Bulk:
    def __init__(self, spec: Spec, job: Job, progress_until: float):
        self.spec = spec
        self.job = job
        self.progress_until = progress_until
        self.t_init = job.start + 25  # where the simulator puts NCCL's start-up

    def _rng(self, *parts: object) -> random.Random:
        return random.Random(":".join(str(p) for p in ("realistic", self.spec.name, self.spec.nodes, self.spec.seed, *parts)))

    def _label(self, node: Node | None, line: str) -> str:
        return f"{node.index}: {line}" if self.job.label and node is not None else line

    def job_output(self) -> list[Iterator[tuple[float, str]]]:
        streams = [self._launch(), self._torch_startup(), self._progress(), self._cascade_extras()]
        if self.spec.nccl_debug == "INFO":
            streams.append(self._nccl_startup())
        return streams

    # -- launch ------------------------------------------------------------------------------
    def _launch(self) -> Iterator[tuple[float, str]]:
        job, rng = self.job, self._rng("launch")
        t = job.start + 3.5
        for node in job.nodes:
            glog = lambda lvl, where, msg: self._label(node, f"{lvl}{_glog(t + node.skew)} {node.torchrun_pid} {where}] {msg}")  # noqa: E731
            yield t, glog("I", "torch/distributed/launcher/api.py:188", "Starting elastic_operator with launch configs:")
            for key, value in (("entrypoint", job.script), ("min_nodes", len(job.nodes)), ("max_nodes", len(job.nodes)),
                               ("nproc_per_node", job.rpn), ("run_id", job.job_id), ("rdzv_backend", "c10d"),
                               ("rdzv_endpoint", f"{job.batch.host}:29500"), ("rdzv_configs", "{'timeout': 900}"),
                               ("max_restarts", 0), ("monitor_interval", "0.1"), ("log_dir", "/tmp/torchelastic_%s" % rng.getrandbits(24)),
                               ("metrics_cfg", "{}")):
                yield t, glog("I", "torch/distributed/launcher/api.py:188", f"  {key:<18}: {value}")
            yield t + 4, glog("I", "torch/distributed/elastic/agent/server/api.py:845", "[default] starting workers for entrypoint: python3")
            yield t + 4, glog("I", "torch/distributed/elastic/agent/server/api.py:662", "[default] Rendezvous'ing worker group")
            t += 0.001

    def _torch_startup(self) -> Iterator[tuple[float, str]]:
        """What every rank prints while the model is built (warnings of the libraries in use)."""
        job, spec = self.job, self.spec
        t = job.start + 20
        for rank in range(job.nranks):
            node = job.node_of(rank)
            local = rank % job.rpn
            lines = [
                "/usr/local/lib/python3.10/dist-packages/transformer_engine/pytorch/attention.py:4914: UserWarning: window_size should be (-1, -1) or (-1, 0) for attn_mask_type=causal",
                '  warnings.warn(',
                f"> initializing torch distributed ... rank {rank} world size {job.nranks} local rank {local}",
            ]
            if spec.torch_minor >= 4:
                lines.append(f"[W{_glog(t + node.skew, 9)} ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank {rank}]  using GPU {local} to perform barrier as devices used by this process are currently unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect.Specify device_ids in barrier() to force use of a particular device,or call init_process_group() with a device_id.")
            for line in lines:
                yield t, self._label(node, f"[rank{rank}]:{line}")
            t += 1e-5

    # -- NCCL start-up -------------------------------------------------------------------------
    def _nccl_startup(self) -> Iterator[tuple[float, str]]:
        job, spec = self.job, self.spec
        rng = self._rng("nccl")
        groups = self._comm_groups()
        for c, group_size in enumerate(groups):
            t = self.t_init + 3 + 10 * c
            comm_ids = {}
            for rank in range(job.nranks):
                node = job.node_of(rank)
                pid = job.pids[rank]
                members = self._group_of(rank, group_size)
                key = members[0]
                if key not in comm_ids:
                    comm_ids[key] = (f"0x{rng.getrandbits(48):012x}", f"0x{rng.getrandbits(64):016x}")
                comm, commid = comm_ids[key]
                for msg in self._nccl_init_block(c, rank, members, comm, commid, rng):
                    yield t, self._label(node, f"{node.host}:{pid}:{pid + (0 if c == 0 else 263)} [{rank % job.rpn}] NCCL INFO {msg}")
                t += 1e-6

    def _comm_groups(self) -> list[int]:
        """The size of each communicator a rank joins: the world, then tensor-, data- and
        pipeline-parallel groups (Megatron's order), in turn."""
        n, rpn = self.job.nranks, self.job.rpn
        shapes = [n, rpn, max(1, n // rpn), 2 if n >= 2 * rpn else 1]
        return [shapes[i % len(shapes)] for i in range(self.spec.comms)]

    def _group_of(self, rank: int, size: int) -> list[int]:
        n, rpn = self.job.nranks, self.job.rpn
        if size >= n:
            return list(range(n))
        if size == rpn:  # tensor parallel: the node
            base = rank - rank % rpn
            return list(range(base, base + rpn))
        stride = max(1, n // size)  # data/pipeline parallel: one rank per stride
        return [rank % stride + i * stride for i in range(size) if rank % stride + i * stride < n]

    def _nccl_init_block(self, c: int, rank: int, members: list[int], comm: str, commid: str, rng: random.Random) -> list[str]:
        job, spec = self.job, self.spec
        node = job.node_of(rank)
        local = rank % job.rpn
        me = members.index(rank)
        size = len(members)
        nnodes = len({m // job.rpn for m in members})
        bus = f"{int(GPU_BUS[local].split(':')[1], 16):x}000"
        legacy = spec.nccl_minor < 7
        out: list[str] = []
        if c == 0:
            if rank == 0:
                out.append(f"NCCL version {spec.nccl}")
            if legacy:
                out += ["NET/Plugin : No plugin found (libnccl-net.so), using internal implementation"]
            else:
                out += [f"cudaDriverVersion {12040 if spec.nccl_minor < 26 else 12080}",
                        "NCCL_SOCKET_IFNAME set by environment to ib0",
                        "NCCL_IB_HCA set to mlx5_0,mlx5_1,mlx5_2,mlx5_3",
                        "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin." if spec.nccl_minor >= 23 else
                        "NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory : when loading libnccl-net.so",
                        "Using non-device net plugin version 0",
                        "Using network IB"]
        elif not legacy:
            out += ["Using non-device net plugin version 0", "Using network IB"]
        pre = "ncclCommInitRank" if c == 0 else "ncclCommSplit"
        if not legacy:
            out.append(f"{pre} comm {comm} rank {me} nranks {size} cudaDev {local} nvmlDev {local} busId {bus} commId {commid} - Init START")
            out.append(f"Setting affinity for GPU {local} to ffffffff,ffff0000,00000000" if local >= 4 else f"Setting affinity for GPU {local} to ffff,ffffffff")
            out.append(f"NVLS multicast support is not available on dev {local}")
            out.append(f"comm {comm} rank {me} nRanks {size} nNodes {nnodes} localRanks {min(size, job.rpn)} localRank {local if size > 1 else 0} MNNVL 0")
        nxt, prv = members[(me + 1) % size], members[(me - 1) % size]
        trees = " ".join(f"[{ch}] {members.index(nxt) if nxt != rank else -1}/-1/-1->{me}->{members.index(prv) if me else -1}" for ch in range(min(spec.channels, 8)))
        out.append(f"Trees {trees}")
        if not legacy:
            out.append("P2P Chunksize set to 524288")
        if me == 0:
            ring = "".join(f" {i:3d}" for i in range(min(size, 20)))  # NCCL prints the first 20
            out += [f"Channel {ch:02d}/{spec.channels:02d} : {ring}" for ch in range(spec.channels)]
        if size > 1:
            out += self._channel_lines(rank, nxt, prv, members, legacy)
            out.append("Connected all rings" if legacy or spec.nccl_minor < 19 else "Connected all rings, use ring PXN 0 GDR 1")
            out.append("Connected all trees")
        out.append("threadThresholds 8/8/64 | 128/8/64 | 512 | 512")
        out.append(f"{spec.channels} coll channels, {spec.channels} collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer")
        if not legacy:
            if spec.nccl_minor >= 23:
                out.append("TUNER/Plugin: Could not find: libnccl-tuner.so. Using internal tuner plugin.")
            else:
                out.append("TUNER/Plugin: Plugin load returned 2 : libnccl-tuner.so: cannot open shared object file: No such file or directory : when loading libnccl-tuner.so")
            out.append("CC Off, workFifoBytes 1048576")
        if c > 0:  # the world's Init COMPLETE comes from the simulator
            if legacy:
                out.append(f"comm {comm} rank {me} nranks {size} cudaDev {local} busId {bus} - Init COMPLETE")
            else:
                out.append(f"{pre} comm {comm} rank {me} nranks {size} cudaDev {local} nvmlDev {local} busId {bus} commId {commid} - Init COMPLETE")
        if spec.nccl_minor >= 23:
            total = rng.uniform(0.3, 2.5)
            out.append(f"Init timings - {pre}: rank {me} nranks {size} total {total:.2f} (kernels 0.14, alloc 0.01, bootstrap {total / 3:.2f}, allgathers 0.01, topo 0.21, graphs 0.00, connections {total / 3:.2f}, rest 0.02)")
        return out

    def _channel_lines(self, rank: int, nxt: int, prv: int, members: list[int], legacy: bool) -> list[str]:
        """One line per channel and neighbour: the ring's send side, then the tree's parent."""
        job, spec = self.job, self.spec
        rpn = job.rpn
        out = []
        me, n_idx, p_idx = members.index(rank), members.index(nxt), members.index(prv)
        for peer, peer_idx in ((nxt, n_idx), (prv, p_idx)):
            same_node = peer // rpn == rank // rpn
            for ch in range(spec.channels):
                if legacy:
                    if same_node:
                        out.append(f"Ring {ch:02d} : {me}[{rank % rpn}] -> {peer_idx}[{peer % rpn}] via P2P/IPC")
                    else:
                        out.append(f"Ring {ch:02d} : {me} -> {peer_idx} [send] via NET/IB/{ch % 4}/GDRDMA")
                        out.append(f"Ring {ch:02d} : {peer_idx} -> {me} [receive] via NET/IB/{ch % 4}/GDRDMA")
                elif same_node:
                    out.append(f"Channel {ch:02d}/0 : {me}[{rank % rpn}] -> {peer_idx}[{peer % rpn}] via P2P/CUMEM/read")
                else:
                    out.append(f"Channel {ch:02d}/0 : {me}[{rank % rpn}] -> {peer_idx}[{peer % rpn}] [send] via NET/IB/{ch % 4}/GDRDMA")
                    out.append(f"Channel {ch:02d}/0 : {peer_idx}[{peer % rpn}] -> {me}[{rank % rpn}] [receive] via NET/IB/{ch % 4}/GDRDMA")
        return out

    # -- training progress ---------------------------------------------------------------------
    def _progress(self) -> Iterator[tuple[float, str]]:
        job, spec = self.job, self.spec
        rng = self._rng("progress")
        t0, t1 = job.start + 60, self.progress_until
        n = spec.iterations
        step_s = (t1 - t0) / max(n, 1)
        loss = 10.8
        last = job.nranks - 1
        for it in range(1, n + 1):
            t = t0 + it * step_s
            loss = max(1.7, loss * rng.uniform(0.9985, 0.99995))
            ms = step_s * 1000 * rng.uniform(0.97, 1.03)
            lr = 3e-4 * min(1.0, it / 2000)
            if spec.progress == "megatron":  # the last pipeline stage prints, with a wall-clock stamp
                node = job.node_of(last)
                stamp = iso(t + node.skew).replace("T", " ")
                yield t, self._label(node, f"[rank{last}]: [{stamp}] iteration {it:8d}/  500000 | consumed samples: {it * 1024:12d} | elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {rng.uniform(390, 420):.1f} | learning rate: {lr:.6E} | global batch size:  1024 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {rng.uniform(0.2, 1.4):.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |")
            elif spec.progress == "deepspeed":
                node = job.nodes[0]
                stamp = iso(t + node.skew).replace("T", " ") + f",{rng.randrange(1000):03d}"
                if it % 10 == 0:
                    yield t, self._label(node, f"[rank0]:[{stamp}] [INFO] [logging.py:128:log_dist] [Rank 0] step={it}, skipped=0, lr=[{lr:.6e}], mom=[(0.9, 0.95)]")
                    yield t, self._label(node, f"[rank0]:[{stamp}] [INFO] [timer.py:264:stop] epoch=0/micro_step={it * 8}/global_step={it}, RunningAvgSamplesPerSec={rng.uniform(400, 430):.4f}, CurrSamplesPerSec={rng.uniform(400, 430):.4f}, MemAllocated=31.2GB, MaxMemAllocated=58.9GB")
                for rank in range(0, job.nranks, job.rpn):  # every node's first rank reports its step
                    yield t, self._label(job.node_of(rank), f"[rank{rank}]:steps: {it} loss: {loss * rng.uniform(0.98, 1.02):.4f} iter time (s): {step_s:.3f} samples/sec: {1024 / step_s:.3f}")
            elif spec.progress == "lightning":
                node = job.nodes[0]
                done = it * 100 // n
                bar = "█" * (done // 10) + " " * (10 - done // 10)
                el, rest = int(it * step_s), int((n - it) * step_s)
                yield t, self._label(node, f"Epoch 0:  {done:2d}%|{bar}| {it}/{n} [{el // 60:02d}:{el % 60:02d}<{rest // 60:02d}:{rest % 60:02d}, {1 / step_s:.2f}it/s, v_num=3, train_loss={loss:.3f}]")
                for rank in range(0, job.nranks, 2):  # ranks echo their step metrics through the logger
                    yield t, self._label(job.node_of(rank), f"[rank{rank}]:step={it} train_loss={loss * rng.uniform(0.98, 1.02):.4f} lr={lr:.3e} throughput={rng.uniform(6.5, 7.1):.2f} samples/s")
            elif spec.progress == "hf":
                node = job.nodes[0]
                if it % 10 == 0:
                    yield t, self._label(node, f"[rank0]:{{'loss': {loss:.4f}, 'grad_norm': {rng.uniform(0.3, 1.2):.4f}, 'learning_rate': {lr:.4e}, 'epoch': {it / n:.2f}}}")
            else:  # per_rank: a plain loop where every rank prints its own line
                for rank in range(job.nranks):
                    yield t, self._label(job.node_of(rank), f"[rank{rank}]:step {it:5d}/{n} | loss {loss * rng.uniform(0.98, 1.02):.4f} | lr {lr:.2e} | grad_norm {rng.uniform(0.2, 1.4):.3f} | tok/s {rng.randrange(29000, 33000)} | mem {rng.uniform(58, 62):.1f} GiB")
                    t += 1e-6

    # -- the collective-timeout cascade, every rank's full text -------------------------------
    def _cascade_extras(self) -> Iterator[tuple[float, str]]:
        """After the simulator's watchdog line of each rank, what PyTorch prints next on that rank."""
        job, spec = self.job, self.spec
        first = re.compile(r"\[Rank (\d+)\] Watchdog caught collective operation timeout: (WorkNCCL\(SeqNum=(\d+).*?\)) ran for (\d+) milliseconds")
        found = []
        for t, _, line in job.out:
            if "Watchdog caught" in line and "thread terminated" not in line:
                m = first.search(line)
                if m:
                    found.append((t, int(m[1]), m[2], int(m[3]), m[4]))
        found.sort()
        for t, rank, work, seq, ran in found:
            node = job.node_of(rank)
            if spec.torch_minor >= 4:
                head = lambda dt, where: f"[rank{rank}]:[E{_glog(t + dt + node.skew, 9)} {where}] "  # noqa: E731
                lines = [
                    head(0.003, "ProcessGroupNCCL.cpp:1834") + f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.",
                    head(0.003, "ProcessGroupNCCL.cpp:630") + f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
                    head(0.003, "ProcessGroupNCCL.cpp:636") + f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
                    head(0.004, "ProcessGroupNCCL.cpp:1375") + f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1",
                ]
            else:
                lines = [
                    f"[E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out.",
                    "[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
                    "[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire process down.",
                    f"[E ProcessGroupNCCL.cpp:916] [Rank {rank}] NCCL watchdog thread terminated with exception: [Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out.",
                ]
            lines += [
                "terminate called after throwing an instance of 'c10::DistBackendError'",
                f"  what():  [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread terminated with exception: [Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before timing out.",
                "Exception raised from checkTimeout at /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 (most recent call first):",
                "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3c2b8a4446 in /usr/local/lib/python3.10/dist-packages/torch/lib/libc10.so)",
                "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x282 (0x7f3bd7a1c772 in /usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so)",
                "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7f3bd7a23bb3 in /usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so)",
                "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d (0x7f3bd7a2561d in /usr/local/lib/python3.10/dist-packages/torch/lib/libtorch_cuda.so)",
                "frame #4: <unknown function> + 0xdc253 (0x7f3c2b3c9253 in /lib/x86_64-linux-gnu/libstdc++.so.6)",
                "frame #5: <unknown function> + 0x94ac3 (0x7f3c2c4b4ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
                "frame #6: clone + 0x44 (0x7f3c2c545a04 in /lib/x86_64-linux-gnu/libc.so.6)",
                "",
            ]
            for line in lines:
                yield t + 0.005, self._label(node, f"[rank{rank}]:{line}" if line and not line.startswith("[rank") else line)

    # -- kernel and journal noise --------------------------------------------------------------
    def node_noise(self, node: Node) -> tuple[Callable[[], Iterator[tuple[float, str]]], Callable[[], Iterator[tuple[float, str, str]]]]:
        """Two re-startable streams for one node: kernel lines (dmesg, and the journal as `kernel`)
        and user-space journal lines."""
        job, spec = self.job, self.spec
        t0, t1 = job.start - 600, job.end + 30

        def kernel() -> Iterator[tuple[float, str]]:
            rng = self._rng("kernel", node.host)
            later: list[tuple[float, str]] = []  # lines already decided, due later (Lustre restorations)
            n = spec.kernel_lines
            for i in range(n):
                t = t0 + (i + rng.random()) * (t1 - t0) / n
                line = self._kernel_line(node, t, rng, later)
                while later and later[0][0] <= t:
                    yield heapq.heappop(later)
                yield t, line
            while later:
                yield heapq.heappop(later)

        def journal() -> Iterator[tuple[float, str, str]]:
            rng = self._rng("journal", node.host)
            n = spec.journal_lines
            for i in range(n):
                t = t0 + (i + rng.random()) * (t1 - t0) / n
                yield (t, *self._journal_line(node, t, rng))

        return kernel, journal

    def _kernel_line(self, node: Node, t: float, rng: random.Random, later: list[tuple[float, str]]) -> str:
        spec = self.spec
        if spec.lustre_slow and rng.random() < spec.lustre_slow:
            return _lustre_slow(rng, t)
        r = rng.random()
        heavy = spec.kernel_mix == "heavy"
        if r < (0.30 if heavy else 0.35):
            return _audit_kernel(rng, t)
        if r < (0.55 if heavy else 0.45):
            return _mlx5_cmd(rng)
        if r < (0.70 if heavy else 0.60):
            return _edac_ce(rng)
        if heavy and r < 0.85:  # a healthy node's kernel holds no Lustre lines unless asked (lustre_slow)
            return _lustre(rng, t, later, mount=f"ffff9a{zlib.crc32(node.host.encode()):08x}")
        if r < 0.92:
            port = ("0000:15:01.0", "0000:27:01.0", "0000:37:01.0", "0000:59:01.0")[rng.randrange(4)]
            return f"pcieport {port}: AER: Corrected error received: {port}"
        if r < 0.96:
            return f"nvidia-peermem nv_mem_client_get_pages: peer memory client registered, pages pinned (context {rng.getrandbits(32):08x})"
        return f"perf: interrupt took too long ({rng.randrange(2501, 4000)} > 2500), lowering kernel.perf_event_max_sample_rate to {rng.randrange(40000, 79000)}"

    def _journal_line(self, node: Node, t: float, rng: random.Random) -> tuple[str, str]:
        r = rng.random()
        if r < 0.40:
            pid = rng.randrange(1000, 99999)
            return f"audit[{pid}]", (f"USER_ACCT pid={pid} uid=0 auid=4294967295 ses=4294967295 subj=unconfined msg='op=PAM:accounting grantors=pam_permit acct=\"root\" exe=\"/usr/sbin/cron\" hostname=? addr=? terminal=cron res=success'"
                                     if rng.random() < 0.5 else
                                     f"CRED_DISP pid={pid} uid=0 auid=0 ses={rng.randrange(1, 9000)} subj=unconfined msg='op=PAM:setcred grantors=pam_permit,pam_cap acct=\"root\" exe=\"/usr/sbin/cron\" hostname=? addr=? terminal=cron res=success'")
        if r < 0.55:
            s = rng.randrange(100, 90000)
            return "systemd[1]", rng.choice((f"Started session-{s}.scope - Session {s} of User root.", f"session-{s}.scope: Deactivated successfully.",
                                             "Starting Cleanup of Temporary Directories...", "Started Run anacron jobs."))
        if r < 0.65:
            return f"CRON[{rng.randrange(10000, 99999)}]", rng.choice(("pam_unix(cron:session): session opened for user root(uid=0) by (uid=0)",
                                                                      "(root) CMD (/usr/sbin/nhc -d >/dev/null 2>&1)", "pam_unix(cron:session): session closed for user root"))
        if r < 0.75:
            return f"sshd[{rng.randrange(10000, 99999)}]", rng.choice((f"Accepted publickey for monitor from 10.0.{rng.randrange(4)}.{rng.randrange(2, 250)} port {rng.randrange(30000, 60000)} ssh2: ED25519 SHA256:Zq8dYkq3nX8yA4oQm1l0pQ3sR9c2vT6u7wB5eK1fH0g",
                                                                      "pam_unix(sshd:session): session closed for user monitor", "Received disconnect from 10.0.0.5 port 51022:11: disconnected by user"))
        if r < 0.83:
            return f"dcgm-exporter[{rng.randrange(3000, 3900)}]", 'level=info msg="Collecting metrics" interval=30000ms'
        if r < 0.90:
            return f"slurmstepd[{rng.randrange(100000, 999999)}]", rng.choice((f"task/cgroup: _memcg_initialize: job: alloc={rng.randrange(900000, 1900000)}MB mem.limit={rng.randrange(900000, 1900000)}MB memsw.limit=unlimited",
                                                                              "acct_gather_energy/ipmi: _get_joules_task: ENERGY: _get_joules_task: we got a blank"))
        if r < 0.95:
            return f"chronyd[{rng.randrange(700, 900)}]", f"Selected source 10.0.0.{rng.randrange(1, 4)} (ntp{rng.randrange(1, 3)}.cluster.internal)"
        return f"nvidia-persistenced[{rng.randrange(1100, 1300)}]", "Verbose syslog connection opened"


def _audit_kernel(rng: random.Random, t: float) -> str:
    stamp = f"audit({int(t)}.{rng.randrange(1000):03d}:{rng.randrange(100, 99999)})"
    if rng.random() < 0.5:
        return f'audit: type=1400 {stamp}: apparmor="DENIED" operation="open" class="file" profile="snap.lxd.activate" name="/proc/{rng.randrange(1000, 9999)}/mountinfo" pid={rng.randrange(1000, 9999)} comm="snap-exec" requested_mask="r" denied_mask="r" fsuid=0 ouid=0'
    return f"audit: type=1130 {stamp}: pid=1 uid=0 auid=4294967295 ses=4294967295 subj=unconfined msg='unit=systemd-tmpfiles-clean comm=\"systemd\" exe=\"/usr/lib/systemd/systemd\" hostname=? addr=? terminal=? res=success'"


def _mlx5_cmd(rng: random.Random) -> str:
    """The command-interface errors mlx5 prints when monitoring agents poll unsupported registers."""
    pid = rng.randrange(1000, 99999)
    return rng.choice((
        f"mlx5_core {HCA_BUS}: mlx5_cmd_out_err:838:(pid {pid}): ACCESS_REG(0x805) op_mod(0x1) failed, status bad operation(0x2), syndrome (0x7a2c1d), err(-22)",
        f"mlx5_core {HCA_BUS}: mlx5_cmd_out_err:838:(pid {pid}): QUERY_VPORT_COUNTER(0x770) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x1e5a2b), err(-22)",
        f"mlx5_core {HCA_BUS}: mlx5_cmd_check:810:(pid {pid}): ACCESS_REG(0x805) op_mod(0x1) failed, status bad operation(0x2), syndrome (0x7a2c1d)",
    ))


def _edac_ce(rng: random.Random) -> str:
    return (f"EDAC MC{rng.randrange(2)}: 1 CE memory read error on CPU_SrcID#{rng.randrange(2)}_MC#{rng.randrange(2)}_Chan#{rng.randrange(4)}_DIMM#0 "
            f"(channel:{rng.randrange(4)} slot:0 page:0x{rng.randrange(0x10000, 0xFFFFF):x} offset:0x0 grain:32 syndrome:0x0 - err_code:0x0000:0x009f "
            f"socket:0 imc:0 rank:1 bg:0 ba:2 row:0x{rng.randrange(0x1000, 0xffff):x} col:0x3c8)")


def _lustre_slow(rng: random.Random, t: float) -> str:
    ost = rng.randrange(64)
    return (f"Lustre: {rng.randrange(1000, 99999)}:0:(client.c:2340:ptlrpc_expire_one_request()) @@@ Request sent has timed out for slow reply: "
            f"[sent {int(t) - 7}/real {int(t) - 7}]  req@{rng.getrandbits(64):016x} x{rng.randrange(10**15, 10**16)}/t0(0) "
            f"o4->scratch-OST{ost:04x}-osc-ffff9a{rng.getrandbits(32):08x}@10.0.{ost // 16}.{ost % 16 + 10}@o2ib:6/4 lens 488/448 e 0 to 1 "
            f"dl {int(t)} ref 2 fl Rpc:XQr/0/ffffffff rc 0/-1 job:'python3.{rng.randrange(100000, 999999)}'")


def _lustre(rng: random.Random, t: float, later: list[tuple[float, str]], mount: str) -> str:
    """A slow reply, or a lost connection whose restoration (pushed on the `later` heap) follows
    5-120 s later, as the import recovers (lustre/ptlrpc/import.c): clients never print a
    restoration of a target they did not lose, nor lose one that is still down.  `mount` is the
    client's superblock instance, in the name of each of its imports (`scratch-OST0004-osc-<mount>`)."""
    if rng.random() < 0.75:
        return _lustre_slow(rng, t)
    ost = rng.randrange(64)
    target = f"scratch-OST{ost:04x}"
    nid = f"10.0.{ost // 16}.{ost % 16 + 10}@o2ib"
    device = f"{target}-osc-{mount}"
    if any(f" {device}: " in line for _, line in later):
        return _lustre_slow(rng, t)
    heapq.heappush(later, (t + rng.uniform(5, 120), f"Lustre: {device}: Connection restored to {target} (at {nid})"))
    return f"Lustre: {device}: Connection to {target} (at {nid}) was lost; in progress operations using this service will wait for recovery to complete"
