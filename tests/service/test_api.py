"""The REST API over real HTTP: access per caller, the diagnosis as JSON and HTML, admin views,
uploads, OpenAPI."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from service_support import DEMO, PROXY_SECRET, start_server, stop_server, store_dir  # noqa: F401 (a fixture)

from slurm_attrib.model import Diagnosis

PROXY = {"X-Remote-User": "nobody", "X-Sattrib-Proxy-Secret": PROXY_SECRET}


@pytest.fixture(scope="module")
def server(store_dir):
    server = start_server(store_dir, f"results: {store_dir / 'results'}\nservice_admin_token_file: {store_dir / 'token'}\n"
                                     f"service_proxy_secret_file: {store_dir / 'proxy-secret'}\n"
                                     "service_trusted_proxies: ['127.0.0.1']\n")
    yield server
    stop_server(server)


def _tar(folder, extra: dict[str, bytes] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        if folder is not None:
            archive.add(folder, arcname="job")
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_health_needs_no_credentials_everything_else_does(server):
    status, body = server.json("/v1/health")
    assert status == 200 and body["status"] == "ok" and body["jobs"] == 2
    status, body = server.json("/v1/jobs")
    assert status == 401 and "no credentials" in body["detail"]
    assert server.json("/v1/jobs", {"Authorization": "Bearer wrong"})[0] == 401


def test_a_user_sees_only_their_own_jobs(server):
    status, jobs = server.json("/v1/jobs", PROXY)
    assert status == 200 and [j["job_id"] for j in jobs] == ["101"]
    status, body = server.json("/v1/jobs/101", PROXY)
    assert status == 200 and Diagnosis.model_validate(body).culprit_nodes == ["dgx004"]
    status, body = server.json("/v1/jobs/102", PROXY)
    assert status == 403 and body["detail"] == "job 102 is not your job"
    assert server.json("/v1/jobs/999", PROXY)[0] == 404
    assert server.json("/v1/jobs/..%2Fx", PROXY)[0] in (400, 404)
    assert server.json("/v1/report", PROXY)[0] == 403 and server.json("/v1/metrics", PROXY)[0] in (403,)


def test_the_job_page_is_the_html_report(server):
    status, headers, body = server.request("/v1/jobs/101/html", PROXY)
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'data-node="dgx004"' in body and b'data-kind="cause"' in body


def test_an_admin_token_sees_everything(server):
    admin = {"Authorization": f"Bearer {server.token}"}
    status, jobs = server.json("/v1/jobs", admin)
    assert sorted(j["job_id"] for j in jobs) == ["101", "102"]
    status, report = server.json("/v1/report?since=3650d", admin)
    assert status == 200 and report["by_category"] == {"gpu/gpu_fell_off_bus": 2}
    status, headers, body = server.request("/v1/metrics", admin)
    assert status == 200 and b'sattrib_diagnoses_total{domain="gpu",category="gpu_fell_off_bus",quality="confirmed"} 2' in body
    assert server.request("/metrics", admin)[2] == body and server.request("/metrics")[0] == 401
    assert server.json("/v1/report?since=soon", admin)[0] == 400


def test_an_uploaded_job_folder_is_analysed(server):
    status, headers, body = server.request("/v1/analyze", PROXY, _tar(DEMO), "POST")
    assert status == 200, body
    assert json.loads(body)["category"] == "gpu_fell_off_bus"
    for data, code in ((b"not a tar", 400), (b"", 400), (_tar(None, {"../escape.log": b"x"}), 400)):
        status, _, body = server.request("/v1/analyze", PROXY, data, "POST")
        assert status == code, body
    assert server.request("/v1/analyze", {}, _tar(DEMO), "POST")[0] == 401


def test_openapi_describes_the_api(server):
    status, spec = server.json("/openapi.json")
    assert status == 200 and {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/analyze", "/v1/report"} <= set(spec["paths"])
    assert "Diagnosis" in spec["components"]["schemas"]


def test_the_proxy_header_counts_only_from_the_configured_proxies(store_dir):
    other = start_server(store_dir, f"results: {store_dir / 'results'}\nservice_trusted_proxies: ['10.9.9.9']\n")
    try:
        status, body = other.json("/v1/jobs", PROXY)
        assert status == 401 and "honoured only from the configured proxies" in body["detail"]
    finally:
        stop_server(other)


def test_a_token_file_others_can_read_is_refused(store_dir):
    loose = store_dir / "loose-token"
    loose.write_text("x\n")
    loose.chmod(0o644)
    with pytest.raises(RuntimeError, match="must not be readable by group or others"):
        start_server(store_dir, f"results: {store_dir / 'results'}\nservice_admin_token_file: {loose}\n")


def test_dashboard_pages(server):
    admin = {"Authorization": f"Bearer {server.token}"}
    status, headers, body = server.request("/fleet?since=3650d", admin)
    assert status == 200 and b'id="failures"' in body and b"gpu/gpu_fell_off_bus" in body
    status, _, body = server.request("/nodes/dgx004", admin)
    assert status == 200 and body.count(b'href="../jobs/') == 2
    status, _, body = server.request("/jobs", PROXY)
    assert status == 200 and b'href="jobs/101"' in body and b"jobs/102" not in body
    status, _, body = server.request("/jobs/101", PROXY)
    assert status == 200 and b'data-kind="cause"' in body
    assert server.request("/fleet", PROXY)[0] == 403 and server.request("/jobs/102", PROXY)[0] == 403
    status, headers, _ = server.request("/", PROXY)
    assert status == 200  # redirected to the user's jobs
