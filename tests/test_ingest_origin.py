import pytest

from slurm_attrib.ingest.origin import Origin, launcher_prefix_end, line_origin


@pytest.mark.parametrize(
    "line, expected",
    [
        # NCCL prefix (<= 2.25 and 2.26+ with the WARN timestamp)
        ("node-2:5776:5898 [0] NCCL INFO NET/IB : Using [0]ibP111p0s0:1/IB", Origin("node-2")),
        ("task-646--1-mhpnk:91:123 [0] transport/net_ib.cc:881 NCCL WARN NET/IB : Got completion",
         Origin("task-646--1-mhpnk")),
        ("[2024-12-02 13:04:06] gpu07:1234:5678 [3] transport/net_ib.cc:1296 NCCL WARN x", Origin("gpu07")),
        ("gpu07:1234:5678 [-1] NCCL INFO comm 0x1 rank 3", Origin("gpu07")),
        # PyTorch [rankN]: prefix
        ("[rank11]: torch.OutOfMemoryError: CUDA out of memory.", Origin(rank=11)),
        ("[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught", Origin(rank=0)),
        # [Rank N] inside watchdog lines
        ("[E ProcessGroupNCCL.cpp:414] [Rank 16] Watchdog caught collective operation timeout", Origin(rank=16)),
        ("[Rank 16] NCCL watchdog thread terminated with exception: NCCL error", Origin(rank=16)),
        ("[PG ID 0 PG GUID 0(default_pg) Rank 5] Process group watchdog thread terminated", Origin(rank=5)),
        ("[PG 0 Rank 5] Timeout at NCCL work", Origin(rank=5)),
        # srun --label
        ("12: Traceback (most recent call last):", Origin(task=12)),
        (" 3: hello", Origin(task=3)),
        ("12: [rank12]: OSError: [Errno 116] Stale file handle", Origin(rank=12, task=12)),
        ("7: gpu03:11:22 [1] NCCL INFO Init COMPLETE", Origin("gpu03", task=7)),
        ("[default1]:[rank9]: RuntimeError: boom", Origin(rank=9)),
        ("[default1]:gpu03:11:22 [1] NCCL INFO x", Origin("gpu03")),
        ("7: [2024-12-02 13:04:06] gpu03:11:22 [1] misc.cc:1 NCCL WARN x", Origin("gpu03", task=7)),
        # talosctl dmesg (Kubernetes nodes on Talos Linux)
        ("192.168.11.119: kern: warning: [2026-04-22T21:27:51.291568069Z]: NVRM: Xid (PCI:0000:3b:00): 119,",
         Origin("192.168.11.119")),
        ("gpu07: kern:    err: [2026-04-22T21:27:51Z]: NVRM: GPU at PCI:0000:3b:00", Origin("gpu07")),
        # syslog host fields
        ("Dec  2 13:04:06 gpu01 kernel: NVRM: Xid (PCI:0000:a1:00): 79", Origin("gpu01", program="kernel")),
        ("Dec 02 13:04:06.123456 gpu01.cluster.example.org slurmd[123]: error: x", Origin("gpu01", program="slurmd")),
        ("2024-12-02T13:04:06+0100 gpu02 kernel: mlx5_core 0000:3b:00.0: link down", Origin("gpu02", program="kernel")),
        ("2024-12-02T13:04:06.123456+01:00 gpu02 systemd[1]: Started", Origin("gpu02", program="systemd")),
        ("Mon 2024-12-02 13:04:06 UTC gpu04 kernel: x", Origin("gpu04", program="kernel")),
        ("<165>1 2024-12-02T13:04:06.123Z gpu05.example.org nvidia-persistenced 123 - - msg", Origin("gpu05")),
        ("<13>Dec  2 13:04:06 gpu06 prog: msg", Origin("gpu06", program="prog")),
        ("Dec  2 13:04:06 10.1.2.3 kernel: x", Origin("10.1.2.3", program="kernel")),
    ],
)
def test_origins(line, expected):
    assert line_origin(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Traceback (most recent call last):",
        "[  123.456789] NVRM: Xid (PCI:0000:a1:00): 79, GPU has fallen off the bus.",
        # dmesg --time-format iso has no host field
        "2024-04-09T01:21:38,123456+00:00 pcieport 0000:00:03.0: AER: Corrected error received",
        "[Tue Apr  9 01:21:38 2024] NVRM: GPU at PCI:0000:a1:00",
        "slurmstepd: error: *** JOB 494583 ON gpu01 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***",
        "2024-12-02 13:04:06,123 - root - INFO - hello",
        "  host      : jean-zay-iam39-ib0",
        # a non-default process group's rank is not the global rank
        "[PG ID 3 PG GUID 7(tp) Rank 1] Timeout",
        "12:30:45 up 3 days",
    ],
)
def test_no_origin(line):
    assert line_origin(line) == Origin(None, None, None)


def test_long_line_is_cheap():
    import time

    line = "12: [rank3]: " + "y" * 20_000_000
    start = time.perf_counter()
    assert line_origin(line) == Origin(rank=3, task=12)
    assert time.perf_counter() - start < 0.5


def test_a_container_logs_prefix_is_read_past():
    line = "[pod/trainer-0/pytorch] 3: node7:1234:1290 [0] NCCL INFO Bootstrap : Using eth0"
    assert line_origin(line) == Origin(host="node7", task=3)
    assert line_origin("trainer-1  | [rank5]: Traceback (most recent call last):") == Origin(rank=5)


def test_open_mpi_tag_output_prefix():
    origin = line_origin("[1,2]<stdout>:smc-gpu-03:29880:30398 [0] init.cc:497 NCCL WARN Duplicate GPU detected")
    assert (origin.rank, origin.host) == (2, "smc-gpu-03")


def test_horovodrun_gloo_prefix_names_the_rank():
    """horovodrun's Gloo launcher tags a rank's lines `[3]<stderr>:` (runner/common/util/safe_shell_exec.py)."""
    assert line_origin("[3]<stderr>:ValueError: bad shape").rank == 3
    assert launcher_prefix_end(b"[3]<stderr>:ValueError: x") == 12


@pytest.mark.parametrize("line,start", [
    (b"0: x", 3), (b"  12: [rank3]:x", 14), (b"[rank3]: Traceback", 8), (b"[1,3]<stdout>:[rank3]:y", 22),
    (b"[default0]:[rank0]:  File", 19), (b"\t  x", 0), (b"2024-05-01T10:00:00.123456789Z stderr F 0: x", 43),
    (b"(RayTrainWorker pid=4242, ip=10.0.0.7) x", 39), (b"0: (pid=12) [rank0]: x", 20), (b"(raylet) x", 9),
    (b"x", 0), (b"node1: x", 0), (b"2024-01-01 x", 0), (b"(not ray) x", 0),
    (b"[pod/trainer-0/pytorch] [rank1]: x", 32), (b"trainer-1  | 0: x", 16), (b"proj_trainer_12 | x", 18),
    (b"| Name | x", 0), (b"0 | model | x", 0), (b"trainer | x", 0),
])
def test_where_the_launchers_prefixes_end(line, start):
    assert launcher_prefix_end(line) == start
