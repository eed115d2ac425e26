"""The job's window: which lines belong to the job, by their time."""

from __future__ import annotations

from slurm_attrib.ingest.types import JobContext

WINDOW_SLACK_BEFORE = 120.0  # seconds before the job start still inside the window (prolog, skew)
WINDOW_SLACK_AFTER = 60.0  # after the job end: teardown lines still belong to the job

BEFORE, INSIDE, AFTER = -1, 0, 1

# States of a job put back in the queue (scontrol requeue, a preemption or node failure with
# requeue): its record's start is when the scheduler expects the next run to begin (the BeginTime
# of a requeue), not the start of the run the logs show, so it bounds nothing.
PENDING_AGAIN = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})


def window_side(time: float, job: JobContext, before: float = WINDOW_SLACK_BEFORE,
                after: float = WINDOW_SLACK_AFTER) -> int:
    """BEFORE the job's window, INSIDE it, or AFTER it (an unknown start or end bounds nothing);
    the window reaches `before` seconds before the start and `after` seconds after the end."""
    if job.start is not None and job.state not in PENDING_AGAIN and time < job.start - before:
        return BEFORE
    if job.end is not None and time > job.end + after:
        return AFTER
    return INSIDE
