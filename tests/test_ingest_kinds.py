import re
from pathlib import Path

import pytest

from slurm_attrib.ingest import kinds
from slurm_attrib.ingest.kinds import detect_kind, name_hint

CORPUS = Path(__file__).resolve().parent / "data" / "dev_corpus"

DMESG = b"""[    0.000000] Linux version 5.15.0-91-generic
[    1.234567] pci 0000:17:00.0: [10de:2330] type 00 class 0x030200
[12345.678901] NVRM: Xid (PCI:0000:17:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
[12345.678950] NVRM: GPU 0000:17:00.0: GPU has fallen off the bus.
"""
DMESG_T = b"""[Tue Apr  9 01:21:38 2024] NVRM: GPU at PCI:0000:a1:00: GPU-979426f2
[Tue Apr  9 01:21:38 2024] NVRM: Xid (PCI:0000:a1:00): 79, GPU has fallen off the bus.
"""
DMESG_ISO = b"""2024-04-09T01:21:38,123456+00:00 NVRM: Xid (PCI:0000:a1:00): 79, GPU has fallen off the bus.
2024-04-09T01:21:39,000001+00:00 pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received
"""
DMESG_DELTA = b"""[  +0.000316] pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0
[  +0.000005] pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer
"""
DMESG_X = b"""kern  :err   : [  123.456] NVRM: Xid (PCI:0000:a1:00): 79
kern  :info  : [  124.000] mlx5_core 0000:3b:00.0: Port module event
"""
JOURNAL_K = b"""-- Logs begin at Mon 2024-12-02 00:00:00 UTC, end at Mon 2024-12-02 14:00:00 UTC. --
Dec 02 13:04:06 gpu01 kernel: NVRM: Xid (PCI:0000:17:00): 79, GPU has fallen off the bus.
Dec 02 13:04:07 gpu01 kernel: mlx5_core 0000:3b:00.0: mlx5_port_module_event: Port module event
"""
KERN_LOG = b"""Dec  2 13:04:06 gpu01 kernel: [12345.678901] NVRM: Xid (PCI:0000:17:00): 79
Dec  2 13:04:07 gpu01 kernel: [12346.000000] NVRM: GPU 0000:17:00.0: GPU has fallen off the bus.
"""
SYSLOG = b"""Dec  2 13:00:00 gpu01 systemd[1]: Started Session 3 of user alice.
Dec  2 13:04:06 gpu01 kernel: [12345.678901] NVRM: Xid (PCI:0000:17:00): 79
Dec  2 13:04:08 gpu01 slurmd[2211]: error: Munge decode failed
Dec  2 13:04:09 gpu01 nvidia-persistenced[900]: device 0000:17:00.0 - failed
Dec  2 13:05:00 gpu01 CRON[1234]: (root) CMD (run-parts /etc/cron.hourly)
"""
SYSLOG_ISO = b"""2024-12-02T13:04:06.123456+01:00 gpu01 systemd[1]: Started foo.
2024-12-02T13:04:07.000000+01:00 gpu01 sshd[22]: Accepted publickey for alice
2024-12-02T13:04:08.000000+01:00 gpu01 kernel: mlx5_core: link down
"""
RFC5424 = b"""<165>1 2024-12-02T13:04:06.123Z gpu01 slurmd 2211 - - error: x
<165>1 2024-12-02T13:04:07.123Z gpu01 sshd 22 - - Accepted
"""
SLURMD = b"""[2024-12-02T13:04:06.123] error: Node configuration differs from hardware
[2024-12-02T13:04:07.000] [123.0] task/cgroup: _memcg_initialize: job: alloc=1024MB
"""
# a job's output under Slurm 25.05+: slurmstepd writes its errors there as `[<time>] error: ...`
STEPD_IN_OUTPUT = b"""[2025-06-01T10:05:00.412] error:  mpi/pmix_v4: pmixp_coll_ring_reset_if_to: node01 [0]: pmixp_coll_ring.c:742: 0x7f2a4c003d40: collective timeout seq=0
[2025-06-01T10:05:00.412] error:  mpi/pmix_v4: pmixp_coll_log: node01 [0]: pmixp_coll.c:286: Dumping collective state
[2025-06-01T10:05:01.000] error: *** STEP 123456.0 ON node01 CANCELLED AT 2025-06-01T10:05:01 DUE TO TIME LIMIT ***
srun: error: node01: task 0: Killed
"""
NVIDIA_SMI = b"""Mon Dec  2 13:04:06 2024
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
|=========================================+======================+======================|
|   0  NVIDIA H100 80GB HBM3          On  | 00000000:18:00.0 Off |                    0 |
+-----------------------------------------+----------------------+----------------------+
"""
NVIDIA_SMI_Q = b"""
==============NVSMI LOG==============

Timestamp                                 : Mon Dec  2 13:04:06 2024
Driver Version                            : 535.104.05
CUDA Version                              : 12.2

Attached GPUs                             : 1
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Remapped Rows
        Correctable Error                 : 0
"""
NVIDIA_SMI_CSV = b"""index, name, pci.bus_id, uuid
0, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, GPU-1d2a3b4c-0000-1111-2222-333344445555
1, NVIDIA A100-SXM4-80GB, 00000000:0F:00.0, GPU-2d2a3b4c-0000-1111-2222-333344445555
"""
NVIDIA_SMI_L = b"""GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-979426f2-893a-7cbb-c4cf-81472f89a462)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-079426f2-893a-7cbb-c4cf-81472f89a462)
"""
NVIDIA_SMI_FAIL = b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
SYSFS = b"""/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed:3
/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:0
/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE
"""
SYSFS_PLAIN = b"""link_downed: 3
link_error_recovery: 0
port_rcv_errors: 12
symbol_error: 0
"""
IBSTAT = b"""CA 'mlx5_0'
\tCA type: MT4123
\tNumber of ports: 1
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
"""
APP = b"""[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation timeout
node-2:5776:5898 [0] NCCL INFO NET/IB : Using [0]ibP111p0s0:1/IB
Traceback (most recent call last):
  File "train.py", line 10, in <module>
RuntimeError: CUDA error: an illegal memory access was encountered
"""
APP_WITH_SMI_TABLE = APP * 20 + NVIDIA_SMI  # a job that prints nvidia-smi once: still app
APP_LOOKS_TABULAR = b"""| Name  | Type   | Params |
|-------|--------|--------|
| model | Linear | 1.2 M  |
epoch 1 loss 0.3
"""
LOSS_LINES = b"Epoch: [0][415/1736]\t Loss 0.5844 MAE 0.6568\nKilled\n"


# UCX's own stamp is the UNIX time in dmesg's brackets: job output, not a kernel log
UCX_LINES = (
    b"[1668693503.473099] [ampere:1188443:0]          ib_log.c:246  UCX  ERROR mlx5_0: ibv_create_cq() failed: Cannot allocate memory\n"
    b"[1668693503.473424] [ampere:1188442:0]          ib_log.c:246  UCX  ERROR mlx5_0: ibv_create_cq() failed: Cannot allocate memory\n"
)


@pytest.mark.parametrize(
    "data, kind",
    [
        (DMESG, "kernel"),
        (DMESG_T, "kernel"),
        (DMESG_ISO, "kernel"),
        (DMESG_DELTA, "kernel"),
        (DMESG_X, "kernel"),
        (JOURNAL_K, "kernel"),
        (KERN_LOG, "kernel"),
        (SYSLOG, "syslog"),
        (SYSLOG_ISO, "syslog"),
        (RFC5424, "syslog"),
        (SLURMD, "syslog"),
        (STEPD_IN_OUTPUT, "app"),
        (STEPD_IN_OUTPUT.replace(b"srun: error: node01: task 0: Killed\n", b""), "app"),
        (NVIDIA_SMI, "nvidia_smi"),
        (NVIDIA_SMI_Q, "nvidia_smi"),
        (NVIDIA_SMI_CSV, "nvidia_smi"),
        (NVIDIA_SMI_L, "nvidia_smi"),
        (NVIDIA_SMI_FAIL, "nvidia_smi"),
        (SYSFS, "sysfs"),
        (SYSFS_PLAIN, "sysfs"),
        (IBSTAT, "sysfs"),
        (APP, "app"),
        (APP_WITH_SMI_TABLE, "app"),
        (APP_LOOKS_TABULAR, "app"),
        (UCX_LINES, "app"),
        (LOSS_LINES, "app"),
        (b"\x00\x01\x02\xff\xfe garbage \x00\n\x89PNG\r\n", "app"),
    ],
)
def test_kind_from_content_whatever_the_name(data, kind):
    # a neutral name: content alone decides
    assert detect_kind(data, "file.txt") == kind
    # a misleading name does not override clear content
    assert detect_kind(data, "app.log") == kind


def test_names_do_not_override_content():
    assert detect_kind(APP, "dmesg.txt") == "app"
    assert detect_kind(APP, "nvidia_smi.txt") == "app"
    assert detect_kind(DMESG, "slurm-123.out") == "kernel"


def test_name_breaks_ties():
    # as many daemon lines as kernel lines: the name decides between kernel and syslog
    mixed = (
        b"Dec  2 13:04:06 gpu01 kernel: NVRM: Xid 79\n"
        b"Dec  2 13:04:07 gpu01 kernel: NVRM: Xid 45\n"
        b"Dec  2 13:04:08 gpu01 kernel: NVRM: Xid 45\n"
        b"Dec  2 13:04:09 gpu01 slurmd[1]: error: x\n"
        b"Dec  2 13:04:09 gpu01 slurmd[1]: error: y\n"
    )
    assert detect_kind(mixed, "kern.log") == "kernel"
    assert detect_kind(mixed, "syslog") == "syslog"
    # nothing classifiable: the name (or a prompt's command) decides
    assert detect_kind(b"   \n\n", "dmesg.txt") == "kernel"
    assert detect_kind(b"   \n\n", "stdout") == "app"


def test_prompt_then_dmesg_is_kernel():
    data = (
        b"root@node1:~# uptime\n"
        b" 08:38:19 up 15:34,  1 user,  load average: 6.49, 7.16, 7.32\n"
        b"root@node1:~# dmesg -T | grep NVRM\n"
        b"[Tue Apr  9 01:21:38 2024] NVRM: Xid (PCI:0000:a1:00): 79, GPU has fallen off the bus.\n"
        b"                           NVRM: nvidia-bug-report.sh as root to collect this data before\n"
    )
    assert detect_kind(data, "capture.txt") == "kernel"


def test_prompt_then_nvidia_smi_error():
    data = b"zeyer@cn-234 ~ % nvidia-smi\nUnable to determine the device handle for GPU0000:03:00.0: Unknown Error\n"
    assert detect_kind(data, "out.txt") == "nvidia_smi"


def test_tail_is_sampled():
    # the head holds only neutral lines; the kernel lines are in the sampled tail
    preamble = b"    indented continuation line\n" * 5000
    assert detect_kind(preamble + DMESG * 20, "x") == "kernel"


def test_huge_single_line_is_fast():
    import time

    data = b"x" * 50_000_000
    start = time.perf_counter()
    assert detect_kind(data, "big.log") == "app"
    assert time.perf_counter() - start < 0.5


def test_name_hint():
    assert name_hint("gpu01/dmesg.txt") == "kernel"
    assert name_hint("kern.log.1.gz") == "kernel"
    assert name_hint("journal.txt") == "syslog"
    assert name_hint("nvidia_smi.txt") == "nvidia_smi"
    assert name_hint("slurm-123.out") is None


@pytest.mark.parametrize(
    "rel, kind",
    [
        ("010-akash-node1-xid79-a1/dmesg.txt", "kernel"),
        ("034-hgx-nvidia-peermem-invalid-context-harmless/dmesg.txt", "kernel"),
        ("036-returnn-cn234-gpu-lost-pcie-aer-hang/dmesg.txt", "kernel"),
        ("036-returnn-cn234-gpu-lost-pcie-aer-hang/nvidia_smi.txt", "nvidia_smi"),
        ("017-arjuna-slurm-cgroup-oomkill-gpu-job/slurm.txt", "app"),
        ("017-arjuna-slurm-cgroup-oomkill-gpu-job/app.txt", "app"),
        ("018-zetta-slurm-time-limit/slurm.txt", "app"),
        ("007-nccl733-error12-ib-nic-hardware/log.txt", "app"),
        ("026-azure-2node-ib-not-connected-error12/log.txt", "app"),
        ("039-msswift-4x4-a100-rank11-oom-watchdog/log.txt", "app"),
        ("040-bloom-tr8b-injected-nameerror-rank304/log.txt", "app"),
    ],
)
def test_corpus_kinds(rel, kind):
    path = CORPUS / rel
    if not path.exists():
        pytest.skip("corpus not available")
    data = path.read_bytes()
    assert detect_kind(data, path.name) == kind
    # content, not the name, decides
    assert detect_kind(data, "renamed.txt") == kind


def test_every_nvidia_smi_marker_holds_one_of_the_parts_checked_first():
    from slurm_attrib.ingest.kinds import _SMI_MARKER, _SMI_MARKER_PARTS, _may_be_smi_marker

    assert all(_may_be_smi_marker(part) for part in _SMI_MARKER_PARTS)  # the check spells out every part
    assert not _may_be_smi_marker("[  12.3] eth0: link up")

    alternatives, depth, current = [], 0, ""
    for char in _SMI_MARKER.pattern:  # the top-level alternatives
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "|" and depth == 0:
            alternatives.append(current)
            current = ""
        else:
            current += char
    alternatives.append(current)
    for alternative in alternatives:
        literal = re.sub(r"\\(.)", r"\1", alternative)
        assert any(part in literal for part in _SMI_MARKER_PARTS), alternative
        assert _may_be_smi_marker(literal), alternative


def _mixed_journal(daemon_share: float, lines: int = 1000) -> bytes:
    """A journal whose lines are the kernel's and daemons' in this proportion, spread evenly."""
    out, daemons = [], 0
    for i in range(lines):
        second = f"2026-12-02T15:{i // 60 % 60:02d}:{i % 60:02d}+0000 node001"
        if daemons < daemon_share * (i + 1):
            daemons += 1
            out.append(f"{second} systemd[1]: session-{i}.scope: Deactivated successfully.")
        else:
            out.append(f"{second} kernel: pcieport 0000:37:01.0: AER: Corrected error received: 0000:37:01.0")
    return ("\n".join(out) + "\n").encode()


@pytest.fixture
def classified(monkeypatch) -> list[str]:
    """The lines detect_kind classifies, in order."""
    seen: list[str] = []
    classify = kinds._classify
    monkeypatch.setattr(kinds, "_classify", lambda line: seen.append(line) or classify(line))
    return seen


@pytest.mark.parametrize("share, name, kind", [
    (0.5, "journal.txt", "syslog"), (0.65, "kern.log", "syslog"), (0.3, "kern.log", "kernel"),
    (0.3, "journal.txt", "syslog"), (0.02, "journal.txt", "kernel"), (0.7, "kern.log", "syslog"),
])
def test_a_mixed_journal_is_decided_from_a_few_dozen_lines(classified, share, name, kind):
    assert detect_kind(_mixed_journal(share), name) == kind
    assert len(classified) <= 2 * kinds.DECIDED_AFTER  # the head's and the tail's first checkpoint


def test_a_share_near_the_bound_reads_the_whole_sample(classified):
    assert detect_kind(_mixed_journal(0.45), "kern.log") == "kernel"
    assert len(classified) == kinds.HEAD_LINES + kinds.TAIL_LINES


def test_a_block_pasted_indented_is_read_as_its_lines():
    """A post's code block indents every line: the indent common to all lines is set aside before
    the lines are classified, so one nvidia-smi -L line among program output does not make the
    whole block nvidia-smi output (every other line would stay neutral)."""
    block = (b"./gpu_burn 10\nUsing compare file: compare.ptx\nBurning for 10 seconds.\n"
             b"GPU 0: NVIDIA GeForce GT 730 (UUID: GPU-25efeac4-b495-8239-003d-7618be1f3f9d)\n"
             b"Couldn't init a GPU test: Error in load module (gpu_burn-drv.cpp:238): a PTX JIT compilation failed\n")
    indented = b"".join(b"    " + line + b"\n" for line in block.splitlines())
    assert detect_kind(block, "log.txt") == "app"
    assert detect_kind(indented, "log.txt") == "app"
    # indented nvidia-smi output is still nvidia-smi output
    for smi in (NVIDIA_SMI, NVIDIA_SMI_L):
        assert detect_kind(b"".join(b"    " + line + b"\n" for line in smi.splitlines()), "log.txt") == "nvidia_smi"


def test_the_common_indent_is_read_only_when_every_line_may_have_one():
    """_dedented returns at once when a line starts with text; otherwise it computes the common
    indent.  Both ways give what the full computation gives, on lines of every start."""
    import random

    def full(lines):
        indents = [len(line) - len(line.lstrip(b" \t")) for line in lines if line.strip()]
        common = min(indents, default=0)
        return [line[common:] for line in lines] if common else lines

    starts = [b"", b" ", b"  ", b"\t", b"\r", b"\x0b", b"\x0c", b"x", b"[", b"0", b"\xc3\xa9"]
    rng = random.Random(7)
    for _ in range(3000):
        lines = [b"".join(rng.choices(starts, k=rng.randint(0, 3))) + rng.choice([b"", b"text", b" x"])
                 for _ in range(rng.randint(0, 6))]
        assert kinds._dedented(lines) == full(lines), lines
    assert kinds._dedented([b"    a", b"  b", b""]) == [b"  a", b"b", b""]
    assert kinds._dedented([b"    a", b"b"]) == [b"    a", b"b"]


def test_nvidia_smi_key_values_without_its_header_are_its_output_in_a_file_named_for_it():
    """An excerpt of `nvidia-smi -q` (key : value rows, no header) in a file named for nvidia-smi is
    its output; the same rows under any other name are not (they look like any tool's report)."""
    excerpt = (b"    Remapped Rows\n        Correctable Error                 : 0\n"
               b"        Uncorrectable Error               : 4\n        Pending                           : Yes\n")
    assert detect_kind(excerpt, "node01/nvidia-smi.txt") == "nvidia_smi"
    assert detect_kind(excerpt, "node01/report.txt") == "app"
