"""Before judging: what Slurm and the node's own logs say overrides what the job's output claims."""

from __future__ import annotations

from functools import cache

from slurm_attrib.engine.events import Event, EventHead, FileHead
from slurm_attrib.engine.jobwindow import PENDING_AGAIN
from slurm_attrib.ingest.types import Evidence, JobContext
from slurm_attrib.provenance import supports_verdict
from slurm_attrib.ruleset.hooks import code_tables, decode_code


def state_entry(state: str | None) -> dict | None:
    """The job state's entry in rules/_codes.yaml (family slurm_job_state): what it means."""
    return decode_code("slurm_job_state", state) if state else None


@cache
def agreeing_states(category: str | None) -> frozenset[str] | None:
    """The job states a scheduler cause agrees with (None: not a scheduler cause): the states of
    that category in the slurm_job_state table; under any other known state its banner is step
    teardown.  A job requeued after its run was ended (preemption with requeue, scontrol requeue,
    or the program requeueing itself at the time limit's warning signal: Lightning's and
    submitit's auto-requeue) is pending again."""
    entries = code_tables()["slurm_job_state"]["by_number"].values()
    states = {e["name"] for e in entries if e["domain"] == "scheduler" and e["category"] == category}
    if not states:
        return None
    return frozenset(states | PENDING_AGAIN) if category in ("preempted", "time_limit") else frozenset(states)


def job_state_events(evidence: Evidence) -> list[Event]:
    """The job's recorded state, when its entry says it is itself a cause (Slurm decided, or saw a
    node die): one event, dated by the record's end unless the entry says it is no onset."""
    job = evidence.job
    state = job_state(job)
    entry = state_entry(state)
    if entry is None or entry["role"] != "cause":
        return []
    source = job.source or "job.json"
    return [
        Event(
            rule_id="slurm.job_state",
            head=EventHead(f"Slurm job state {state}", "job_state"),
            domain=entry["domain"],
            category=entry["category"],
            role="cause",
            severity="error",
            strength=entry["strength"],
            file=FileHead(source, "job", job.provenance, index=-1),
            line=_line_of(evidence, source, '"state"'),
            line_text=f"state: {job.state}",
            trusted=supports_verdict(job.provenance, reads_kernel=False),
            time=job.end if entry["dated"] == "job_end" else None,
        )
    ]


def _line_of(evidence: Evidence, source: str, needle: str) -> int:
    try:
        text = (evidence.root / source).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 1
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return number
    return 1


def job_state(job: JobContext) -> str | None:
    return job.state.split()[0].upper() if job.state else None


SIGTERM = 15
SHELL_SIGNAL_BASE = 128  # a shell reports a child killed by signal S as exit status 128+S
MAX_SIGNAL = 64


def exit_signal(job: JobContext) -> int | None:
    """The signal the job's exit code says it died of, or None.

    Slurm's `<exit>:<signal>`: `0:11` is the batch script killed by signal 11 itself.  A batch
    script whose last command was killed returns 128+S; scontrol shows that as `143:0`, while
    sacct on 22.05 shows the same job's `15:0` (recorded in tests/data/termination 09, 19): with
    no signal part, an exit status above 128 is read as 128+S, and one equal to SIGTERM's number
    as SIGTERM (a program exiting 15 on its own is rare beside a shell reporting the signal)."""
    code, _, signal = (job.exit_code or "").partition(":")
    try:
        code_number, signal_number = int(code), int(signal or 0)
    except ValueError:
        return None
    if 0 < signal_number <= MAX_SIGNAL:
        return signal_number
    if SHELL_SIGNAL_BASE < code_number <= SHELL_SIGNAL_BASE + MAX_SIGNAL:
        return code_number - SHELL_SIGNAL_BASE
    return SIGTERM if code_number == SIGTERM else None
