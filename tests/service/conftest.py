"""The service tests' store: jobs of two users and an admin token."""

from __future__ import annotations

import pytest
from service_support import DEMO


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    """Job 101 of `nobody`, job 102 of `daemon`, both the demo's diagnosis."""
    from slurm_attrib.engine.pipeline import analyze_path
    from slurm_attrib.render import render_text
    from slurm_attrib.store import Store

    tmp = tmp_path_factory.mktemp("service")
    diagnosis = analyze_path(DEMO)
    store = Store(tmp / "results")
    for job_id, user, uid in (("101", "nobody", 65534), ("102", "daemon", 1)):
        store.save(job_id, diagnosis, render_text(diagnosis), uid=uid, user=user, state="FAILED", drains=[])
    token = tmp / "token"
    token.write_text("s3cret-admin-token\n")
    token.chmod(0o600)
    return tmp
