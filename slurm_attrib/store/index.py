"""The results index: one row per analysed job, and the interface its backends implement.

A row holds what `sattrib show/stats/drain` and the fleet report need of a diagnosis (job ids,
users, states, categories, node names, drain entries; never log content), so that a question
over many jobs reads no diagnosis file.  The backends are SQLite in the results directory
(`sqlite.py`, the default) and PostgreSQL (`postgres.py`, for sites whose writers run on several
hosts at once); both give back the same `Row` for the same `put`.
"""

from __future__ import annotations

import functools
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from slurm_attrib.collection import no_cycle_collection
from slurm_attrib.errors import SattribError


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
    # The fleet's columns: an index written before them reads as these defaults.
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
    def from_values(cls, values: Mapping[str, object]) -> "Row":
        """A row from its column values, JSON columns already decoded; a fleet column that is
        absent or NULL (an index not yet migrated) takes its default."""
        fleet = {name: values[name] for name in FLEET_FIELDS if values.get(name) is not None}
        for name in ("trusted", "systemic"):
            if name in fleet:
                fleet[name] = bool(fleet[name])
        return cls(
            job_id=values["job_id"], user=values["user"], uid=values["uid"], state=values["state"],
            domain=values["domain"], category=values["category"], quality=values["quality"],
            culprit_nodes=values["culprit_nodes"] or [], drains=values["drains"] or [],
            drain_note=values["drain_note"] or "", summary=values["summary"] or "",
            analysed_at=values["analysed_at"], owner_ok=bool(values["owner_ok"]), path=values["path"], **fleet,
        )

    def values(self) -> dict[str, object]:
        """Column name -> value, in column order (JSON columns as Python lists)."""
        return {name: getattr(self, name) for name in COLUMNS}

    @property
    def elapsed(self) -> float | None:
        """Seconds the job ran, when both times are known."""
        if self.job_start is None or self.job_end is None:
            return None
        return max(0.0, self.job_end - self.job_start)


@dataclass(frozen=True)
class JobFilter:
    """Which rows a list or page shows: those a viewer may see (`viewer` (uid, user): the rows of
    that uid or user name; None: every row), matching the filters given, newest analysis first,
    `offset` rows skipped and at most `limit` returned."""

    viewer: tuple[int | None, str | None] | None
    domain: str | None = None
    category: str | None = None
    node: str | None = None  # one of the culprit nodes
    since: float | None = None  # analysed at or after (UNIX time)
    limit: int = 100
    offset: int = 0


def page_query(selection: JobFilter, mark: str, user_column: str, node_held: str) -> tuple[str, list]:
    """The WHERE, ORDER BY and LIMIT of a page (SQL after `FROM diagnoses`) and its arguments, in a
    backend's dialect: `mark` its placeholder, `user_column` the quoted user column, `node_held`
    its test that culprit_nodes holds the node in the placeholder."""
    where, args = [], []
    if selection.viewer is not None:
        where.append(f"(uid = {mark} OR {user_column} = {mark})")
        args += list(selection.viewer)
    for column in ("domain", "category"):
        if getattr(selection, column) is not None:
            where.append(f"{column} = {mark}")
            args.append(getattr(selection, column))
    if selection.node is not None:
        where.append(node_held)
        args.append(selection.node)
    if selection.since is not None:
        where.append(f"analysed_at >= {mark}")
        args.append(selection.since)
    tail = (" WHERE " + " AND ".join(where) if where else "") + f" ORDER BY analysed_at DESC, job_id DESC LIMIT {mark} OFFSET {mark}"
    return tail, [*args, selection.limit, selection.offset]


COLUMNS = tuple(f.name for f in fields(Row))
FLEET_FIELDS = COLUMNS[COLUMNS.index("rule_pack"):]
JSON_COLUMNS = ("culprit_nodes", "drains", "gpus", "links")


class Index(ABC):
    """Where the rows live.  Readers never create anything: before the first write, `get` finds
    nothing and `rows` is empty.  The first write creates the table, or adds the columns an older
    table lacks.  `put` replaces the whole row of its job, so writers in several processes or
    hosts may upsert at once; the last one wins."""

    where: str  # the index in messages (a path, or a URL without its password)

    @abstractmethod
    def get(self, job_id: str) -> Row | None: ...

    @abstractmethod
    def rows(self, since: float | None = None) -> list[Row]:
        """Every row analysed at or after `since` (a UNIX time), oldest first."""

    @abstractmethod
    def page(self, selection: JobFilter) -> list[Row]:
        """The rows `selection` picks, chosen, ordered and cut in the database (a list of ten
        rows reads ten rows, whatever the index holds)."""

    @abstractmethod
    def set_drains(self, job_id: str, drains: list[dict], note: str | None = None) -> None:
        """Replace a row's drain entries (and its drain note, when given)."""

    @abstractmethod
    def put(self, row: Row) -> None:
        """Insert or replace one row as it is."""

    @abstractmethod
    def put_many(self, rows: list[Row]) -> None:
        """`put` for many rows in one transaction (imports, benchmarks)."""

    @abstractmethod
    def fleet_rows(self, since: float) -> list[Row]:
        """Rows of jobs that ended at or after `since` which the fleet report reads one by one:
        hardware causes, network links, pending drain recommendations."""

    @abstractmethod
    def counts(self, since: float) -> list[dict]:
        """Jobs that ended at or after `since`, counted by domain, category, quality and UTC day:
        {domain, category, quality, day, jobs, node_seconds} (node_seconds: elapsed x nodes)."""

    @abstractmethod
    def last_analysed_at(self) -> float | None:
        """When the newest diagnosis was stored (None: the index is empty)."""

    @abstractmethod
    def rows_analysed_with(self, rule_pack: str) -> set[str]:
        """Job ids whose diagnosis was made with this rule-pack version (a batch re-analysis
        skips them)."""

    @abstractmethod
    def count(self) -> int:
        """How many jobs the index holds."""


def rows_of_tuples(tuples: list[tuple]) -> list[Row]:
    """Rows from tuples of every column in COLUMNS order, the JSON columns as JSON text: the fast
    path for a fleet report's many rows (each JSON column of all rows is decoded in one call)."""
    if not tuples:
        return []
    with no_cycle_collection():  # hundreds of thousands of new lists and dicts, none in a cycle
        columns = [list(c) for c in zip(*tuples)]
        for index in JSON_INDEXES:
            columns[index] = json.loads("[" + ",".join(text or "[]" for text in columns[index]) + "]")
        for index in BOOL_INDEXES:
            columns[index] = [bool(v) for v in columns[index]]
        for index, default in DEFAULT_INDEXES:
            columns[index] = [default if v is None else v for v in columns[index]]
        return [Row(*values) for values in zip(*columns)]


JSON_INDEXES = tuple(COLUMNS.index(c) for c in JSON_COLUMNS)
BOOL_INDEXES = tuple(COLUMNS.index(c) for c in ("owner_ok", "trusted", "systemic"))
DEFAULT_INDEXES = tuple((COLUMNS.index(c), d) for c, d in (("drain_note", ""), ("summary", ""), ("rule_pack", ""),
                                                             ("evidence", ""), ("node_count", 0)))
HARDWARE_DOMAINS = ("gpu", "network", "host")


def job_time(row: Row) -> float:
    """When the job failed (its cause), else ended, else was analysed: what time ranges select on."""
    return row.cause_time or row.job_end or row.analysed_at


def is_fleet_row(row: Row) -> bool:
    return row.domain in HARDWARE_DOMAINS or bool(row.links) or any(e.get("status") == "recommended" for e in row.drains)


def counts_of(rows: list[Row]) -> list[dict]:
    """`Index.counts` computed from rows (an index written before the fleet columns)."""
    import time

    groups: dict[tuple, dict] = {}
    for row in rows:
        day = time.strftime("%Y-%m-%d", time.gmtime(job_time(row)))
        key = (row.domain, row.category, row.quality, day)
        group = groups.setdefault(key, dict(zip(("domain", "category", "quality", "day"), key), jobs=0, node_seconds=0.0))
        group["jobs"] += 1
        if row.elapsed is not None:
            group["node_seconds"] += row.elapsed * max(row.node_count, 1)
    return [groups[key] for key in sorted(groups, key=lambda k: tuple(str(x) for x in k))]


@functools.cache
def readable_by_all(visibility: str) -> bool:
    """Whether the index file may be world-readable (config `index_visibility`); with `auto`,
    only where Slurm's PrivateData shows everyone's jobs, asked once per process (no answer:
    not)."""
    if visibility != "auto":
        return visibility == "everyone"
    from slurm_attrib.slurm import SlurmError
    from slurm_attrib.slurm.cli import jobs_visible_to_all, private_data

    try:
        return jobs_visible_to_all(private_data())
    except SlurmError:
        return False


def ensure_results_dir(root: Path) -> None:
    """Create the results directory (mode 0755: the job directories inside keep users apart)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0 or root.stat().st_uid == os.geteuid():
            os.chmod(root, 0o755)
    except OSError as exc:
        raise StoreError(f"results directory {root}: {exc.strerror or exc}") from None
