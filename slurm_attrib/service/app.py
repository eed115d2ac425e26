"""The HTTP API over the results store (FastAPI; the diagnosis' pydantic models are its schema).

    GET  /v1/health                  liveness, index reachable
    GET  /v1/jobs                    diagnoses the caller may see (filters: domain, category, node, since, limit)
    GET  /v1/jobs/{job_id}           one diagnosis (JSON)
    GET  /v1/jobs/{job_id}/html      the same as one self-contained HTML page
    GET  /v1/report?since=7d         the fleet report (admins)
    GET  /v1/metrics                 Prometheus metrics of the store (admins; also at /metrics, with the
                                     admin token as the scrape job's bearer token)
    POST /v1/analyze                 a logs-layout or capture folder as a .tar.gz upload -> its diagnosis (not stored;
                                     analysed in a bounded child process as user evidence: service.upload)

Pages for browsers (the same templates as the HTML report): `/fleet` and `/nodes/{node}` for
admins, `/jobs` (the caller's jobs) and `/jobs/{job_id}` for everyone.

Every request but health needs a caller (service.auth); a user sees only their own jobs.  Lists
and pages ask the index for just their rows (Store.page).
"""

from __future__ import annotations

import grp
import os
import socket
import stat
import time
from collections import Counter
from http import HTTPStatus
from pathlib import Path

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from slurm_attrib import __version__
from slurm_attrib.errors import SattribError
from slurm_attrib.model import Diagnosis
from slurm_attrib.service.auth import (
    Caller, DuplicateHeader, ProxyChannel, Unauthorized, identify, identity_headers, proxy_setup_problem,
    read_admin_token, read_secret,
)
from slurm_attrib.service.upload import MAX_UPLOAD_BYTES, UploadGate, UploadLimits, UploadRefused
from slurm_attrib.store import JSON_NAME, JobFilter, Row, Store

JOBS_PAGE_ROWS = 500  # the /jobs page
NODE_PAGE_ROWS = 1000  # the /nodes/{node} page


def create_app(config, over_socket: bool = False) -> FastAPI:
    """The app; `over_socket`: it is served on a Unix socket only (see unix_listener)."""
    app = FastAPI(title="sattrib", version=__version__, description="Failure attribution for distributed GPU jobs on Slurm.")
    store = Store(config.results, config.admin_group, config.index_url, config.index_visibility)
    admin_token = read_admin_token(config.service_admin_token_file)
    channel = ProxyChannel(over_socket=over_socket, secret=read_secret(config.service_proxy_secret_file,
                                                                        "service_proxy_secret_file"))
    problem = proxy_setup_problem(config, channel)
    if problem:
        raise SattribError(problem)
    uploads = UploadGate(UploadLimits(workers=config.service_upload_workers, queue=config.service_upload_queue,
                                      timeout=float(config.service_upload_timeout),
                                      memory_mb=config.service_upload_memory_mb))

    def caller(request: Request) -> Caller:
        try:
            headers = identity_headers(request.headers.raw, config)
        except DuplicateHeader as exc:
            raise HTTPException(400, str(exc)) from None
        try:
            return identify(headers, request.client.host if request.client else None, config, admin_token, channel)
        except Unauthorized as exc:
            raise HTTPException(401, str(exc), headers={"WWW-Authenticate": "MUNGE"}) from None

    def visible_to(who: Caller) -> tuple[int | None, str | None] | None:
        return None if who.admin else (who.uid, who.user)

    def admin(who: Caller = Depends(caller)) -> Caller:
        if not who.admin:
            raise HTTPException(403, "for administrators only")
        return who

    def visible_row(job_id: str, who: Caller) -> Row:
        try:
            row = store.get(job_id)
        except SattribError as exc:
            raise HTTPException(400, str(exc)) from None
        if row is None:
            raise HTTPException(404, f"job {job_id}: no diagnosis")
        if not who.admin and row.uid != who.uid and row.user != who.user:
            raise HTTPException(403, f"job {job_id} is not your job")
        return row

    def diagnosis_of(job_id: str, who: Caller) -> Diagnosis:
        visible_row(job_id, who)
        try:
            return Diagnosis.model_validate_json(store.read(job_id, JSON_NAME))
        except FileNotFoundError:
            raise HTTPException(404, f"job {job_id}: diagnosis file missing") from None

    @app.get("/v1/health")
    def health() -> dict:
        return {"status": "ok", "version": __version__, "jobs": store.count()}

    @app.get("/v1/jobs")
    def jobs(who: Caller = Depends(caller), domain: str | None = None, category: str | None = None,
             node: str | None = None, since: float | None = Query(None, description="UNIX time: analysed since"),
             limit: int = Query(100, ge=1, le=10000), offset: int = Query(0, ge=0)) -> list[dict]:
        selection = JobFilter(visible_to(who), domain=domain, category=category, node=node, since=since,
                              limit=limit, offset=offset)
        return [_summary(r) for r in store.page(selection)]

    @app.get("/v1/jobs/{job_id}", response_model=Diagnosis)
    def job(job_id: str, who: Caller = Depends(caller)) -> Diagnosis:
        return diagnosis_of(job_id, who)

    @app.get("/v1/jobs/{job_id}/html", response_class=HTMLResponse)
    def job_html(job_id: str, who: Caller = Depends(caller)) -> str:
        from slurm_attrib.render import render_html

        return render_html(diagnosis_of(job_id, who), [Path(d) for d in config.template_dirs])

    @app.get("/v1/report")
    def report(since: str = "7d", who: Caller = Depends(admin)) -> dict:
        from slurm_attrib.fleet.report import fleet_report, parse_days

        try:
            return fleet_report(store, config, time.time(), parse_days(since))
        except SattribError as exc:
            raise HTTPException(400, str(exc)) from None

    @app.get("/v1/metrics", response_class=PlainTextResponse)
    @app.get("/metrics", response_class=PlainTextResponse, include_in_schema=False)  # Prometheus' default path
    def metrics(who: Caller = Depends(admin)) -> str:
        from slurm_attrib.fleet.metrics import metrics_text

        return metrics_text(store, config, time.time())

    @app.post("/v1/analyze", response_model=Diagnosis)
    async def analyze(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_UPLOAD_BYTES:
            raise HTTPException(413, f"upload larger than {MAX_UPLOAD_BYTES} bytes")
        try:
            return JSONResponse(await uploads.analyse(request.stream(), tuple(config.rule_dirs)))
        except UploadRefused as exc:
            raise HTTPException(exc.status, exc.detail, headers=exc.headers) from None
        except ClientDisconnect:
            raise HTTPException(400, "the upload ended early (client disconnected)") from None

    # -- pages (the dashboard): the same templates as the HTML report ------------------------------
    templates = [Path(d) for d in config.template_dirs]

    @app.get("/", include_in_schema=False)
    def home(who: Caller = Depends(caller)) -> RedirectResponse:
        return RedirectResponse("fleet" if who.admin else "jobs", status_code=303)

    @app.get("/fleet", response_class=HTMLResponse, include_in_schema=False)
    def fleet_page(since: str = "14d", who: Caller = Depends(admin)) -> str:
        from slurm_attrib.fleet.report import fleet_report, parse_days
        from slurm_attrib.render import failures_chart, render_page

        now, days = time.time(), parse_days(since)
        data = fleet_report(store, config, now, days)
        return render_page("fleet.html.j2", templates, r=data, chart=failures_chart(data["per_day"], now, days))

    @app.get("/nodes/{node}", response_class=HTMLResponse, include_in_schema=False)
    def node_page(node: str, who: Caller = Depends(admin)) -> str:
        from slurm_attrib.render import render_page

        rows = store.page(JobFilter(None, node=node, limit=NODE_PAGE_ROWS))
        xids = Counter(str(g["xid"]) for r in rows for g in r.gpus if g.get("node") == node and g.get("xid") is not None)
        shown = [{**vars(r), "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.cause_time or r.job_end or r.analysed_at))}
                 for r in rows]
        return render_page("node.html.j2", templates, node=node, rows=shown, xids=dict(xids.most_common()))

    @app.get("/jobs", response_class=HTMLResponse, include_in_schema=False)
    def jobs_page(who: Caller = Depends(caller)) -> str:
        from slurm_attrib.render import render_page

        rows = store.page(JobFilter(visible_to(who), limit=JOBS_PAGE_ROWS))
        shown = [{**vars(r), "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.analysed_at))} for r in rows]
        return render_page("jobs.html.j2", templates, rows=shown, who=who)

    @app.get("/jobs/{job_id}", response_class=HTMLResponse, include_in_schema=False)
    def job_page(job_id: str, who: Caller = Depends(caller)) -> str:
        from slurm_attrib.render import render_html

        return render_html(diagnosis_of(job_id, who), templates)

    @app.exception_handler(SattribError)
    def sattrib_error(request: Request, exc: SattribError) -> Response:
        return _error_response(request, 400, str(exc).splitlines()[0], None, templates)

    @app.exception_handler(StarletteHTTPException)
    def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return _error_response(request, exc.status_code, exc.detail, exc.headers, templates)

    return app


def _error_response(request: Request, status: int, detail, headers: dict | None, templates: list[Path]) -> Response:
    """JSON for API clients; a small page for a browser (it asks for text/html and not for JSON)."""
    accept = request.headers.get("accept", "")
    if "text/html" not in accept or "application/json" in accept:
        return JSONResponse({"detail": detail}, status_code=status, headers=headers)
    from slurm_attrib.render import render_page

    title = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    page = render_page("error.html.j2", templates, status=status, title=title, detail=detail)
    return HTMLResponse(page, status_code=status, headers=headers)


def _summary(row: Row) -> dict:
    return {"job_id": row.job_id, "user": row.user, "state": row.state, "domain": row.domain, "category": row.category,
            "quality": row.quality, "culprit_nodes": row.culprit_nodes, "summary": row.summary,
            "analysed_at": row.analysed_at}


def unix_listener(path: str, group: str) -> socket.socket:
    """A listening Unix socket at `path`, mode 0660 and of `group` (the web server's) before anyone
    can connect: the proxy's channel, which local users outside the group cannot reach.  (uvicorn's
    own --uds leaves the socket 0666.)"""
    gid = -1
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise SattribError(f"service_socket_group {group!r} is not a group on this host") from None
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)  # left by an earlier run
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(path)
        os.chown(path, -1, gid)
        os.chmod(path, 0o660)
    except OSError as exc:
        listener.close()
        raise SattribError(f"--socket {path}: {exc.strerror or exc}") from None
    finally:
        os.umask(old)
    listener.listen(128)
    return listener
