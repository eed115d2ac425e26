"""Hostile text never breaks the analyzer: any bytes in any layout give a valid diagnosis."""

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_attrib.engine.pipeline import analyze_path
from slurm_attrib.vocab import CATEGORIES_BY_DOMAIN

# Fragments of real message formats, so that generated lines reach the rules and the engine.
FRAGMENTS = [
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:3b:00): 45, pid=1, caused by previous Xid 149",
    "[rank3]:[E1202 13:14:06.1 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600112 milliseconds before timing out.",
    "gpu01:1:1 [0] NCCL INFO comm 0x1 rank 3 nranks 8 cudaDev 0 nvmlDev 0 busId 3b000 commId 0x2 - Init COMPLETE",
    "gpu02:1:1 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
    "slurmstepd: error: *** JOB 1 ON gpu01 CANCELLED AT 2026-12-02T13:00:00 DUE TO TIME LIMIT ***",
    "Dec  2 13:04:06 gpu03 kernel: [123.456] mlx5_core 0000:3b:00.0 ib0: Link down",
    "[  12.5] Out of memory: Killed process 7 (python) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
    "Traceback (most recent call last):",
    "ValueError: boom",
    "2026-12-02T13:04:06,123+00:00 pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:03:00.0",
    "srun: error: gpu04: task 3: Exited with exit code 1",
    "5: ",
    "",
    "9999-12-31T23:59:59-12:00 ValueError: far future",
    "0000-01-01T00:00:00 ValueError: year zero",
    "[99999999999999999999999999999999999999.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
]

lines = st.one_of(
    st.sampled_from(FRAGMENTS),
    st.text(max_size=120),
    st.builds(lambda a, b: a[: len(a) // 2] + b, st.sampled_from(FRAGMENTS), st.text(max_size=40)),
)
files = st.dictionaries(
    st.sampled_from(["slurm-1.out", "gpu01/dmesg.txt", "gpu02/syslog", "gpu03/app.log", "gpu01/journal.txt"]),
    st.lists(lines, max_size=30).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
    max_size=4,
)
jobs = st.fixed_dictionaries(
    {},
    optional={
        "state": st.sampled_from(["FAILED", "COMPLETED", "TIMEOUT", "NODE_FAIL", "CANCELLED by 0", "weird"]),
        "start": st.sampled_from(["2026-12-02T13:00:00", "2026-12-02T13:00:00+01:00", None, 1e20, -1e20,
                                  float("nan"), 10**30, "9999-12-31T23:59:59-12:00", "0000-01-01T00:00:00"]),
        "end": st.sampled_from(["2026-12-02T14:00:00Z", None, float("inf"), 1796216646]),
        "nodes": st.sampled_from([["gpu01", "gpu02", "gpu03", "gpu04"], "gpu[01-04]", [], "a[0-999]b[0-999]c[0-99]"]),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=files, job=jobs)
def test_any_input_gives_a_valid_diagnosis(tmp_path_factory, files, job):
    root = tmp_path_factory.mktemp("job")
    (root / "job.json").write_text(json.dumps(job))
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.write_bytes(data)
        except UnicodeEncodeError:
            continue
    diagnosis = analyze_path(Path(root))
    assert diagnosis.category in CATEGORIES_BY_DOMAIN[diagnosis.domain]
    assert all(d.node in diagnosis.culprit_nodes for d in diagnosis.drain)
    assert diagnosis.model_dump_json() == analyze_path(Path(root)).model_dump_json()
