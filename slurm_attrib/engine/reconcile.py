"""Before judging: what Slurm and the node's own logs say overrides what the job's output claims."""

from __future__ import annotations


from slurm_attrib.engine.events import Event
from slurm_attrib.engine.jobwindow import PENDING_AGAIN
from slurm_attrib.ingest.types import Evidence, JobContext
from slurm_attrib.provenance import supports_verdict

# Job states that are themselves the origin (Slurm decided, or Slurm saw the node die).
STATE_CAUSES = {
    "TIMEOUT": ("scheduler", "time_limit"),
    "DEADLINE": ("scheduler", "time_limit"),
    "PREEMPTED": ("scheduler", "preempted"),
    "CANCELLED": ("scheduler", "cancelled"),
    "NODE_FAIL": ("host", "node_failure"),
    "BOOT_FAIL": ("host", "node_failure"),
    "OUT_OF_MEMORY": ("application", "host_oom"),
}


# Scheduler causes each job state agrees with; under any other known state they are step teardown.
# A job requeued after its run was ended (preemption with requeue, scontrol requeue) is pending again.
SCHEDULER_STATES = {
    "time_limit": {"TIMEOUT", "DEADLINE"},
    "preempted": {"PREEMPTED", *PENDING_AGAIN},
    "cancelled": {"CANCELLED"},
}


def job_state_events(evidence: Evidence) -> list[Event]:
    job = evidence.job
    state = job_state(job)
    if state not in STATE_CAUSES:
        return []
    domain, category = STATE_CAUSES[state]
    source = job.source or "job.json"
    return [
        Event(
            rule_id="slurm.job_state",
            title=f"Slurm job state {state}",
            type="job_state",
            domain=domain,
            category=category,
            role="cause",
            severity="error",
            strength=3,
            source=source,
            line=_line_of(evidence, source, '"state"'),
            text=f"state: {job.state}",
            kind="job",
            provenance=job.provenance,
            trusted=supports_verdict(job.provenance, reads_kernel=False),
            kernel_side=False,
            order=(-1, 0),
            # Slurm notices a dead node minutes after it died: its record's end is no onset.
            time=None if category == "node_failure" else job.end,
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


def date_node_failures(events: list[Event], last_seen: dict[str, float]) -> None:
    """Slurm notices a dead node minutes late (SlurmdTimeout): the failure began when it went silent."""
    for event in events:
        silent_since = last_seen.get(event.node or "")
        if event.category == "node_failure" and silent_since is not None:
            if event.time is None or silent_since < event.time:
                event.notes["reported_at"] = event.time
                event.time = silent_since


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


def one_lead_per_line(events: list[Event]) -> list[Event]:
    """A line several fallback rules read is one lead: the strongest (a component's vocabulary
    before a bare error word).  (A lead on a line a rule proper read was dropped by the scanner:
    scanner._without_leads_on_a_read_line.)"""
    best: dict[tuple[str, int], Event] = {}
    for event in events:
        if event.fallback and event.role == "cause":
            kept = best.setdefault((event.source, event.line), event)
            if event.strength > kept.strength:
                best[(event.source, event.line)] = event
    leads = {id(e) for e in best.values()}
    return [e for e in events if not (e.fallback and e.role == "cause") or id(e) in leads]
