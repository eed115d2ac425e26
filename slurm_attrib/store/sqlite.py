"""The SQLite index: <results>/index.db, the default.

WAL mode and a busy timeout let the worker, `sattrib drain` and readers share it on one host.
The file (and its -wal/-shm files) is world-readable, mode 0644, only where Slurm shows everyone's
jobs anyway (config `index_visibility`, index.readable_by_all); otherwise mode 0640 with group
`admin_group`.  A reader without write access to the directory falls back to reading it
immutable (what the last writer checkpointed).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from slurm_attrib.store.index import (
    COLUMNS, JSON_COLUMNS, Index, JobFilter, Row, counts_of, ensure_results_dir, is_fleet_row, job_time, readable_by_all,
    page_query, rows_of_tuples,
)

INDEX = "index.db"
BUSY_TIMEOUT_MS = 15000
JOB_TIME = "COALESCE(cause_time, job_end, analysed_at)"  # index.job_time in SQL

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


class SqliteIndex(Index):
    def __init__(self, root: Path, visibility: str = "own", gid: Callable[[], int] = lambda: 0):
        self.root = root
        self.visibility = visibility
        self.gid = gid  # the group of a private index: asked at the first write
        self.path = root / INDEX
        self.where = str(self.path)

    def get(self, job_id: str) -> Row | None:
        con = self._reader()
        if con is None:
            return None
        with con:
            r = con.execute("SELECT * FROM diagnoses WHERE job_id = ?", (str(job_id),)).fetchone()
        con.close()
        return _row(r) if r else None

    def rows(self, since: float | None = None) -> list[Row]:
        query, args = "SELECT * FROM diagnoses", ()
        if since is not None:
            query, args = query + " WHERE analysed_at >= ?", (since,)
        return self._select(query + " ORDER BY analysed_at, job_id", args)

    def page(self, selection: JobFilter) -> list[Row]:
        tail, args = page_query(selection, "?", "user", "EXISTS (SELECT 1 FROM json_each(culprit_nodes) WHERE value = ?)")
        return self._select("SELECT * FROM diagnoses" + tail, tuple(args))

    def fleet_rows(self, since: float) -> list[Row]:
        try:
            return self._select(
                f"SELECT * FROM diagnoses WHERE {JOB_TIME} >= ? AND (domain IN ('gpu', 'network', 'host')"
                " OR links != '[]' OR drains LIKE '%\"status\": \"recommended\"%') ORDER BY analysed_at, job_id", (since,))
        except sqlite3.OperationalError as exc:  # an index written before the fleet columns
            if "no such column" not in str(exc):
                raise
            return [r for r in self.rows() if job_time(r) >= since and is_fleet_row(r)]

    def counts(self, since: float) -> list[dict]:
        con = self._reader()
        if con is None:
            return []
        try:
            with con:
                return [dict(r) for r in con.execute(
                    "SELECT domain, category, quality, date(" + JOB_TIME + ", 'unixepoch') AS day, count(*) AS jobs,"
                    " total(CASE WHEN job_start IS NOT NULL AND job_end IS NOT NULL"
                    " THEN max(job_end - job_start, 0) * max(node_count, 1) ELSE 0 END) AS node_seconds"
                    f" FROM diagnoses WHERE {JOB_TIME} >= ? GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4", (since,))]
        except sqlite3.OperationalError as exc:
            if "no such column" not in str(exc):
                raise
            return counts_of([r for r in self.rows() if job_time(r) >= since])
        finally:
            con.close()

    def _select(self, query: str, args: tuple) -> list[Row]:
        """Rows of `SELECT * ...`: its columns named in Row order and decoded by position (a fleet
        report reads up to 100,000 of them), or, in an index not yet migrated, by name."""
        con = self._reader()
        if con is None:
            return []
        con.row_factory = None
        try:
            with con:
                try:
                    return rows_of_tuples(con.execute(query.replace("SELECT *", SELECT_COLUMNS, 1), args).fetchall())
                except sqlite3.OperationalError as exc:
                    if "no such column" not in str(exc):
                        raise
                cursor = con.execute(query, args)
                names = [d[0] for d in cursor.description]
                return [_row(dict(zip(names, r))) for r in cursor]
        finally:
            con.close()

    def rows_analysed_with(self, rule_pack: str) -> set[str]:
        con = self._reader()
        if con is None:
            return set()
        try:
            with con:
                return {r[0] for r in con.execute("SELECT job_id FROM diagnoses WHERE rule_pack = ?", (rule_pack,))}
        except sqlite3.OperationalError as exc:  # an index written before the rule_pack column
            if "no such column" in str(exc):
                return set()
            raise
        finally:
            con.close()

    def last_analysed_at(self) -> float | None:
        con = self._reader()
        if con is None:
            return None
        with con:
            (value,) = con.execute("SELECT max(analysed_at) FROM diagnoses").fetchone()
        con.close()
        return value

    def count(self) -> int:
        con = self._reader()
        if con is None:
            return 0
        with con:
            (n,) = con.execute("SELECT count(*) FROM diagnoses").fetchone()
        con.close()
        return n

    def set_drains(self, job_id: str, drains: list[dict], note: str | None = None) -> None:
        con = self._writer()
        with con:
            if note is None:
                con.execute("UPDATE diagnoses SET drains = ? WHERE job_id = ?", (json.dumps(drains), str(job_id)))
            else:
                con.execute(
                    "UPDATE diagnoses SET drains = ?, drain_note = ? WHERE job_id = ?",
                    (json.dumps(drains), note, str(job_id)),
                )
        con.close()

    def put(self, row: Row) -> None:
        self.put_many([row])

    def put_many(self, rows: list[Row]) -> None:
        if not rows:
            return
        names = list(rows[0].values())
        con = self._writer()
        with con:
            con.executemany(
                f"INSERT OR REPLACE INTO diagnoses ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                (_sql_values(row) for row in rows),
            )
        con.close()

    def _writer(self) -> sqlite3.Connection:
        ensure_results_dir(self.root)
        public = readable_by_all(self.visibility)
        old = os.umask(0o022 if public else 0o027)
        try:
            con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000)
            con.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            _use_wal(con)
            con.executescript(SCHEMA)
            _add_fleet_columns(con)
        finally:
            os.umask(old)
        gid = None if public else self.gid()
        for suffix in ("", "-wal", "-shm"):
            _restrict(f"{self.path}{suffix}", 0o644 if public else 0o640, gid)
        con.row_factory = sqlite3.Row
        return con

    def _reader(self) -> sqlite3.Connection | None:
        """A read-only connection; None when there is no index yet or it cannot be read."""
        if not self.path.exists():
            return None
        # mode=ro needs the -shm file (or the right to create it); a plain user without write
        # access falls back to immutable=1, which reads what the last writer checkpointed
        # (writers checkpoint when they close).
        for query in ("mode=ro", "immutable=1"):
            try:
                con = sqlite3.connect(f"file:{self.path}?{query}", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
                con.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                con.execute("SELECT 1 FROM diagnoses LIMIT 1")
            except sqlite3.Error:
                continue
            con.row_factory = sqlite3.Row
            return con
        return None

def _restrict(path: str, mode: int, gid: int | None) -> None:
    """Best effort: a writer that does not own the file (another writer made it) leaves it."""
    try:
        if gid is not None and os.stat(path).st_gid != gid:
            os.chown(path, -1, gid)
        os.chmod(path, mode)
    except OSError:
        pass


def _sql_values(row: Row) -> tuple:
    values = row.values()
    for name in JSON_COLUMNS:
        values[name] = json.dumps(values[name])
    for name in ("owner_ok", "trusted", "systemic"):
        values[name] = int(values[name])
    return tuple(values.values())


SELECT_COLUMNS = "SELECT " + ", ".join(COLUMNS)


def _row(r) -> Row:
    values = dict(r)  # an index not yet migrated lacks the fleet columns
    for name in JSON_COLUMNS:
        value = values.get(name)
        if value is not None:
            values[name] = [] if value == "[]" else json.loads(value)
    return Row.from_values(values)


def _use_wal(con: sqlite3.Connection) -> None:
    """Switch a new index to WAL.  The switch needs the database alone and SQLite answers "locked"
    at once, without its busy handler, while another writer is creating the same new file: retry."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _add_fleet_columns(con: sqlite3.Connection) -> None:
    have = {r[1] for r in con.execute("PRAGMA table_info(diagnoses)")}
    for name, sql_type in FLEET_COLUMNS:
        if name not in have:
            try:
                con.execute(f"ALTER TABLE diagnoses ADD COLUMN {name} {sql_type}")
            except sqlite3.OperationalError as exc:  # another writer added it first
                if "duplicate column" not in str(exc):
                    raise
