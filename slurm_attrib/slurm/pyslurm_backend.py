"""The pyslurm backend (pyslurm >= 22.5.2 object API: Job, Node, db.Job).

Used only when pyslurm imports and its X.Y version equals the running Slurm's (pyslurm must be
built against that exact release); otherwise the CLI backend is used.
"""

from __future__ import annotations

from slurm_attrib.slurm import Backend, JobInfo, NodeState, SlurmError
from slurm_attrib.hostlist import expand


def _major_minor(version: str | None) -> tuple[int, int] | None:
    if not version:
        return None
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def pyslurm_usable(slurm_version: str | None) -> tuple[bool, str]:
    try:
        import pyslurm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError, undefined symbols, slurm_init failures
        return False, f"pyslurm does not import ({type(exc).__name__}: {exc})"
    ver = getattr(pyslurm, "__version__", None) or getattr(pyslurm, "version", lambda: None)()
    mine, running = _major_minor(str(ver) if ver else None), _major_minor(slurm_version)
    if mine is None or running is None:
        return False, f"cannot compare pyslurm {ver} with Slurm {slurm_version}"
    if mine != running:
        return False, f"pyslurm {ver} does not match the running Slurm {slurm_version}"
    if not hasattr(pyslurm, "Node") or not hasattr(pyslurm, "db"):
        return False, f"pyslurm {ver} lacks the object API (Node, db.Job)"
    return True, ""


class PyslurmBackend(Backend):  # pragma: no cover - needs a matching pyslurm build
    name = "pyslurm"

    def __init__(self):
        import pyslurm

        self.pyslurm = pyslurm

    def version(self) -> str:
        return str(getattr(self.pyslurm, "__version__", ""))

    def job_info(self, job_id: str) -> JobInfo | None:
        ps = self.pyslurm
        try:
            job = ps.db.Job.load(int(job_id))
        except Exception as exc:  # noqa: BLE001
            if "not" in str(exc).lower() and "found" in str(exc).lower():
                return None
            raise SlurmError(f"pyslurm db.Job.load({job_id}): {exc}") from None
        code = job.exit_code if job.exit_code is not None else None
        sig = getattr(job, "exit_code_signal", 0) or 0
        return JobInfo(
            job_id=str(job_id),
            state=(str(job.state or "").split()[0].upper() or None),
            exit_code=f"{code}:{sig}" if code is not None else None,
            user=getattr(job, "user_name", None),
            uid=getattr(job, "user_id", None),
            gid=getattr(job, "group_id", None),
            nodes=tuple(expand(getattr(job, "nodelist", None) or "")),
            start=float(job.start_time) if getattr(job, "start_time", None) else None,
            end=float(job.end_time) if getattr(job, "end_time", None) else None,
            reason=getattr(job, "state_reason", None),
            failed_node=getattr(job, "failed_node", None),
            source="pyslurm",
        )

    def node_state(self, node: str) -> NodeState | None:
        try:
            n = self.pyslurm.Node.load(node)
        except Exception as exc:  # noqa: BLE001
            if "not" in str(exc).lower() and "found" in str(exc).lower():
                return None
            raise SlurmError(f"pyslurm Node.load({node}): {exc}") from None
        parts = str(n.state or "UNKNOWN").upper().split("+")
        return NodeState(node=node, state=parts[0], flags=tuple(parts[1:]), reason=n.reason or "")

    def drain(self, node: str, reason: str) -> None:
        try:
            self.pyslurm.Node.load(node).modify(self.pyslurm.Node(state="DRAIN", reason=reason))
        except Exception as exc:  # noqa: BLE001
            raise SlurmError(f"drain {node}: {exc}") from None

    def resume(self, node: str) -> None:
        try:
            self.pyslurm.Node.load(node).modify(self.pyslurm.Node(state="RESUME"))
        except Exception as exc:  # noqa: BLE001
            raise SlurmError(f"resume {node}: {exc}") from None
