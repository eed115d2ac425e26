"""Fixtures shared by every test directory: a real PostgreSQL server for the results index.

Fixtures
--------
``postgres_server`` (session scope) -> URL of the database ``sattrib_test`` on a throw-away
    server (``contrib/testpg/start.sh``: Debian's PostgreSQL, as the ``postgres`` user when the
    tests run as root, on 127.0.0.1 and a free port), started when first asked for and stopped at
    session end.  Without the server binaries or psycopg the tests that ask for it are SKIPPED
    with one line saying why.  ``SATTRIB_KEEP_TESTPG=1`` keeps its directory (logs).

``index_url`` (function scope, parametrized ``sqlite`` / ``postgres``) -> the ``index_url``
    setting for a Store: ``""`` (SQLite in the results directory), then a URL whose
    ``search_path`` is a schema of this test's own (dropped afterwards), so that tests do not
    see each other's rows.  A test taking it runs against both backends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

TESTPG = Path(__file__).resolve().parents[1] / "contrib" / "testpg"


@pytest.fixture(scope="session")
def postgres_server():
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("postgresql tests: SKIPPED — psycopg is not installed (pip install 'slurm-attrib[postgres]')")
    state_dir = tempfile.mkdtemp(prefix="sattrib-testpg-", dir="/tmp")
    proc = subprocess.run([str(TESTPG / "start.sh"), state_dir], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        _stop(state_dir)
        if proc.returncode == 2:
            pytest.skip(f"postgresql tests: SKIPPED — {proc.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"contrib/testpg/start.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    yield proc.stdout.strip().splitlines()[-1]
    _stop(state_dir)


def _stop(state_dir: str) -> None:
    subprocess.run([str(TESTPG / "stop.sh"), state_dir], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    if not os.environ.get("SATTRIB_KEEP_TESTPG"):
        shutil.rmtree(state_dir, ignore_errors=True)  # what stop.sh leaves: a start that stopped early


@pytest.fixture(params=["sqlite", "postgres"])
def index_url(request):
    if request.param == "sqlite":
        yield ""
        return
    import psycopg

    server = request.getfixturevalue("postgres_server")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as con:
        con.execute(f"CREATE SCHEMA {schema}")
    yield f"{server}?options=-csearch_path%3D{schema}"
    with psycopg.connect(server, autocommit=True) as con:
        con.execute(f"DROP SCHEMA {schema} CASCADE")
