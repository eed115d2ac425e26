"""Results store: <results>/<jobid>/diagnosis.{json,txt} plus an SQLite index (<results>/index.db).

Files are written atomically (temp file + rename in the job directory; a re-analysis replaces
both files the same way).  Access: the job directory is mode 0750 and the files 0640, owned by
the job's uid with group `admin_group` (or root's group) -- the file permissions are what keeps
other users out.  All writes go through a directory file descriptor opened with O_NOFOLLOW and
files are created with O_EXCL|O_NOFOLLOW and fchown'ed, so a user who owns their job directory
cannot redirect root's writes with symlinks.

When the writer is not root (e.g. EpilogSlurmctld running as SlurmUser), files cannot be given
to the job's uid: they stay owned by the writer, and the index row says so (`owner_ok` = 0).

The index (WAL, busy timeout) is world-readable (mode 0644, like its -wal/-shm files) so that
`sattrib show` can find a job as a plain user; it holds job ids, users, states, categories and
node names, never log content.
"""

from __future__ import annotations

import grp
import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from slurm_attrib import atomic
from slurm_attrib.errors import SattribError

INDEX = "index.db"
JSON_NAME = "diagnosis.json"
TEXT_NAME = "diagnosis.txt"
BUSY_TIMEOUT_MS = 15000

SCHEMA = """
CREATE TABLE IF NOT EXISTS diagnoses (
    job_id        TEXT PRIMARY KEY,
    user          TEXT,
    uid           INTEGER,
    state         TEXT,
    domain        TEXT,
    category      TEXT,
    quality       TEXT,
    culprit_nodes TEXT NOT NULL DEFAULT '[]',   -- JSON list
    drains        TEXT NOT NULL DEFAULT '[]',   -- JSON list of {node, reason, status, detail, at}
    drain_note    TEXT NOT NULL DEFAULT '',
    summary       TEXT NOT NULL DEFAULT '',
    analysed_at   REAL NOT NULL,
    owner_ok      INTEGER NOT NULL DEFAULT 1,
    path          TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS diagnoses_analysed ON diagnoses(analysed_at);
CREATE INDEX IF NOT EXISTS diagnoses_uid ON diagnoses(uid);
"""

# Columns added for the fleet (name, SQL type and default); an older index gets them on first write.
FLEET_COLUMNS = (
    ("rule_pack", "TEXT NOT NULL DEFAULT ''"),  # ruleset.loader.pack_version() of the analysis
    ("evidence", "TEXT NOT NULL DEFAULT ''"),  # what was analysed (spool job dir or logs layout)
    ("job_start", "REAL"),
    ("job_end", "REAL"),
    ("node_count", "INTEGER NOT NULL DEFAULT 0"),
    ("cause_time", "REAL"),  # UNIX time of the cause, when known
    ("trusted", "INTEGER NOT NULL DEFAULT 0"),  # the cause came from sources the user cannot write
    ("systemic", "INTEGER NOT NULL DEFAULT 0"),
    ("gpus", "TEXT NOT NULL DEFAULT '[]'"),  # JSON list of {node, pci_bus_id, xid}
    ("links", "TEXT NOT NULL DEFAULT '[]'"),  # JSON list of {node, device, port, type, time, trusted}
)

# Drain entry statuses
RECOMMENDED = "recommended"  # policy recommend (or auto not allowed): waits for `sattrib drain --apply`
APPLIED = "applied"
KEPT = "kept_existing"  # node already drained/down with someone else's reason
FAILED = "failed"
SKIPPED = "skipped"  # policy off, over the per-job cap, systemic


class StoreError(SattribError):
    pass


@dataclass
class Row:
    job_id: str
    user: str | None
    uid: int | None
    state: str | None
    domain: str | None
    category: str | None
    quality: str | None
    culprit_nodes: list[str]
    drains: list[dict]
    drain_note: str
    summary: str
    analysed_at: float
    owner_ok: bool
    path: str
    rule_pack: str = ""
    evidence: str = ""
    job_start: float | None = None
    job_end: float | None = None
    node_count: int = 0
    cause_time: float | None = None
    trusted: bool = False
    systemic: bool = False
    gpus: list[dict] = field(default_factory=list)
    links: list[dict] = field(default_factory=list)

    @classmethod
    def from_sql(cls, r: sqlite3.Row) -> "Row":
        keys = set(r.keys())  # an index not yet migrated lacks the fleet columns
        extra = {}
        for name, _ in FLEET_COLUMNS:
            if name in keys and r[name] is not None:
                value = r[name]
                extra[name] = json.loads(value) if name in ("gpus", "links") else value
        for name in ("trusted", "systemic"):
            if name in extra:
                extra[name] = bool(extra[name])
        return cls(
            job_id=r["job_id"], user=r["user"], uid=r["uid"], state=r["state"], domain=r["domain"],
            category=r["category"], quality=r["quality"], culprit_nodes=json.loads(r["culprit_nodes"] or "[]"),
            drains=json.loads(r["drains"] or "[]"), drain_note=r["drain_note"] or "", summary=r["summary"] or "",
            analysed_at=r["analysed_at"], owner_ok=bool(r["owner_ok"]), path=r["path"], **extra,
        )

    @property
    def elapsed(self) -> float | None:
        """Seconds the job ran, when both times are known."""
        if self.job_start is None or self.job_end is None:
            return None
        return max(0.0, self.job_end - self.job_start)


def _admin_gid(admin_group: str) -> int:
    if admin_group:
        try:
            return grp.getgrnam(admin_group).gr_gid
        except KeyError:
            raise StoreError(f"admin_group {admin_group!r} is not a group on this host") from None
    return 0


class Store:
    def __init__(self, root: str | Path, admin_group: str = ""):
        self.root = Path(root)
        self.admin_group = admin_group

    # -- index ------------------------------------------------------------------------------
    def _connect(self, write: bool) -> sqlite3.Connection:
        path = self.root / INDEX
        if write:
            self._ensure_root()
            old = os.umask(0o022)
            try:
                con = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
                con.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                con.execute("PRAGMA journal_mode=WAL")
                con.executescript(SCHEMA)
                _add_fleet_columns(con)
            finally:
                os.umask(old)
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.chmod(f"{path}{suffix}", 0o644)
                except OSError:
                    pass
        else:
            if not path.exists():
                raise StoreError(f"no results index at {path} (nothing analysed yet)")
            con = None
            # mode=ro needs the -shm file (or the right to create it); a plain user without write
            # access falls back to immutable=1, which reads what the last writer checkpointed
            # (writers checkpoint when they close).
            for query in ("mode=ro", "immutable=1"):
                try:
                    con = sqlite3.connect(f"file:{path}?{query}", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
                    con.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                    con.execute("SELECT 1 FROM diagnoses LIMIT 1")
                    break
                except sqlite3.Error as exc:
                    error, con = exc, None
            if con is None:
                raise StoreError(f"cannot read the results index {path}: {error}") from None
        con.row_factory = sqlite3.Row
        return con

    def _ensure_root(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0 or self.root.stat().st_uid == os.geteuid():
                os.chmod(self.root, 0o755)
        except OSError as exc:
            raise StoreError(f"results directory {self.root}: {exc.strerror or exc}") from None

    def get(self, job_id: str) -> Row | None:
        try:
            con = self._connect(write=False)
        except StoreError:
            return None
        with con:
            r = con.execute("SELECT * FROM diagnoses WHERE job_id = ?", (str(job_id),)).fetchone()
        con.close()
        return Row.from_sql(r) if r else None

    def rows(self, since: float | None = None) -> list[Row]:
        try:
            con = self._connect(write=False)
        except StoreError:
            return []
        query, args = "SELECT * FROM diagnoses", ()
        if since is not None:
            query, args = query + " WHERE analysed_at >= ?", (since,)
        with con:
            out = [Row.from_sql(r) for r in con.execute(query + " ORDER BY analysed_at", args)]
        con.close()
        return out

    def set_drains(self, job_id: str, drains: list[dict], note: str | None = None) -> None:
        con = self._connect(write=True)
        with con:
            if note is None:
                con.execute("UPDATE diagnoses SET drains = ? WHERE job_id = ?", (json.dumps(drains), str(job_id)))
            else:
                con.execute(
                    "UPDATE diagnoses SET drains = ?, drain_note = ? WHERE job_id = ?",
                    (json.dumps(drains), note, str(job_id)),
                )
        con.close()

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
        self._ensure_root()
        gid = _admin_gid(self.admin_group)
        owner_ok = True
        root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            try:
                os.mkdir(str(job_id), 0o700, dir_fd=root_fd)
            except FileExistsError:
                pass
            dir_fd = os.open(str(job_id), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
        finally:
            os.close(root_fd)
        try:
            owner_ok = _give(dir_fd, uid, gid, 0o750)
            payload = json.dumps(diagnosis.model_dump(mode="json"), indent=2) + "\n"
            for name, content in ((JSON_NAME, payload), (TEXT_NAME, text)):
                owner_ok = _atomic_write(dir_fd, name, content.encode("utf-8"), uid, gid) and owner_ok
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

    def put(self, row: Row) -> None:
        """Insert or replace one index row as it is (`save` writes the files first)."""
        values = {
            "job_id": row.job_id, "user": row.user, "uid": row.uid, "state": row.state, "domain": row.domain,
            "category": row.category, "quality": row.quality, "culprit_nodes": json.dumps(row.culprit_nodes),
            "drains": json.dumps(row.drains), "drain_note": row.drain_note, "summary": row.summary,
            "analysed_at": row.analysed_at, "owner_ok": int(row.owner_ok), "path": row.path,
            "rule_pack": row.rule_pack, "evidence": row.evidence, "job_start": row.job_start, "job_end": row.job_end,
            "node_count": row.node_count, "cause_time": row.cause_time, "trusted": int(row.trusted),
            "systemic": int(row.systemic), "gpus": json.dumps(row.gpus), "links": json.dumps(row.links),
        }
        con = self._connect(write=True)
        with con:
            con.execute(
                f"INSERT OR REPLACE INTO diagnoses ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                tuple(values.values()),
            )
        con.close()

    def read(self, job_id: str, name: str) -> str:
        """A diagnosis file; PermissionError / FileNotFoundError propagate (callers word them)."""
        return (self.job_dir(job_id) / name).read_text(encoding="utf-8")


def fleet_facts(diagnosis) -> dict:
    """What the fleet report needs of a diagnosis, kept in the index so that a report over many
    jobs reads no diagnosis file."""
    outcome, cause = diagnosis.outcome, diagnosis.cause
    return {
        "job_start": _unix(outcome.start),
        "job_end": _unix(outcome.end),
        "node_count": len(outcome.nodes),
        "cause_time": _unix(cause.time) if cause else None,
        "trusted": bool(cause and cause.trusted),
        "systemic": bool(diagnosis.systemic),
        "gpus": [g.model_dump(mode="json") for g in diagnosis.gpus],
        "links": [link.model_dump(mode="json") for link in diagnosis.links],
    }


def _unix(value: str | None) -> float | None:
    if not value:
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:  # the contract: no zone means UTC
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def _add_fleet_columns(con: sqlite3.Connection) -> None:
    have = {r[1] for r in con.execute("PRAGMA table_info(diagnoses)")}
    for name, sql_type in FLEET_COLUMNS:
        if name not in have:
            try:
                con.execute(f"ALTER TABLE diagnoses ADD COLUMN {name} {sql_type}")
            except sqlite3.OperationalError as exc:  # another writer added it first
                if "duplicate column" not in str(exc):
                    raise


def _check_job_id(job_id: str) -> None:
    s = str(job_id)
    if not s or not all(c.isdigit() or c in "_+" for c in s) or not s[0].isdigit():
        raise StoreError(f"not a job id: {job_id!r}")


def _give(fd: int, uid: int | None, gid: int, mode: int) -> bool:
    """chown (when root and the uid is known) and chmod an open fd; False when ownership could
    not be given to the job's user."""
    ok = True
    if uid is not None and os.geteuid() == 0:
        os.fchown(fd, uid, gid)
    elif uid is not None and uid != os.geteuid():
        ok = False
    os.fchmod(fd, mode)
    return ok


def _atomic_write(dir_fd: int, name: str, data: bytes, uid: int | None, gid: int) -> bool:
    given: list[bool] = []
    atomic.write_in_dir(dir_fd, name, data, mode=0o600, prepare=lambda fd: given.append(_give(fd, uid, gid, 0o640)))
    return given[0]
