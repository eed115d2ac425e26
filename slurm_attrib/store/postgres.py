"""The PostgreSQL index: table `diagnoses` in the database `index_url` names, for sites whose
writers (the controller pair, batch re-analysis array tasks, a service) run on several hosts
at once.  A schema other than the default is chosen in the URL:
`postgresql://sattrib@db/sattrib?options=-csearch_path%3Dsattrib`.

The rows are SQLite's: times are double precision (UNIX seconds, so a Row comes back equal to
the one put), uids bigint, flags boolean, the JSON lists jsonb (equal as Python values; jsonb
orders an object's keys its own way).  Writers create the table on their first write, or add the
columns an older table lacks, under a transaction-scoped advisory lock (two concurrent
`CREATE TABLE IF NOT EXISTS` can otherwise collide); a `put` is one
`INSERT ... ON CONFLICT (job_id) DO UPDATE`, so concurrent writers need nothing more.  Readers only
SELECT: a role with SELECT alone can run `sattrib show`.

Every call opens its own connection (autocommit), as the SQLite index does, so a Store survives
a server restart and may be used on both sides of a fork.  psycopg is imported only here, when a
PostgreSQL URL is configured.  Server errors are one-line StoreErrors naming the URL without its
password.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import unquote, urlsplit, urlunsplit

from slurm_attrib.store.index import COLUMNS, JSON_COLUMNS, Index, JobFilter, Row, StoreError, counts_of, is_fleet_row, job_time, page_query, rows_of_tuples

try:
    import psycopg
    from psycopg import errors, sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg.rows import dict_row, tuple_row
    from psycopg.types.json import Jsonb
except ImportError:
    raise StoreError(
        "index_url is PostgreSQL but psycopg is not installed: pip install 'slurm-attrib[postgres]'"
    ) from None

JOB_TIME = "COALESCE(cause_time, job_end, analysed_at)"  # index.job_time in SQL
CONNECT_TIMEOUT = 10  # seconds, unless the URL sets connect_timeout (libpq waits forever)

# Column -> type; an older table gains the ones it lacks (with their defaults) on the first write.
COLUMN_TYPES = {
    "job_id": "text PRIMARY KEY",
    "user": "text",
    "uid": "bigint",
    "state": "text",
    "domain": "text",
    "category": "text",
    "quality": "text",
    "culprit_nodes": "jsonb NOT NULL DEFAULT '[]'",
    "drains": "jsonb NOT NULL DEFAULT '[]'",  # [{node, reason, status, detail, at}]
    "drain_note": "text NOT NULL DEFAULT ''",
    "summary": "text NOT NULL DEFAULT ''",
    "analysed_at": "double precision NOT NULL",
    "owner_ok": "boolean NOT NULL DEFAULT true",
    "path": "text NOT NULL",
    "rule_pack": "text NOT NULL DEFAULT ''",
    "evidence": "text NOT NULL DEFAULT ''",
    "job_start": "double precision",
    "job_end": "double precision",
    "node_count": "integer NOT NULL DEFAULT 0",
    "cause_time": "double precision",
    "trusted": "boolean NOT NULL DEFAULT false",
    "systemic": "boolean NOT NULL DEFAULT false",
    "gpus": "jsonb NOT NULL DEFAULT '[]'",
    "links": "jsonb NOT NULL DEFAULT '[]'",
}

SCHEMA_LOCK = "sattrib.diagnoses"  # advisory lock name (hashed) held while the table changes
INDEXES = (
    "CREATE INDEX IF NOT EXISTS diagnoses_analysed ON diagnoses (analysed_at)",
    "CREATE INDEX IF NOT EXISTS diagnoses_uid ON diagnoses (uid)",
)

UPSERT = sql.SQL("INSERT INTO diagnoses ({columns}) VALUES ({values}) ON CONFLICT (job_id) DO UPDATE SET {sets}").format(
    columns=sql.SQL(", ").join(map(sql.Identifier, COLUMNS)),
    values=sql.SQL(", ").join(sql.Placeholder() * len(COLUMNS)),
    sets=sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in COLUMNS[1:]),
)
SELECT = "SELECT * FROM diagnoses"  # an older table lacks some columns: Row gives their defaults
# Every column in Row order, jsonb as text (decoded by index.rows_of_tuples): the fleet report's fast path.
SELECT_TEXT = "SELECT " + ", ".join(f'"{c}"::text' if c in JSON_COLUMNS else f'"{c}"' for c in COLUMNS) + " FROM diagnoses"


class PostgresIndex(Index):
    def __init__(self, url: str):
        self.where = without_password(url)
        self._secrets = _passwords(url)
        try:
            params = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise StoreError(f"index_url {self.where}: {self._one_line(exc)}") from None
        params.setdefault("connect_timeout", CONNECT_TIMEOUT)
        params.setdefault("application_name", "sattrib")
        self._conninfo = make_conninfo("", **params)
        self._schema_ready = False

    def get(self, job_id: str) -> Row | None:
        with self._connection() as con:
            try:
                r = con.execute(SELECT + " WHERE job_id = %s", (str(job_id),)).fetchone()
            except errors.UndefinedTable:  # nothing written yet
                return None
        return Row.from_values(r) if r else None

    def rows(self, since: float | None = None) -> list[Row]:
        query, args = SELECT, ()
        if since is not None:
            query, args = query + " WHERE analysed_at >= %s", (since,)
        with self._connection() as con:
            try:
                return [Row.from_values(r) for r in con.execute(query + " ORDER BY analysed_at, job_id", args)]
            except errors.UndefinedTable:
                return []

    def page(self, selection: JobFilter) -> list[Row]:
        tail, args = page_query(selection, "%s", '"user"', "culprit_nodes @> jsonb_build_array(%s::text)")
        with self._connection() as con:
            try:
                return rows_of_tuples(con.cursor(row_factory=tuple_row).execute(SELECT_TEXT + tail, args).fetchall())
            except errors.UndefinedTable:
                return []
            except errors.UndefinedColumn:  # a table from before the fleet columns
                pass
            return [Row.from_values(r) for r in con.execute(SELECT + tail, args)]

    def fleet_rows(self, since: float) -> list[Row]:
        query = (SELECT_TEXT + f" WHERE {JOB_TIME} >= %s AND (domain IN ('gpu', 'network', 'host') OR links <> '[]'::jsonb"
                 " OR drains @> '[{\"status\": \"recommended\"}]'::jsonb) ORDER BY analysed_at, job_id")
        with self._connection() as con:
            try:
                return rows_of_tuples(con.cursor(row_factory=tuple_row).execute(query, (since,)).fetchall())
            except errors.UndefinedTable:
                return []
            except errors.UndefinedColumn:  # a table from before the fleet columns
                pass
        return [r for r in self.rows() if job_time(r) >= since and is_fleet_row(r)]

    def counts(self, since: float) -> list[dict]:
        query = (
            f"SELECT domain, category, quality, to_char(to_timestamp({JOB_TIME}) AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day,"
            " count(*) AS jobs, coalesce(sum(CASE WHEN job_start IS NOT NULL AND job_end IS NOT NULL"
            " THEN greatest(job_end - job_start, 0) * greatest(node_count, 1) ELSE 0 END), 0) AS node_seconds"
            f" FROM diagnoses WHERE {JOB_TIME} >= %s GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
        )
        with self._connection() as con:
            try:
                return [{**r, "jobs": int(r["jobs"]), "node_seconds": float(r["node_seconds"])} for r in con.execute(query, (since,))]
            except errors.UndefinedTable:
                return []
            except errors.UndefinedColumn:
                pass
        return counts_of([r for r in self.rows() if job_time(r) >= since])

    def rows_analysed_with(self, rule_pack: str) -> set[str]:
        with self._connection() as con:
            try:
                return {r["job_id"] for r in con.execute("SELECT job_id FROM diagnoses WHERE rule_pack = %s", (rule_pack,))}
            except (errors.UndefinedTable, errors.UndefinedColumn):  # nothing written, or before rule_pack
                return set()

    def last_analysed_at(self) -> float | None:
        with self._connection() as con:
            try:
                return con.execute("SELECT max(analysed_at) AS t FROM diagnoses").fetchone()["t"]
            except errors.UndefinedTable:
                return None

    def count(self) -> int:
        with self._connection() as con:
            try:
                return con.execute("SELECT count(*) AS n FROM diagnoses").fetchone()["n"]
            except errors.UndefinedTable:
                return 0

    def set_drains(self, job_id: str, drains: list[dict], note: str | None = None) -> None:
        with self._connection(write=True) as con:
            if note is None:
                con.execute("UPDATE diagnoses SET drains = %s WHERE job_id = %s", (Jsonb(drains), str(job_id)))
            else:
                con.execute(
                    "UPDATE diagnoses SET drains = %s, drain_note = %s WHERE job_id = %s",
                    (Jsonb(drains), note, str(job_id)),
                )

    def put(self, row: Row) -> None:
        self.put_many([row])

    def put_many(self, rows: list[Row]) -> None:
        if not rows:
            return
        with self._connection(write=True) as con, con.transaction(), con.cursor() as cursor:
            cursor.executemany(UPSERT, [_sql_values(row) for row in rows])

    @contextmanager
    def _connection(self, write: bool = False) -> Iterator[psycopg.Connection]:
        try:
            con = psycopg.connect(self._conninfo, autocommit=True, row_factory=dict_row)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to the results index {self.where}: {self._one_line(exc)}") from None
        try:
            if write and not self._schema_ready:
                _ensure_schema(con)
                self._schema_ready = True
            yield con
        except psycopg.Error as exc:
            raise StoreError(f"results index {self.where}: {self._one_line(exc)}") from None
        finally:
            con.close()

    def _one_line(self, exc: Exception) -> str:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def _sql_values(row: Row) -> tuple:
    values = row.values()
    for name in JSON_COLUMNS:
        values[name] = Jsonb(values[name])
    return tuple(values.values())


def _ensure_schema(con: psycopg.Connection) -> None:
    """Create the table, or add the columns it lacks; nothing (no lock) when it is complete."""
    if _missing_columns(con):
        with con.transaction():
            con.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (SCHEMA_LOCK,))
            missing = _missing_columns(con)
            if missing == list(COLUMNS):
                columns = (sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(COLUMN_TYPES[c])) for c in COLUMNS)
                con.execute(sql.SQL("CREATE TABLE IF NOT EXISTS diagnoses ({})").format(sql.SQL(", ").join(columns)))
            else:
                for c in missing:
                    con.execute(
                        sql.SQL("ALTER TABLE diagnoses ADD COLUMN IF NOT EXISTS {} {}").format(
                            sql.Identifier(c), sql.SQL(COLUMN_TYPES[c])
                        )
                    )
            for statement in INDEXES:
                con.execute(statement)


def _missing_columns(con: psycopg.Connection) -> list[str]:
    have = {
        r["attname"]
        for r in con.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass('diagnoses') AND attnum > 0 AND NOT attisdropped"
        )
    }
    return [c for c in COLUMNS if c not in have]


def without_password(url: str) -> str:
    """The URL as messages show it: no password in the user part or the query."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an IPv6 host without its closing bracket
        return url.split("://", 1)[0] + "://(not a valid URL)"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{hosts}" if user else hosts
    query = "&".join(p for p in parts.query.split("&") if p and "password" not in p.split("=", 1)[0].lower())
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _passwords(url: str) -> set[str]:
    """The password as written in the URL and decoded, to scrub from libpq's messages (some quote
    the URL)."""
    secrets = set()
    userinfo = re.match(r"[^:/]+://([^/?#]*)@", url)
    if userinfo and ":" in userinfo.group(1):
        secrets.add(userinfo.group(1).split(":", 1)[1])
    query = url.partition("?")[2].partition("#")[0]
    for p in query.split("&"):
        key, _, value = p.partition("=")
        if "password" in key.lower() and value:
            secrets.add(value)
    return {s for raw in secrets for s in (raw, unquote(raw)) if s}
