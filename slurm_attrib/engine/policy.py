"""The policies (rules/policies, ruleset/policies.py) applied to a verdict: the first row whose
condition holds decides."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from slurm_attrib.engine.reconcile import job_state
from slurm_attrib.engine.relate import matches
from slurm_attrib.ingest.types import JobContext
from slurm_attrib.ruleset.policies import Row, When, load_policy
from slurm_attrib.ruleset.spec import compiled

if TYPE_CHECKING:
    from slurm_attrib.engine.diagnose import Verdict


def quality_row(verdict: Verdict, job: JobContext, rule_dirs: tuple[Path, ...] = ()) -> Row:
    """The row of pol.quality that decides the verdict's quality (its cause chosen, culprits named)."""
    return next(row for row in load_policy("quality", tuple(rule_dirs)).rows if holds(row.when, verdict, job))


def holds(when: When | None, verdict: Verdict, job: JobContext) -> bool:
    if when is None:
        return True
    primary = verdict.primary
    return (
        (when.primary is None or (primary is not None and matches(when.primary, primary)))
        and (when.rivals is None or bool(verdict.rivals) == when.rivals)
        and (when.systemic is None or verdict.systemic == when.systemic)
        and (when.culprits is None or bool(verdict.culprits) == when.culprits)
        and (when.job_started is None or (job.start is not None) == when.job_started)
        and (job_state(job) not in when.job_state_not)
        and (when.text is None or (primary is not None and compiled(when.text).search(primary.text) is not None))
    )
