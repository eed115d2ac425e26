"""One interface to Slurm, two backends: pyslurm (when it imports and matches the running Slurm
version) or the Slurm command line (scontrol / sacct / sinfo, argv lists, timeouts).

    backend = get_backend()              # site config `slurm_backend`: auto | pyslurm | cli
    info = backend.job_info("123")       # JobInfo or None (unknown job)
    state = backend.node_state("gpu03")  # NodeState(state, flags, reason) or None (unknown node)
    backend.drain("gpu03", "sattrib: Xid79 ...")
    backend.resume("gpu03")

Every failure to talk to Slurm raises SlurmError with one readable line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from slurm_attrib.errors import SattribError
from slurm_attrib.ingest.types import JobContext

# Job states in which the job has not finished yet (no diagnosis can exist).
# Not final yet.  COMPLETING is what `scontrol show job` prints while the epilogs still run,
# which is when EpilogSlurmctld's worker first asks: the final state comes a moment later.
ACTIVE_STATES = {
    "PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "RESIZING", "REQUEUED",
    "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED",
}


class SlurmError(SattribError):
    """Slurm could not be asked (command missing, timeout, error answer)."""


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str | None = None  # base state, upper case: COMPLETED, FAILED, NODE_FAIL, RUNNING ...
    exit_code: str | None = None  # "exit:signal"
    user: str | None = None
    uid: int | None = None
    gid: int | None = None
    nodes: tuple[str, ...] = ()
    start: float | None = None
    end: float | None = None
    reason: str | None = None
    failed_node: str | None = None
    source: str = ""  # scontrol | sacct | pyslurm

    @property
    def active(self) -> bool:
        return (self.state or "") in ACTIVE_STATES

    def context(self) -> JobContext:
        return JobContext(
            job_id=self.job_id,
            user=self.user,
            state=self.state,
            exit_code=self.exit_code,
            start=self.start,
            end=self.end,
            nodes=self.nodes,
            source="job.json",
        )

    def record(self) -> dict:
        """The spool job.json record (ingest.bundle reads it)."""
        return {
            "job_id": self.job_id, "user": self.user, "uid": self.uid, "state": self.state,
            "exit_code": self.exit_code, "start": self.start, "end": self.end,
            "nodes": list(self.nodes), "reason": self.reason, "failed_node": self.failed_node,
            "from": self.source,
        }


@dataclass(frozen=True)
class NodeState:
    node: str
    state: str  # base state upper case: IDLE, ALLOCATED, MIXED, DOWN ...
    flags: tuple[str, ...] = field(default=())  # DRAIN, NOT_RESPONDING, COMPLETING ...
    reason: str = ""

    @property
    def drained(self) -> bool:
        """DRAIN flag set (draining or drained)."""
        return "DRAIN" in self.flags or self.state in ("DRAIN", "DRAINED", "DRAINING")

    @property
    def down(self) -> bool:
        return self.state == "DOWN" or "DOWN" in self.flags

    @property
    def unavailable(self) -> bool:
        return self.drained or self.down or self.state == "FAIL" or "FAIL" in self.flags


class Backend:
    name = "abstract"

    def version(self) -> str: ...
    def job_info(self, job_id: str) -> JobInfo | None: ...
    def node_state(self, node: str) -> NodeState | None: ...
    def drain(self, node: str, reason: str) -> None: ...
    def resume(self, node: str) -> None: ...


def slurm_version(timeout: float = 10.0) -> str | None:
    """`scontrol --version` -> '22.05.8' (None when scontrol is unusable)."""
    from slurm_attrib.slurm.cli import CliBackend

    try:
        return CliBackend(timeout=timeout).version()
    except SlurmError:
        return None


def get_backend(kind: str | None = None, timeout: float = 20.0) -> Backend:
    """`auto`: pyslurm when it imports and its X.Y equals the running Slurm's, else the CLI."""
    if kind is None:
        try:
            from slurm_attrib.config import load_config

            kind = load_config().slurm_backend
        except Exception:  # noqa: BLE001 - a broken config still allows Slurm access
            kind = "auto"
    kind = os.environ.get("SATTRIB_SLURM_BACKEND") or kind or "auto"
    from slurm_attrib.slurm.cli import CliBackend

    if kind == "cli":
        return CliBackend(timeout=timeout)
    if kind in ("auto", "pyslurm"):
        from slurm_attrib.slurm.pyslurm_backend import PyslurmBackend, pyslurm_usable

        ok, why = pyslurm_usable(slurm_version())
        if ok:
            return PyslurmBackend()
        if kind == "pyslurm":
            raise SlurmError(f"slurm_backend is pyslurm but {why}")
        return CliBackend(timeout=timeout)
    raise SlurmError(f"unknown slurm_backend {kind!r} (auto, pyslurm, cli)")
