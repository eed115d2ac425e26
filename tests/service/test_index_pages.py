"""Lists and pages ask the index for their rows only: the filters, the caller's visibility, the order
and LIMIT/OFFSET run in the database, on SQLite and PostgreSQL alike; at 100,000 rows a one-row page
costs SQLite a few hundred steps of its engine where reading every row costs millions."""

from __future__ import annotations

import sqlite3

import pytest

from slurm_attrib.store import JobFilter, Row, Store


def _row(i: int) -> Row:
    user, uid = (("alice", 1001), ("bob", 1002), (None, 1003))[i % 3]
    domain, category = (("gpu", "gpu_fell_off_bus"), ("network", "link_down"), ("application", "app_exception"))[i % 3 if i % 7 else 0]
    return Row(job_id=str(1000 + i), user=user, uid=uid, state="FAILED", domain=domain, category=category,
               quality="likely", culprit_nodes=[f"gpu{i % 50:02d}", f"gpu{(i + 1) % 50:02d}"], drains=[], drain_note="",
               summary=f"job {i}", analysed_at=1_700_000_000 + (i // 2), owner_ok=True, path=f"/r/{1000 + i}")


def _expected(rows: list[Row], selection: JobFilter) -> list[str]:
    """What the page must hold, computed from every row in Python (an unknown uid or user matches nothing)."""
    viewer = selection.viewer
    picked = [r for r in rows if (viewer is None or r.uid in {viewer[0]} - {None} or r.user in {viewer[1]} - {None})
              and selection.domain in (None, r.domain) and selection.category in (None, r.category)
              and (selection.node is None or selection.node in r.culprit_nodes)
              and (selection.since is None or r.analysed_at >= selection.since)]
    picked.sort(key=lambda r: (r.analysed_at, r.job_id), reverse=True)
    return [r.job_id for r in picked[selection.offset:selection.offset + selection.limit]]


def test_a_page_is_what_filtering_every_row_gives(tmp_path, index_url):
    store = Store(tmp_path / "results", index_url=index_url)
    assert store.page(JobFilter(None)) == []  # nothing written yet
    rows = [_row(i) for i in range(600)]
    store.put_many(rows)
    for selection in (JobFilter(None, limit=5), JobFilter((1001, "alice"), limit=50, offset=20),
                      JobFilter((1003, "nobody"), domain="gpu"), JobFilter((9999, None), limit=10),
                      JobFilter((1002, "bob"), node="gpu07", category="link_down"), JobFilter(None, node="gpu0"),
                      JobFilter(None, since=1_700_000_250, limit=1000), JobFilter(None, offset=599, limit=10)):
        got = [r.job_id for r in store.page(selection)]
        assert got == _expected(rows, selection), selection
    full = store.page(JobFilter((1001, "alice"), limit=1))[0]
    assert full == store.get(full.job_id)


@pytest.fixture
def sqlite_steps(monkeypatch):
    """Steps of SQLite's engine on every connection the index opens (counted in hundreds)."""
    steps = [0]
    connect = sqlite3.connect

    def counting_connect(*args, **kwargs):
        con = connect(*args, **kwargs)

        def tick():
            steps[0] += 100
            return 0

        con.set_progress_handler(tick, 100)
        return con

    monkeypatch.setattr(sqlite3, "connect", counting_connect)
    return steps


def test_a_one_row_page_of_100k_rows_reads_one_row(tmp_path, sqlite_steps):
    store = Store(tmp_path / "results")
    store.put_many([_row(i) for i in range(100_000)])
    for selection, job_id in ((JobFilter(None, limit=1), "100999"), (JobFilter((1002, "bob"), limit=1), "100997"),
                              (JobFilter((1001, "alice"), limit=2, offset=3), "100990")):
        sqlite_steps[0] = 0
        page = store.page(selection)
        assert page[0].job_id == job_id and len(page) == selection.limit
        assert sqlite_steps[0] < 5_000, (selection, sqlite_steps[0])
    sqlite_steps[0] = 0
    assert len(store.rows()) == 100_000
    assert sqlite_steps[0] > 1_000_000  # what reading the whole index costs: the count would show it
