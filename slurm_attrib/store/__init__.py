"""Results store: <results>/<jobid>/diagnosis.{json,txt} plus an index of the diagnoses.

Files are written atomically (temp file + rename in the job directory; a re-analysis replaces
both files the same way).  Access: the job directory is mode 0750 and the files 0640, owned by
the job's uid with group `admin_group` (or root's group) -- the file permissions are what keeps
other users out.  All writes go through a directory file descriptor opened with O_NOFOLLOW and
files are created with O_EXCL|O_NOFOLLOW and fchown'ed, so a user who owns their job directory
cannot redirect root's writes with symlinks.

When the writer is not root (e.g. EpilogSlurmctld running as SlurmUser), files cannot be given
to the job's uid: they stay owned by the writer, and an ACL entry lets the job's uid read them
(`acl.py`); where the filesystem takes no ACLs the index row says so (`owner_ok` = 0).

The index (`index.py`) is SQLite in the results directory (`<results>/index.db`, `sqlite.py`)
unless the config's `index_url` names a PostgreSQL database (`postgres.py`; psycopg is imported
only then).  It holds job ids, users, states, categories and node names, never log content; the
SQLite file is world-readable only where Slurm's PrivateData shows everyone's jobs anyway.
"""

from __future__ import annotations

import grp
import json
import os
import time
from pathlib import Path

from slurm_attrib import atomic
from slurm_attrib.config import index_url_problem
from slurm_attrib.engine.timefmt import unix
from slurm_attrib.store.acl import grant_read
from slurm_attrib.store.index import Index, JobFilter, Row, StoreError, ensure_results_dir
from slurm_attrib.store.sqlite import INDEX, SqliteIndex
from slurm_attrib.store.status import clear_status

__all__ = [
    "APPLIED", "FAILED", "INDEX", "JSON_NAME", "KEPT", "RECOMMENDED", "SKIPPED", "TEXT_NAME",
    "Index", "JobFilter", "Row", "Store", "StoreError", "fleet_facts", "open_index",
]

JSON_NAME = "diagnosis.json"
TEXT_NAME = "diagnosis.txt"

# Drain entry statuses
RECOMMENDED = "recommended"  # policy recommend (or auto not allowed): waits for `sattrib drain --apply`
APPLIED = "applied"
KEPT = "kept_existing"  # node already drained/down with someone else's reason
FAILED = "failed"
SKIPPED = "skipped"  # policy off, over the per-job cap, systemic


def _admin_gid(admin_group: str) -> int:
    if admin_group:
        try:
            return grp.getgrnam(admin_group).gr_gid
        except KeyError:
            raise StoreError(f"admin_group {admin_group!r} is not a group on this host") from None
    return 0


def open_index(root: Path, index_url: str = "", visibility: str = "own", admin_group: str = "") -> Index:
    """The index `index_url` names: empty is SQLite in the results directory `root`, readable
    as `visibility` says (config `index_visibility`; PostgreSQL's are its grants)."""
    problem = index_url_problem(index_url)
    if problem:
        raise StoreError(problem)
    if not index_url:
        return SqliteIndex(root, visibility, lambda: _admin_gid(admin_group))
    from slurm_attrib.store.postgres import PostgresIndex  # needs psycopg

    return PostgresIndex(index_url)


class Store:
    def __init__(self, root: str | Path, admin_group: str = "", index_url: str = "", index_visibility: str = "own"):
        self.root = Path(root)
        self.admin_group = admin_group
        self.index = open_index(self.root, index_url, index_visibility, admin_group)

    # -- index ------------------------------------------------------------------------------
    def get(self, job_id: str) -> Row | None:
        return self.index.get(str(job_id))

    def rows(self, since: float | None = None) -> list[Row]:
        return self.index.rows(since)

    def page(self, selection: JobFilter) -> list[Row]:
        """The rows of a list or page, picked and cut by the index (see JobFilter)."""
        return self.index.page(selection)

    def set_drains(self, job_id: str, drains: list[dict], note: str | None = None) -> None:
        self.index.set_drains(str(job_id), drains, note)

    def put(self, row: Row) -> None:
        """Insert or replace one index row as it is (`save` writes the files first)."""
        self.index.put(row)

    def last_analysed_at(self) -> float | None:
        return self.index.last_analysed_at()

    def fleet_rows(self, since: float) -> list[Row]:
        return self.index.fleet_rows(since)

    def counts(self, since: float) -> list[dict]:
        return self.index.counts(since)

    def put_many(self, rows: list[Row]) -> None:
        """Many index rows in one transaction."""
        self.index.put_many(rows)

    def rows_analysed_with(self, rule_pack: str) -> set[str]:
        return self.index.rows_analysed_with(rule_pack)

    def count(self) -> int:
        return self.index.count()

    # -- files ------------------------------------------------------------------------------
    def job_dir(self, job_id: str) -> Path:
        _check_job_id(job_id)
        return self.root / str(job_id)

    def save(
        self,
        job_id: str,
        diagnosis,
        text: str,
        *,
        uid: int | None,
        user: str | None,
        state: str | None,
        drains: list[dict],
        drain_note: str = "",
        rule_pack: str = "",
        evidence: str = "",
    ) -> Row:
        """Write both files atomically, then upsert the index row.  Returns the row."""
        _check_job_id(job_id)
        ensure_results_dir(self.root)
        gid = _admin_gid(self.admin_group)
        owner_ok = True
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            dir_fd = job_dir_fd(root_fd, job_id)
        finally:
            os.close(root_fd)
        try:
            owner_ok = _give(dir_fd, uid, gid, 0o750)
            payload = json.dumps(diagnosis.model_dump(mode="json"), indent=2) + "\n"
            for name, content in ((JSON_NAME, payload), (TEXT_NAME, text)):
                owner_ok = _atomic_write(dir_fd, name, content.encode("utf-8"), uid, gid) and owner_ok
            clear_status(dir_fd)
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        row = Row(
            job_id=str(job_id), user=user, uid=uid, state=state, domain=diagnosis.domain,
            category=diagnosis.category, quality=diagnosis.quality, culprit_nodes=list(diagnosis.culprit_nodes),
            drains=drains, drain_note=drain_note, summary=diagnosis.summary[:2000], analysed_at=time.time(),
            owner_ok=owner_ok, path=str(self.job_dir(job_id)), rule_pack=rule_pack, evidence=evidence,
            **fleet_facts(diagnosis),
        )
        self.put(row)
        return row

    def read(self, job_id: str, name: str) -> str:
        """A diagnosis file; PermissionError / FileNotFoundError propagate (callers word them)."""
        return (self.job_dir(job_id) / name).read_text(encoding="utf-8")


def fleet_facts(diagnosis) -> dict:
    """What the fleet report needs of a diagnosis, kept in the index so that a report over many
    jobs reads no diagnosis file."""
    outcome, cause = diagnosis.outcome, diagnosis.cause
    return {
        "job_start": unix(outcome.start),
        "job_end": unix(outcome.end),
        "node_count": len(outcome.nodes),
        "cause_time": unix(cause.time) if cause else None,
        "trusted": bool(cause and cause.trusted),
        "systemic": bool(diagnosis.systemic),
        "gpus": [g.model_dump(mode="json") for g in diagnosis.gpus],
        "links": [link.model_dump(mode="json") for link in diagnosis.links],
    }


def job_dir_fd(root_fd: int, job_id: str) -> int:
    """The job's folder below the open results folder, made 0700 when new (modes are given after),
    opened without following a link."""
    try:
        os.mkdir(str(job_id), 0o700, dir_fd=root_fd)
    except FileExistsError:
        pass
    return os.open(str(job_id), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)


def _check_job_id(job_id: str) -> None:
    s = str(job_id)
    if not s or not all(c.isdigit() or c in "_+" for c in s) or not s[0].isdigit():
        raise StoreError(f"not a job id: {job_id!r}")


def _give(fd: int, uid: int | None, gid: int, mode: int) -> bool:
    """chmod an open fd and hand it to the job's user: chown when root, else an ACL entry that
    lets them read it (store/acl.py); False when neither could be done."""
    if uid is not None and os.geteuid() == 0:
        os.fchown(fd, uid, gid)
    os.fchmod(fd, mode)
    if uid is None or uid == os.geteuid() or os.geteuid() == 0:
        return True
    return grant_read(fd, uid, mode)


def _atomic_write(dir_fd: int, name: str, data: bytes, uid: int | None, gid: int) -> bool:
    given: list[bool] = []
    atomic.write_in_dir(dir_fd, name, data, mode=0o600, prepare=lambda fd: given.append(_give(fd, uid, gid, 0o640)))
    return given[0]
