"""The results index, SQLite and PostgreSQL alike: every test taking `index_url` runs against both
(tests/conftest.py starts a real PostgreSQL server; its tests are skipped without one)."""

from __future__ import annotations

import multiprocessing
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_attrib.config import ConfigError, load_config
from slurm_attrib.model import Diagnosis, Outcome
from slurm_attrib.store import INDEX, Row, Store, StoreError
from slurm_attrib.store.index import COLUMNS

REPO = Path(__file__).resolve().parents[2]


def _row(job_id: str, analysed_at: float = 1712345678.9876543, **changes) -> Row:
    """A row using every column, with values a lossy backend would change: a uid above 2**31,
    sub-microsecond times, non-ASCII text, nested JSON with keys out of order."""
    values = dict(
        job_id=job_id, user="alice", uid=4294967294, state="FAILED", domain="network", category="ib_link_down",
        quality="confirmed", culprit_nodes=["gpu03", "gpu01"],
        drains=[{"node": "gpu03", "reason": "sattrib: IB link down job 7", "status": "recommended", "detail": "",
                 "at": 1712345679.123456789}],
        drain_note="über the cap — kept", summary="mlx5_0 port 1 went down first\non gpu03", analysed_at=analysed_at,
        owner_ok=False, path=f"/r/{job_id}", rule_pack="builtin-1+abc", evidence="/spool/7", job_start=1712340000.5,
        job_end=None, node_count=4, cause_time=1712345000.000001, trusted=True, systemic=False,
        gpus=[{"xid": 79, "node": "gpu03", "pci_bus_id": "0000:3b:00.0"}],
        links=[{"type": "ib", "node": "gpu03", "device": "mlx5_0", "port": 1, "time": None, "trusted": True,
                "count": 3}],
    )
    values.update(changes)
    return Row(**values)


def _diag() -> Diagnosis:
    return Diagnosis(domain="gpu", category="xid_79", culprit_nodes=["gpu03"], quality="confirmed", drain=[],
                     evidence=[], summary="test", outcome=Outcome(state="FAILED", job_id="7"))


def test_an_index_never_written_is_empty(tmp_path, index_url):
    store = Store(tmp_path / "results", index_url=index_url)
    assert store.get("1") is None and store.rows() == [] and store.count() == 0
    assert store.rows_analysed_with("any") == set()
    assert not (tmp_path / "results").exists()  # reading creates nothing


def test_put_and_get_give_back_the_same_row(tmp_path, index_url):
    store = Store(tmp_path / "results", index_url=index_url)
    row = _row("7")
    store.put(row)
    got = store.get("7")
    assert got == row
    assert [type(getattr(got, c)) for c in COLUMNS] == [type(getattr(row, c)) for c in COLUMNS]
    bare = _row("8", user=None, uid=None, state=None, job_start=None, cause_time=None, culprit_nodes=[], drains=[],
                gpus=[], links=[], owner_ok=True, trusted=False)
    store.put(bare)
    assert store.get("8") == bare
    replaced = _row("7", category="ib_port_flap", drains=[], node_count=8)
    store.put(replaced)  # the whole row is replaced
    assert store.get("7") == replaced and store.count() == 2


def test_save_writes_the_files_and_the_row(tmp_path, index_url):
    store = Store(tmp_path / "results", index_url=index_url)
    row = store.save("9", _diag(), "text\n", uid=None, user="bob", state="FAILED", drains=[], rule_pack="p1")
    assert store.get("9") == row and row.culprit_nodes == ["gpu03"] and row.user == "bob"
    assert store.read("9", "diagnosis.txt") == "text\n"
    assert (tmp_path / "results" / INDEX).exists() == (index_url == "")  # PostgreSQL: no index.db


def test_rows_since_in_time_order(tmp_path, index_url):
    store = Store(tmp_path / "results", index_url=index_url)
    for job_id, at in (("3", 300.0), ("1", 100.0), ("2", 200.0), ("4", 200.0)):
        store.put(_row(job_id, analysed_at=at))
    assert [r.job_id for r in store.rows()] == ["1", "2", "4", "3"]
    assert [r.job_id for r in store.rows(since=200.0)] == ["2", "4", "3"]
    assert store.rows(since=301.0) == []
    assert store.rows(since=0)[0] == _row("1", analysed_at=100.0)


def test_set_drains_keeps_or_replaces_the_note(tmp_path, index_url):
    store = Store(tmp_path / "results", index_url=index_url)
    store.put(_row("5"))
    applied = [{"node": "gpu03", "reason": "sattrib: x", "status": "applied", "detail": "", "at": 1.5}]
    store.set_drains("5", applied)
    assert store.get("5").drains == applied and store.get("5").drain_note == "über the cap — kept"
    store.set_drains("5", [], note="undrained by alice")
    got = store.get("5")
    assert (got.drains, got.drain_note) == ([], "undrained by alice")
    assert got == _row("5", drains=[], drain_note="undrained by alice")
    store.set_drains("404", applied)  # no such job: nothing happens
    assert store.get("404") is None and store.count() == 1


def test_rows_analysed_with_a_rule_pack(tmp_path, index_url):
    store = Store(tmp_path / "results", index_url=index_url)
    for job_id, pack in (("1", "v1"), ("2", "v2"), ("3", "v1"), ("4", "")):
        store.put(_row(job_id, rule_pack=pack))
    assert store.rows_analysed_with("v1") == {"1", "3"}
    assert store.rows_analysed_with("v2") == {"2"}
    assert store.rows_analysed_with("v3") == set()
    store.put(_row("1", rule_pack="v2"))  # analysed again with the new pack
    assert store.rows_analysed_with("v2") == {"1", "2"} and store.count() == 4


# An index written before the fleet columns: SQLite's (REAL/INTEGER/TEXT) and PostgreSQL's twin.
OLD_TABLE = {
    "sqlite": """CREATE TABLE diagnoses (
        job_id TEXT PRIMARY KEY, user TEXT, uid INTEGER, state TEXT, domain TEXT, category TEXT,
        quality TEXT, culprit_nodes TEXT NOT NULL DEFAULT '[]', drains TEXT NOT NULL DEFAULT '[]',
        drain_note TEXT NOT NULL DEFAULT '', summary TEXT NOT NULL DEFAULT '', analysed_at REAL NOT NULL,
        owner_ok INTEGER NOT NULL DEFAULT 1, path TEXT NOT NULL)""",
    "postgres": """CREATE TABLE diagnoses (
        job_id text PRIMARY KEY, "user" text, uid bigint, state text, domain text, category text,
        quality text, culprit_nodes jsonb NOT NULL DEFAULT '[]', drains jsonb NOT NULL DEFAULT '[]',
        drain_note text NOT NULL DEFAULT '', summary text NOT NULL DEFAULT '', analysed_at double precision NOT NULL,
        owner_ok boolean NOT NULL DEFAULT true, path text NOT NULL)""",
}
OLD_ROW = """INSERT INTO diagnoses (job_id, "user", uid, state, domain, category, quality, culprit_nodes, analysed_at, path)
VALUES ('5', 'alice', 1000, 'FAILED', 'gpu', 'gpu_fell_off_bus', 'confirmed', '["gpu03"]', 1.0, '/x/5')"""


def _old_index(root: Path, index_url: str) -> None:
    if not index_url:
        root.mkdir()
        with sqlite3.connect(root / INDEX) as con:
            con.execute(OLD_TABLE["sqlite"])
            con.execute(OLD_ROW)
        return
    import psycopg

    with psycopg.connect(index_url) as con:  # the URL's search_path: this test's schema
        con.execute(OLD_TABLE["postgres"])
        con.execute(OLD_ROW)


def test_an_old_index_reads_then_gains_the_new_columns(tmp_path, index_url):
    root = tmp_path / "results"
    _old_index(root, index_url)
    store = Store(root, index_url=index_url)
    old = store.get("5")  # before any write: the old columns, the new ones at their defaults
    assert (old.culprit_nodes, old.rule_pack, old.links, old.trusted, old.job_start) == (["gpu03"], "", [], False, None)
    assert store.rows_analysed_with("") == set()  # no rule_pack column yet: nothing analysed with a pack
    store.set_drains("5", [])  # the first write adds the columns, keeping the row
    assert store.get("5") == old
    assert store.rows_analysed_with("") == {"5"}  # the column's default
    store.put(_row("6"))
    assert store.get("6") == _row("6") and store.count() == 2


def _upsert_50(root: str, index_url: str, worker: int, start) -> None:
    start.wait()
    store = Store(root, index_url=index_url)
    for i in range(50):
        store.put(_row(str(1000 * (worker + 1) + i), analysed_at=float(i)))
        store.put(_row("1", analysed_at=float(i), category=f"worker{worker}"))  # all four on one row too


def test_four_processes_upserting_at_once_lose_no_row(tmp_path, index_url):
    fork = multiprocessing.get_context("fork")
    start = fork.Barrier(4)
    workers = [fork.Process(target=_upsert_50, args=(str(tmp_path / "results"), index_url, w, start)) for w in range(4)]
    for p in workers:  # the table does not exist yet: the four race to create it as well
        p.start()
    for p in workers:
        p.join(60)
    assert [p.exitcode for p in workers] == [0, 0, 0, 0]
    store = Store(tmp_path / "results", index_url=index_url)
    expected = {str(1000 * (w + 1) + i) for w in range(4) for i in range(50)} | {"1"}
    assert {r.job_id for r in store.rows()} == expected and store.count() == 201
    assert store.get("1").category in {f"worker{w}" for w in range(4)}
    assert store.get("2049") == _row("2049", analysed_at=49.0)


def test_index_url_must_be_empty_or_postgresql(tmp_path):
    path = tmp_path / "config.yaml"
    for good in ("", "postgresql://sattrib@db/sattrib", "postgres://db.example/x?sslmode=require"):
        path.write_text(f"index_url: '{good}'\n")
        assert load_config(path).index_url == good
    for bad, said in (("mysql://sattrib:hunter2@db/x", "a mysql:// URL"), ("/var/lib/index.db", "without a URL scheme"),
                      ("5", "")):
        path.write_text(f"index_url: {bad}\n")
        with pytest.raises(ConfigError) as error:
            load_config(path)
        message = str(error.value)
        assert message.startswith(f"{path}: index_url must") and said in message and "hunter2" not in message
    with pytest.raises(StoreError, match="index_url must be empty .* not a sqlite:// URL"):
        Store(tmp_path / "r", index_url="sqlite:///x.db")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_server_is_one_line_without_the_password(tmp_path):
    pytest.importorskip("psycopg")
    port = _closed_port()
    url = f"postgresql://sattrib:hunter%402@127.0.0.1:{port}/sattrib?password=hunter3&connect_timeout=5"
    store = Store(tmp_path / "results", index_url=url)
    for call in (lambda: store.get("1"), lambda: store.put(_row("1")), store.count):
        with pytest.raises(StoreError) as error:
            call()
        message = str(error.value)
        assert message.startswith(f"cannot connect to the results index postgresql://sattrib@127.0.0.1:{port}/sattrib?connect_timeout=5: ")
        assert "hunter" not in message and "\n" not in message
    with pytest.raises(StoreError, match=r"^index_url postgresql://\(not a valid URL\): .*IPv6") as error:
        Store(tmp_path / "results", index_url="postgresql://sattrib:hunter4@[db/x")  # libpq's message quotes it
    assert "hunter" not in str(error.value)
    config = tmp_path / "config.yaml"
    config.write_text(f"results: {tmp_path / 'results'}\nindex_url: '{url}'\n")
    proc = subprocess.run([sys.executable, "-m", "slurm_attrib", "show", "1"], capture_output=True, text=True,
                          env={**os.environ, "SATTRIB_CONFIG": str(config), "PYTHONPATH": str(REPO)}, timeout=60)
    assert proc.returncode == 2 and "hunter" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("sattrib: cannot connect to the results index") and proc.stderr.count("\n") == 1


def test_without_psycopg_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # what `import psycopg` meets when it is not installed
    monkeypatch.delitem(sys.modules, "slurm_attrib.store.postgres", raising=False)
    with pytest.raises(StoreError, match=r"^index_url is PostgreSQL but psycopg is not installed: "
                                         r"pip install 'slurm-attrib\[postgres\]'$"):
        Store(tmp_path / "r", index_url="postgresql://db/sattrib")
    assert Store(tmp_path / "r").count() == 0  # SQLite needs no psycopg


def test_sattrib_show_reads_the_configured_index(tmp_path, index_url):
    store = Store(tmp_path / "results", index_url=index_url)
    store.save("12", _diag(), "the diagnosis of 12\n", uid=os.getuid(), user="me", state="FAILED", drains=[])
    config = tmp_path / "config.yaml"
    config.write_text(f"results: {tmp_path / 'results'}\nindex_url: '{index_url}'\n")
    proc = subprocess.run([sys.executable, "-m", "slurm_attrib", "show", "12"], capture_output=True, text=True,
                          env={**os.environ, "SATTRIB_CONFIG": str(config), "PYTHONPATH": str(REPO)}, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "the diagnosis of 12\n"), proc.stderr


def test_postgres_columns_are_the_rows():
    pytest.importorskip("psycopg")
    from slurm_attrib.store.postgres import COLUMN_TYPES, without_password

    assert tuple(COLUMN_TYPES) == COLUMNS
    assert without_password("postgresql://u:p%40ss@h1:5432,h2/db?password=x&sslmode=require") == \
        "postgresql://u@h1:5432,h2/db?sslmode=require"
    assert without_password("postgres://:secret@db/x") == "postgres://db/x"
    assert without_password("postgresql://u:pw@[::1/x") == "postgresql://(not a valid URL)"


def test_put_many_is_put_for_each_row(tmp_path, index_url):
    store = Store(tmp_path / "results", index_url=index_url)
    store.put(_row("1", category="old"))
    rows = [_row(str(n), analysed_at=1712345678.0 + n) for n in range(1, 201)]
    store.put_many(rows)  # job 1 replaced, 199 new
    assert store.count() == 200 and store.rows() == rows
    store.put_many([])
    assert store.count() == 200


def test_fleet_rows_and_counts_are_what_python_makes_of_the_rows(tmp_path, index_url):
    from slurm_attrib.store.index import counts_of, is_fleet_row, job_time

    store = Store(tmp_path / "results", index_url=index_url)
    recommended = [{"node": "gpu03", "reason": "sattrib: x", "status": "recommended", "detail": "", "at": 1.0}]
    rows = [
        _row("1", domain="gpu", links=[], drains=[]),
        _row("2", domain="application", category="app_exception", links=[], drains=[], culprit_nodes=[]),
        _row("3", domain="application", category="app_exception", drains=recommended, links=[]),
        _row("4", domain="unknown", category="hang_unattributed", drains=[]),  # has a link
        _row("5", domain="none", category="success", links=[], drains=[], cause_time=None, job_end=1712349999.5,
             job_start=1712340000.0),
        _row("6", domain="gpu", links=[], drains=[], cause_time=1000.0),  # long before the range
    ]
    store.put_many(rows)
    since = 1712000000.0
    in_range = [r for r in rows if job_time(r) >= since]
    assert [r.job_id for r in store.fleet_rows(since)] == [r.job_id for r in in_range if is_fleet_row(r)] == ["1", "3", "4"]
    got = store.counts(since)
    expected = counts_of(in_range)
    key = lambda c: (c["domain"], c["category"], c["quality"], c["day"])  # noqa: E731
    rounded = lambda cs: sorted(({**c, "node_seconds": round(c["node_seconds"], 3)} for c in cs), key=key)  # noqa: E731
    assert rounded(got) == rounded(expected)
    assert sum(c["jobs"] for c in got) == 5
