"""Before judging: what Slurm and the node's own logs say overrides what the job's output claims."""

from __future__ import annotations

import re
from collections import defaultdict

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


def without_leads_on_read_lines(events: list[Event]) -> list[Event]:
    """A second-look lead stands only on a line no rule proper gave a meaning: a line a rule
    knows as a symptom or as harmless context is that (markers only feed the maps).  A line
    several fallback rules read is one lead: the strongest (a component's vocabulary before a
    bare error word)."""
    read = {(e.source, e.line) for e in events if not e.fallback and e.role != "marker"}
    best: dict[tuple[str, int], Event] = {}
    for event in events:
        if event.fallback and event.role == "cause" and (event.source, event.line) not in read:
            kept = best.setdefault((event.source, event.line), event)
            if event.strength > kept.strength:
                best[(event.source, event.line)] = event
    leads = {id(e) for e in best.values()}
    return [e for e in events if not (e.fallback and e.role == "cause") or id(e) in leads]


# A collective among the first few of a process group: the ranks have barely started working together.
SETUP_SEQ = 5


# A tqdm progress bar still counting (`Running tokenizer on dataset:   9%|███| 280000/2969526 [29:55<...`).
PROGRESS_BAR = re.compile(rb"\b\d{1,2}%\|[^|\n]*\| *\d+/\d+ \[\d")
BUSY_REACH = 5  # lines around the timeout where the busy rank's progress shows
BUSY_MAX_BYTES = 16 * 1024 * 1024


def _busy_nearby(evidence: Evidence, timeouts: list[Event]) -> bool:
    """A progress bar short of 100 % printed next to one of the timeouts: some rank was still
    working.  Each file is read once."""
    by_source: dict[str, list[Event]] = defaultdict(list)
    for event in timeouts:
        by_source[event.source].append(event)
    for source in evidence.files:
        near = by_source.get(source.rel)
        if not near or source.content_size() > BUSY_MAX_BYTES:
            continue
        lines = source.read_all().split(b"\n")
        for event in near:
            at = event.line - (source.line_offset or 0) - 1
            if any(PROGRESS_BAR.search(line) for line in lines[max(0, at - BUSY_REACH): at + BUSY_REACH + 1]):
                return True
    return False


def setup_phase_timeouts(events: list[Event], evidence: Evidence) -> None:
    """When nothing failed (a scheduler end is only the end of the wait), ranks timing out in one
    of their first collectives while rank 0 reports no timeout and a progress bar next to the
    timeouts still counts were waiting for rank 0 to finish its setup (tokenising, preparing data)
    longer than the process-group timeout: a configuration of the job (raise the timeout or
    prepare data before the process group), not a hang.  The first such timeout is the cause."""
    if any(e.role == "cause" and e.domain != "scheduler" for e in events):
        return
    timeouts = [e for e in events if e.type == "collective_timeout" and e.role == "symptom" and e.rank is not None]
    early = [e for e in timeouts if isinstance(e.fields.get("seq"), int) and e.fields["seq"] <= SETUP_SEQ]
    if not early or len(early) != len(timeouts) or any(e.rank == 0 for e in timeouts):
        return
    first = min(early, key=lambda e: e.sort_key)
    if not _busy_nearby(evidence, early):
        return  # no sign that rank 0 was still working: a hang at the first collective
    first.role, first.domain, first.category, first.strength = "cause", "application", "nccl_usage", 1
    ranks = ", ".join(str(r) for r in sorted({e.rank for e in early}))
    for event in events:
        if event.role == "cause" and event.domain == "scheduler":  # the cancel or time limit that ended the wait
            event.role, event.explained_by = "symptom", first
    first.notes["inferred"] = (f"rank(s) {ranks} timed out in collective {first.fields['seq']}, one of the first, and rank 0 "
                               "reported no timeout: rank 0 was still busy setting up (data preparation) for longer than the "
                               "process-group timeout; raise the timeout (init_process_group(timeout=...), ddp_timeout) or "
                               "prepare the data before starting the process group")
