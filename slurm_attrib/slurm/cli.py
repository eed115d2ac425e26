"""The Slurm command-line backend: scontrol, sacct --parsable2, sinfo.

Why not `sacct --json`: on Slurm 22.05 (openapi/dbv0.0.38) it reports `exit_code` as
{"status": "SUCCESS", "return_code": 0} for a job that exited 3, so the parsable output is used.
Times are asked for as UNIX seconds (SLURM_TIME_FORMAT=%s).  The controller's memory
(`scontrol show job`, fresh, kept MinJobAge seconds) is asked first, the accounting database after.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import replace

from slurm_attrib.slurm import ACTIVE_STATES, Backend, JobInfo, NodeState, SlurmError
from slurm_attrib.hostlist import expand

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")
_VALID_JOB = re.compile(r"[0-9]+(?:_[0-9]+|\+[0-9]+)?")  # used with fullmatch: "1\n" is no job id
_VALID_NODE = re.compile(r"[A-Za-z0-9._-]+")  # used with fullmatch
ENDED_STATES = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT")
SACCT_FIELDS = ("JobID", "State", "ExitCode", "User", "UID", "GID", "NodeList", "Start", "End", "Reason")


def parse_kv(line: str) -> dict[str, str]:
    """`A=1 B=x y C=z` -> {'A': '1', 'B': 'x y', 'C': 'z'} (values may hold spaces)."""
    out: dict[str, str] = {}
    matches = list(_KEY.finditer(line))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.setdefault(m.group(1), line[m.end() : end].strip())
    return out


def _time(value: str | None) -> float | None:
    if not value or not re.fullmatch(r"[0-9]+", value.strip()):
        return None  # Unknown, None, N/A
    number = float(value)
    return number if number > 0 else None


def _owner(value: str | None) -> tuple[str | None, int | None]:
    """`root(0)` -> ('root', 0); `(null)(1001)` (a uid slurmctld could not name) -> (None, 1001)."""
    if not value:
        return None, None
    m = re.fullmatch(r"(.*)\(([0-9]+)\)", value)
    if m:
        return (m.group(1) if m.group(1) not in ("", "(null)") else None), int(m.group(2))
    return value, None


def _nodes(value: str | None) -> tuple[str, ...]:
    try:
        return tuple(expand(value))
    except ValueError:
        return ()


def missing_slurm_conf() -> str | None:
    """Why Slurm's commands cannot run here, when $SLURM_CONF names a file that is not there: they
    would retry for a minute before failing (Slurm 22.05: `retrying in 1sec up to 60sec`)."""
    path = os.environ.get("SLURM_CONF")
    if path and not os.path.exists(path):
        return f"SLURM_CONF={path}: no such file (Slurm's commands would wait a minute for it)"
    return None


class CliBackend(Backend):
    name = "cli"

    def __init__(self, timeout: float = 20.0):
        self.timeout = timeout

    def _run(self, argv: list[str], ok_codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
        exe = shutil.which(argv[0]) or next(
            (p for p in (f"/usr/bin/{argv[0]}", f"/usr/local/bin/{argv[0]}") if os.access(p, os.X_OK)), None
        )
        if exe is None:
            raise SlurmError(f"{argv[0]} not found (Slurm client commands must be installed)")
        problem = missing_slurm_conf()
        if problem:
            raise SlurmError(problem)
        env = dict(os.environ, SLURM_TIME_FORMAT="%s", LC_ALL="C")
        try:
            proc = subprocess.run(
                [exe, *argv[1:]], capture_output=True, text=True, timeout=self.timeout, env=env,
                stdin=subprocess.DEVNULL, errors="replace",
            )
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{' '.join(argv[:3])}: no answer within {self.timeout:g} s") from None
        except OSError as exc:
            raise SlurmError(f"{argv[0]}: cannot run: {exc.strerror or exc}") from None
        if proc.returncode not in ok_codes:
            raise SlurmError(f"{' '.join(argv[:3])}: {_first_error(proc)}")
        return proc

    def version(self) -> str:
        out = self._run(["scontrol", "--version"]).stdout.strip()
        m = re.search(r"(\d+\.\d+\.\d+)", out)
        if not m:
            raise SlurmError(f"scontrol --version: unexpected answer {out[:80]!r}")
        return m.group(1)

    # -- jobs -------------------------------------------------------------------------------
    def job_info(self, job_id: str) -> JobInfo | None:
        job_id = str(job_id)
        if not _VALID_JOB.fullmatch(job_id):
            raise SlurmError(f"not a job id: {job_id!r}")
        info = self._job_from_scontrol(job_id)
        if info is not None and not info.active:
            # The controller knows the final state at once; sacct adds nothing it lacks.
            return info
        if info is not None and info.state == "COMPLETING":
            # Epilogs still running: the accounting record already holds the final state, but the
            # controller's owner: slurmdbd's record of a job that just ended was seen with UID 0
            # (its owner's results were then written for root).
            final = self._job_from_sacct(job_id)
            if final is None or final.active:
                return info
            return replace(final, user=info.user or final.user, uid=info.uid if info.uid is not None else final.uid,
                           gid=info.gid if info.gid is not None else final.gid)
        return info or self._job_from_sacct(job_id)

    def _job_from_scontrol(self, job_id: str) -> JobInfo | None:
        proc = self._run(["scontrol", "show", "job", "-o", job_id], ok_codes=(0, 1))
        if proc.returncode != 0:
            if "invalid job id" in (proc.stderr + proc.stdout).lower():
                return None
            raise SlurmError(f"scontrol show job {job_id}: {_first_error(proc)}")
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("JobId=")), "")
        if not line:
            return None
        kv = parse_kv(line)
        user, uid = _owner(kv.get("UserId"))
        _, gid = _owner(kv.get("GroupId"))
        state = (kv.get("JobState") or "").split()[0].upper() or None
        active = state in ACTIVE_STATES
        return JobInfo(
            job_id=kv.get("JobId", job_id),
            state=state,
            exit_code=kv.get("ExitCode") or None,
            user=user,
            uid=uid,
            gid=gid,
            nodes=_nodes(kv.get("NodeList")),
            start=_time(kv.get("StartTime")),
            end=None if active else _time(kv.get("EndTime")),
            reason=kv.get("Reason") if kv.get("Reason") not in (None, "None", "(null)") else None,
            source="scontrol",
        )

    def _job_from_sacct(self, job_id: str) -> JobInfo | None:
        proc = self._run(
            ["sacct", "-j", job_id, "-X", "-n", "--parsable2", "--duplicates", "-o", ",".join(SACCT_FIELDS)]
        )
        rows = [ln.split("|") for ln in proc.stdout.splitlines() if ln.strip()]
        rows = [r for r in rows if len(r) >= len(SACCT_FIELDS) and r[0] == job_id]
        if not rows:
            return None
        row = dict(zip(SACCT_FIELDS, rows[-1]))  # the last record of a requeued job
        state = (row["State"] or "").split()[0].rstrip("+").upper() or None
        return JobInfo(
            job_id=row["JobID"],
            state=state,
            exit_code=row["ExitCode"] or None,
            user=row["User"] or None,
            uid=int(row["UID"]) if row["UID"].isdigit() else None,
            gid=int(row["GID"]) if row["GID"].isdigit() else None,
            nodes=_nodes(row["NodeList"]),
            start=_time(row["Start"]),
            end=_time(row["End"]),
            reason=row["Reason"] if row["Reason"] not in ("", "None") else None,
            source="sacct",
        )

    def ended_jobs(self, since: str, until: str = "now", states: tuple[str, ...] = (), partitions: tuple[str, ...] = ()) -> list[str]:
        """Ids of every user's jobs that ended between `since` and `until` (sacct time syntax, e.g.
        `now-7days`, `2026-12-01T00:00`), optionally only in these states and partitions."""
        # With -s, sacct selects the jobs that were in one of these states within the window (that
        # ended in it); without -s, Slurm 22.05 answered nothing at all for a relative -S.
        argv = ["sacct", "-a", "-X", "-n", "--parsable2", "-S", since, "-E", until, "-o", "JobID,State",
                "-s", ",".join(states or ENDED_STATES)]
        if partitions:
            argv += ["-r", ",".join(partitions)]
        ids = []
        for line in self._run(argv).stdout.splitlines():
            job_id, _, state = line.partition("|")
            state = state.split()[0].rstrip("+").upper() if state.strip() else ""
            if _VALID_JOB.fullmatch(job_id) and state and state not in ACTIVE_STATES:
                ids.append(job_id)
        return list(dict.fromkeys(ids))

    # -- nodes ------------------------------------------------------------------------------
    def node_state(self, node: str) -> NodeState | None:
        _check_node(node)
        proc = self._run(["scontrol", "show", "node", "-o", node], ok_codes=(0, 1))
        if proc.returncode != 0:
            if "not found" in (proc.stderr + proc.stdout).lower():
                return None
            raise SlurmError(f"scontrol show node {node}: {_first_error(proc)}")
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("NodeName=")), "")
        if not line:
            return None
        state_field = re.search(r"\bState=(\S+)", line)
        parts = (state_field.group(1) if state_field else "UNKNOWN").upper().split("+")
        reason = ""
        m = re.search(r"\bReason=(.*)$", line)
        if m:
            reason = re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", m.group(1)).strip()
            if reason in ("(null)", "None"):
                reason = ""
        return NodeState(node=node, state=parts[0].rstrip("*"), flags=tuple(parts[1:]), reason=reason)

    def drain(self, node: str, reason: str) -> None:
        _check_node(node)
        if not reason.strip():
            raise SlurmError("a drain needs a reason")
        self._run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume(self, node: str) -> None:
        _check_node(node)
        self._run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])


def _check_node(node: str) -> None:
    if not _VALID_NODE.fullmatch(node or ""):
        raise SlurmError(f"not a node name: {node!r}")


def private_data(timeout: float = 10.0) -> set[str]:
    """Slurm's PrivateData words (`scontrol show config`), lower case; empty for `none`.
    Raises SlurmError when Slurm cannot be asked."""
    return private_data_of(CliBackend(timeout)._run(["scontrol", "show", "config"]).stdout)


def private_data_of(config_text: str) -> set[str]:
    """The PrivateData words of `scontrol show config` output."""
    for line in config_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "PrivateData":
            words = {w.strip().lower() for w in value.split(",") if w.strip()}
            return words - {"none"}
    raise SlurmError("scontrol show config: no PrivateData line")


def jobs_visible_to_all(words: set[str]) -> bool:
    """Whether Slurm shows every user everyone's jobs under these PrivateData words."""
    return not words & {"jobs", "all"}


def _first_error(proc: subprocess.CompletedProcess) -> str:
    text = (proc.stderr or proc.stdout or "").strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # Prefer a line that is not a generic 'error:' prefix-only line.
    line = lines[-1] if lines else f"exit status {proc.returncode}"
    for prefix in ("scontrol: error: ", "sacct: error: ", "sinfo: error: ", "slurm_update error: "):
        if line.startswith(prefix):
            line = line[len(prefix) :]
    return line[:300]
