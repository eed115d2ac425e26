"""Analyses that failed, recorded where an admin and the job's owner look (besides syslog):

    <results>/<jobid>/status.json   {"job_id", "status": "failed", "hook", "time", "reason"}: the
                                    job's own record, given to the job's owner like its diagnosis
                                    (`sattrib show JOBID` says the analysis failed)
    <results>/hook-failures.log     one line per failure, for `sattrib doctor`

The EpilogSlurmctld wrapper writes the same two files in shell when Python cannot start at all.
A later successful analysis of the job removes its status.json (Store.save).
"""

from __future__ import annotations

import calendar
import json
import os
import time
from pathlib import Path

STATUS_NAME = "status.json"
FAILURES_LOG = "hook-failures.log"


def record_failure(results: str | Path, job_id: str, reason: str, uid: int | None, gid: int = 0,
                   hook: str = "sattrib-worker", public_reason: str = "") -> None:
    """Write the job's status.json and append `reason` to hook-failures.log; raises OSError
    when the results folder cannot be written.  status.json is given to the job's owner like a
    diagnosis (mode 0640: chown when we are root, else an ACL entry); where neither can be done
    it is readable by all and says only `public_reason`."""
    from slurm_attrib.store import _atomic_write, _check_job_id, _give, job_dir_fd
    from slurm_attrib.store.index import ensure_results_dir

    _check_job_id(job_id)
    root = Path(results)
    ensure_results_dir(root)
    reason = " ".join(reason.split())[:900]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        dir_fd = job_dir_fd(root_fd, job_id)
        try:
            given = _give(dir_fd, uid, gid, 0o750)
            shown = reason if given else public_reason
            record = {"job_id": str(job_id), "status": "failed", "hook": hook, "time": stamp, "reason": shown}
            _atomic_write(dir_fd, STATUS_NAME, (json.dumps(record) + "\n").encode("utf-8"), uid, gid)
            if not given and not _exists(dir_fd, "diagnosis.json"):
                os.fchmod(dir_fd, 0o755)
                os.chmod(STATUS_NAME, 0o644, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        line = f"{stamp} {hook} job {job_id} node {os.uname().nodename}: {reason}\n"
        log_fd = os.open(FAILURES_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o640, dir_fd=root_fd)
        try:
            os.write(log_fd, line.encode("utf-8", "replace"))
        finally:
            os.close(log_fd)
    finally:
        os.close(root_fd)


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def read_status(job_dir: Path) -> dict | None:
    """The job's status.json, None when there is none; PermissionError propagates."""
    try:
        text = (job_dir / STATUS_NAME).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return {"status": "failed", "reason": ""}
    return record if isinstance(record, dict) else {"status": "failed", "reason": ""}


def clear_status(dir_fd: int) -> None:
    """A diagnosis was stored: the job's failure record is stale."""
    try:
        os.unlink(STATUS_NAME, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def recent_failures(folder: Path, since: float, limit: int = 1 << 20) -> list[str]:
    """The lines of <folder>/hook-failures.log stamped at or after `since` (UNIX time); the last
    `limit` bytes are read.  Missing log: []."""
    path = folder / FAILURES_LOG
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            stream.seek(max(0, size - limit))
            data = stream.read(limit)
    except FileNotFoundError:
        return []
    lines = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            stamp = calendar.timegm(time.strptime(line[:20], "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            continue
        if stamp >= since:
            lines.append(line)
    return lines
