"""Scenario builders: one function per failure, each returning its ground truth."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from slurm_attrib.simulate.job import GPU_BUS, GPU_ROOT_PORT, HCA_BUS, Job, Node, dmesg_ctime, iso
from slurm_attrib.simulate.truth import HARD, Expectation, GroundTruth, Scenario



def _fault_time(job: Job) -> float:
    return job.start + job.rng.uniform(1500, 2700)


def _gpu_hang(job: Job, lines: Callable[[Node, float, int, str], None], domain: str, category: str, desc: str,
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


def s_gpu_fell_off_bus(job: Job) -> GroundTruth:
    def lines(node: Node, t: float, rank: int, bus: str) -> None:
        job.gpu_preamble(node, t - 0.002, bus)
        job.kern(node, t, _xid(bus, 79, "GPU has fallen off the bus."))
        job.kern(node, t + 0.001, f"NVRM: GPU {bus}.0: GPU has fallen off the bus.")
        job.kern(node, t + 0.4, f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)")

    return _gpu_hang(job, lines, "gpu", "gpu_fell_off_bus", "Xid 79 on one GPU; NCCL watchdog timeouts on every other rank 10 min later")


def s_gpu_uncorrectable_ecc(job: Job) -> GroundTruth:
    use95 = job.rng.random() < 0.5

    def lines(node: Node, t: float, rank: int, bus: str) -> None:
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


def s_gpu_row_remap_failure(job: Job) -> GroundTruth:
    def lines(node: Node, t: float, rank: int, bus: str) -> None:
        pid = job.pids[rank]
        job.gpu_preamble(node, t - 0.002, bus)
        job.kern(node, t - 0.001, _xid(bus, 63, "Row Remapper: New row marked for remapping, reset gpu to activate.", pid))
        job.kern(node, t, _xid(bus, 64, "Row Remapper: Failed to remap row (bank 7, row 0x1a2c3): no spare rows left in bank, reset gpu.", pid))

    return _gpu_hang(job, lines, "gpu", "gpu_row_remap_failure", "Xid 63 then Xid 64 (row remapping failure) on one GPU; peers time out")


def s_gpu_nvlink(job: Job) -> GroundTruth:
    def lines(node: Node, t: float, rank: int, bus: str) -> None:
        job.gpu_preamble(node, t - 0.002, bus)
        job.kern(node, t, _xid(bus, 74, "NVLink: fatal error detected on link 11(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", job.pids[rank]))

    return _gpu_hang(job, lines, "gpu", "gpu_nvlink", "Xid 74 (fatal NVLink error) on one GPU; peers time out")


def s_gpu_firmware(job: Job) -> GroundTruth:
    def lines(node: Node, t: float, rank: int, bus: str) -> None:
        job.gpu_preamble(node, t - 0.002, bus)
        job.kern(node, t, _xid(bus, 119, "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 76 (GSP_RM_CONTROL) (0x2080014b 0x5).", job.pids[rank]))
        job.kern(node, t + 0.001,
                 f"NVRM: GPU{rank % job.rpn} GSP RPC buffer contains function 76 (GSP_RM_CONTROL) and data 0x000000002080014b 0x0000000000000005.",
                 f"NVRM: GPU{rank % job.rpn} RPC history (CPU -> GSP):")
        job.kern(node, t + 6.2, _xid(bus, 119, "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 10 (FREE) (0xa55a0020 0x0).", job.pids[rank]))
        job.kern(node, t + 6.5, f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)")

    return _gpu_hang(job, lines, "gpu", "gpu_firmware", "Xid 119 (GSP RPC timeout) then Xid 154 on one GPU; peers time out")


def s_gpu_hardware_other(job: Job) -> GroundTruth:
    def lines(node: Node, t: float, rank: int, bus: str) -> None:
        job.gpu_preamble(node, t - 0.002, bus)
        job.kern(node, t, _xid(bus, 46, "GPU stopped processing"))
        job.kern(node, t + 0.3, _xid(bus, 45, "Ch 00000010, errorString CTX SWITCH TIMEOUT, Info 0x1c010", job.pids[rank]))

    return _gpu_hang(job, lines, "gpu", "gpu_hardware_other", "Xid 46 (GPU stopped processing) on one GPU followed by Xid 45; peers time out")


def _ib_errors(job: Job, reporters: list[int], peer: Node, t: float) -> None:
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


def _network_fault(job: Job, peer: Node | None, t: float, reporters_per_peer: int = 6) -> float:
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


def s_link_down(job: Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    node = job.pick_node()
    if node.syslog_fmt is None:  # the carrier loss is logged by systemd-networkd: keep a syslog here
        node.syslog_fmt, node.syslog_name = "rfc3164", "syslog"
    job.kern(node, tf, f"mlx5_core {HCA_BUS} ib0: Link down")
    job.sys(node, tf + 0.05, f"systemd-networkd[{node.networkd_pid}]", "ib0: Lost carrier")
    job.end = _network_fault(job, node, tf + job.rng.uniform(28, 33))
    return job.truth("network", "link_down", [node], HARD, [node], "IB link down on one node (kernel + Lost carrier); peers report NCCL IB status 12 naming its IP", tf)


def s_transport_error(job: Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    job.end = _network_fault(job, None, tf)
    return job.truth("network", "transport_error", [], ("likely", "ambiguous", "insufficient"), [],
                     "NCCL IB completion errors (status 12) between several node pairs, no kernel evidence anywhere", tf)


def s_fabric_other(job: Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    node = job.pick_node()
    job.kern(node, tf, f"mlx5_core {HCA_BUS}: poll_health:852:(pid 0): device's health compromised - reached miss count")
    job.kern(node, tf + 0.001,
             f"mlx5_core {HCA_BUS}: print_health_info:458:(pid 0): Health issue observed, firmware internal error, severity(2) ERROR:",
             f"mlx5_core {HCA_BUS}: print_health_info:462:(pid 0): synd 0x8: unrecoverable hardware error")
    job.end = _network_fault(job, node, tf + job.rng.uniform(28, 33))
    return job.truth("network", "fabric_other", [node], HARD, [node], "ConnectX HCA health failure (mlx5 unrecoverable hardware error) on one node; peers report NCCL IB errors", tf)


def s_node_failure(job: Job) -> GroundTruth:
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


def s_pcie_error(job: Job) -> GroundTruth:
    def lines(node: Node, t: float, rank: int, bus: str) -> None:
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


def s_kernel_fault(job: Job) -> GroundTruth:
    def lines(node: Node, t: float, rank: int, bus: str) -> None:
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


def s_host_hardware_other(job: Job) -> GroundTruth:
    def lines(node: Node, t: float, rank: int, bus: str) -> None:
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


def s_filesystem_error(job: Job) -> GroundTruth:
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


def _app_failure(job: Job, rank: int, t: float, lines: Callable[[int, float], None], exitcode: int = 1,
                 srun_msg: int | str = 1) -> float:
    """One rank fails; torchrun on its node reports it; srun kills the rest."""
    node = job.node_of(rank)
    lines(rank, t)
    job.torchrun_failure(node, t + 2.5, rank, exitcode)
    job.srun_exit(node, t + 3, srun_msg)
    return job.kill_rest(t + 3.2, {node.index}) + 30


def _app_rank(job: Job, avoid: tuple[int, ...] = ()) -> int:
    node = job.pick_node(avoid)
    return node.index * job.rpn + job.rng.randrange(job.rpn)


def s_app_exception(job: Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    rank = _app_rank(job)

    def lines(r: int, t: float) -> None:
        job.python_traceback(r, t, [*job.train_frames(), (f"/home/{job.user}/llm/data/loader.py", 131, "collate", "input_ids = torch.stack([s['input_ids'] for s in samples])")],
                             "RuntimeError: stack expects each tensor to be equal size, but got [4096] at entry 0 and [4095] at entry 3")

    job.end = _app_failure(job, rank, tf, lines)
    return job.truth("application", "app_exception", [job.node_of(rank)], HARD, [], "Python exception on one rank; torchrun's root-cause table names its host", tf)


def s_cuda_error(job: Job) -> GroundTruth:
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


def s_gpu_oom(job: Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    rank = _app_rank(job)

    def lines(r: int, t: float) -> None:
        job.python_traceback(r, t, job.train_frames(),
                             f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {r % job.rpn} has a total capacity of 79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use. Of the allocated memory 74.12 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")

    job.end = _app_failure(job, rank, tf, lines)
    return job.truth("application", "gpu_oom", [job.node_of(rank)], HARD, [], "torch.OutOfMemoryError (CUDA out of memory) on one rank", tf)


def s_host_oom(job: Job) -> GroundTruth:
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


def s_nccl_usage(job: Job) -> GroundTruth:
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


def s_app_killed_signal(job: Job) -> GroundTruth:
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


def _scheduler_end(job: Job, t: float, banner: str) -> None:
    for node in job.nodes:
        job.sigterm_workers(node, t + job.rng.uniform(0.1, 1.0))
    for node in job.nodes[: min(3, len(job.nodes))]:
        job.emit(node, t + 1.2, "Traceback (most recent call last):", '  File "/usr/local/bin/torchrun", line 8, in <module>', "    sys.exit(main())",
                 f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {node.torchrun_pid} got signal: 15")
    job.out.append((t, job._next(), f"slurmstepd: error: *** JOB {job.job_id} ON {job.batch.host} CANCELLED AT {iso(t + job.batch.skew)}{banner} ***"))
    job.step_abort(t + 0.3, banner)
    job.end = t + 35


def _ended_by_scheduler(job: Job, t: float, banner: str, state: str, category: str, description: str) -> GroundTruth:
    job.progress(t)
    _scheduler_end(job, t, banner)
    job.state, job.exit_code = state, "0:15"
    return job.truth("scheduler", category, [], HARD, [], description, t)


def s_time_limit(job: Job) -> GroundTruth:
    t = job.start + 3600 + job.rng.uniform(0, 1)
    return _ended_by_scheduler(job, t, " DUE TO TIME LIMIT", "TIMEOUT", "time_limit", "Slurm time limit reached; torchrun agents get SIGTERM")


def s_cancelled(job: Job) -> GroundTruth:
    return _ended_by_scheduler(job, _fault_time(job), "", "CANCELLED", "cancelled", "Job cancelled with scancel; workers get SIGTERM")


def s_preempted(job: Job) -> GroundTruth:
    return _ended_by_scheduler(job, _fault_time(job), " DUE TO PREEMPTION", "PREEMPTED", "preempted", "Job preempted by a higher-priority job")


def s_success(job: Job) -> GroundTruth:
    te = job.start + job.rng.uniform(2400, 3300)
    job.progress(te - 30)
    job.emit(job.nodes[0], te - 20, "[rank0]:Saving checkpoint to /lustre/scratch/ckpt/iter_0020000 ... done", "[rank0]:Training finished.")
    for node in job.nodes:
        job.torchrun_log(node, te - 5 + job.rng.random(), "I", "torch/distributed/elastic/agent/server/api.py:879", "[default] worker group successfully finished. Waiting 300 seconds for other agents to finish.")
    job.state, job.exit_code, job.end = "COMPLETED", "0:0", te
    return job.truth("none", "success", [], HARD, [], "Job completed; logs hold only benign noise (corrected AER/EDAC, cable events)")


def s_hang_unattributed(job: Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    node = job.pick_node()
    silent = set(job.ranks_of(node))
    seq = job.rng.randrange(20000, 90000)
    job.end = job.finish_after_hang([r for r in range(job.nranks) if r not in silent], tf, seq)
    return job.truth("unknown", "hang_unattributed", [node], ("likely",), [],
                     "Collective timeouts from every rank except those of one node, with no kernel evidence", tf)


def s_no_evidence(job: Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    job.end = tf + 40
    job.state, job.exit_code = "FAILED", "1:0"
    return job.truth("unknown", "no_evidence", [], ("insufficient",), [], "Job FAILED with exit code 1, logs hold only noise")


def s_stale_xid79(job: Job) -> GroundTruth:
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


def s_forged_xid(job: Job) -> GroundTruth:
    tf = _fault_time(job)
    job.progress(tf)
    rank = _app_rank(job)
    node = job.node_of(rank)
    bus = job.gpu_bus(rank % job.rpn)
    stamp = dmesg_ctime(tf - 1 + node.skew)
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


def s_dual_xid79(job: Job) -> GroundTruth:
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


def s_xid45_79_burst(job: Job) -> GroundTruth:
    def lines(node: Node, t: float, rank: int, bus: str) -> None:
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
    job = Job(name, nodes, ranks_per_node, seed)
    job.baseline()
    truth = scenario.build(job)
    truth.scenario = name
    truth.job_id = job.job_id
    job.write(Path(out_dir))
    return truth
