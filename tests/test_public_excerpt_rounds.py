"""Round 4 of public excerpts (issue 6): first read on them is recorded in the folder's SCORE
files; since then they are a regression test like tests/test_public_excerpts.py.

KNOWN_MISSES are cases the tool still reads differently from the label, each with the reason;
they are strict xfails, so a change that starts reading one as labelled must move it out."""

from pathlib import Path

import pytest

from support import analyze_case, cases

DATA = Path(__file__).resolve().parent / "data" / "public_excerpts_round4"

KNOWN_MISSES = {
    "806-llamafactory1355-softlockup-save-success": "a lone soft lockup with no job state: no sign the job completed (label from the thread: it did)",
    "816-trixie45-step-cancelled-unkillable": "label dispute: Slurm's STEP CANCELLED banner is read as the cancellation; the thread leaves the origin open",
    "859-funasr-rank2-cuda-oom-then-timeouts": "the OOM line names rank 2 only; no line maps rank 2 to a host",
    "865-particleflow-rank0-only-eval-collective-hang": "only a watchdog stack trace: the rank-0-only collective is known from the fix, not the log",
    "874-submitit-usr2-before-time-limit-requeue": "label dispute: submitit itself prints 'this job is preempted' and Slurm 'DUE TO JOB REQUEUE'",
    "875-submitit-short-job-preempted-reported-timeout": "label dispute: submitit itself prints 'this job is timed-out'",
    "877-mugot-cuda-unknown-error-gpu-mem-utilization": "'CUDA error: unknown error' (999) is read as the GPU; the thread found a memory setting",
    "879-arjuna-execve-slurm-script-missing-nfs-c002": "the NFS outage is known from the admin, not from the execve line",
    "910-vllm40652-a100-gsp-xid119-coredump": "Talos 'IP: kern: ...' line prefix is not read as a host",
    "913-arjuna137-c014-jobs-killed-wtermsig9": "only WTERMSIG 9 in slurmctld: the node is blamed from the pattern across jobs, not this job's log",
}

CASES = [
    pytest.param(case, marks=pytest.mark.xfail(reason=KNOWN_MISSES[case], strict=True)) if case in KNOWN_MISSES else case
    for case in cases(DATA, "expected.yaml")
]


def test_known_misses_are_cases():
    assert set(KNOWN_MISSES) <= set(cases(DATA, "expected.yaml"))


@pytest.mark.parametrize("case", CASES)
def test_round4_excerpt(case):
    expected, diagnosis = analyze_case(DATA / case, "expected.yaml")
    assert (diagnosis["domain"], diagnosis["category"]) == (expected["domain"], expected["category"]), diagnosis["summary"]
    for node in expected.get("culprit_nodes") or []:
        assert node in diagnosis["culprit_nodes"], diagnosis["summary"]
    node_folders = [p for p in (DATA / case).iterdir() if p.is_dir()]
    drained = [d["node"] for d in diagnosis["drain"]]
    assert drained == [] if not node_folders else set(drained) <= set(expected.get("culprit_nodes") or [])
