"""`sattrib serve` taking MUNGE credentials, the ones Slurm already trusts, from two unprivileged
users on the real test cluster's munged."""

from __future__ import annotations

import pwd
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
from service_support import DEMO, start_server, stop_server  # noqa: E402

pytestmark = pytest.mark.slurm


@pytest.fixture
def munge_server(slurm_cluster, tmp_path):
    from slurm_attrib.engine.pipeline import analyze_path
    from slurm_attrib.render import render_text
    from slurm_attrib.store import Store

    diagnosis = analyze_path(DEMO)
    store = Store(tmp_path / "results")
    user = slurm_cluster.test_user
    for job_id, name in (("201", user), ("202", "nobody")):
        store.save(job_id, diagnosis, render_text(diagnosis), uid=pwd.getpwnam(name).pw_uid, user=name, state="FAILED", drains=[])
    server = start_server(tmp_path, f"results: {tmp_path / 'results'}\n")
    yield server, slurm_cluster, user
    stop_server(server)


def test_each_user_sees_their_own_jobs_through_munge(munge_server):
    server, cluster, user = munge_server
    credential = cluster.run("munge", "-n", user=user).stdout.strip()
    status, jobs = server.json("/v1/jobs", {"Authorization": f"MUNGE {credential}"})
    assert status == 200 and [j["job_id"] for j in jobs] == ["201"]
    other = cluster.run("munge", "-n", user="nobody").stdout.strip()
    status, body = server.json("/v1/jobs/201", {"Authorization": f"MUNGE {other}"})
    assert status == 403, body  # nobody asking for the test user's job
    fresh = cluster.run("munge", "-n", user=user).stdout.strip()
    status, body = server.json("/v1/jobs/202", {"Authorization": f"MUNGE {fresh}"})
    assert status == 403, body
    # a credential is good once: munged refuses a replay
    status, body = server.json("/v1/jobs", {"Authorization": f"MUNGE {credential}"})
    assert status == 401 and "MUNGE credential refused" in body["detail"]
    status, body = server.json("/v1/jobs", {"Authorization": "MUNGE MUNGE:not-a-credential:"})
    assert status == 401
