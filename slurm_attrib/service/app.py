"""The HTTP API over the results store (FastAPI; the diagnosis' pydantic models are its schema).

    GET  /v1/health                  liveness, index reachable
    GET  /v1/jobs                    diagnoses the caller may see (filters: domain, category, node, since, limit)
    GET  /v1/jobs/{job_id}           one diagnosis (JSON)
    GET  /v1/jobs/{job_id}/html      the same as one self-contained HTML page
    GET  /v1/report?since=7d         the fleet report (admins)
    GET  /v1/metrics                 Prometheus metrics of the store (admins; also at /metrics, with the
                                     admin token as the scrape job's bearer token)
    POST /v1/analyze                 a logs-layout or capture folder as a .tar.gz upload -> its diagnosis (not stored)

Pages for browsers (the same templates as the HTML report): `/fleet` and `/nodes/{node}` for
admins, `/jobs` (the caller's jobs) and `/jobs/{job_id}` for everyone.

Every request but health needs a caller (service.auth); a user sees only their own jobs.
"""

from __future__ import annotations

import io
import tarfile
from collections import Counter
import tempfile
import time
from pathlib import Path, PurePosixPath

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse

from slurm_attrib import __version__
from slurm_attrib.errors import SattribError
from slurm_attrib.model import Diagnosis
from slurm_attrib.service.auth import Caller, Unauthorized, identify, read_admin_token
from slurm_attrib.store import JSON_NAME, Row, Store

MAX_UPLOAD_BYTES = 64 * 1024 * 1024
MAX_UPLOAD_FILES = 4096
MAX_UNPACKED_BYTES = 512 * 1024 * 1024


def create_app(config) -> FastAPI:
    app = FastAPI(title="sattrib", version=__version__, description="Failure attribution for distributed GPU jobs on Slurm.")
    store = Store(config.results, config.admin_group, config.index_url, config.index_visibility)
    admin_token = read_admin_token(config.service_admin_token_file)

    def caller(request: Request) -> Caller:
        try:
            return identify({k.lower(): v for k, v in request.headers.items()},
                            request.client.host if request.client else None, config, admin_token)
        except Unauthorized as exc:
            raise HTTPException(401, str(exc), headers={"WWW-Authenticate": "MUNGE"}) from None

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
             limit: int = Query(100, ge=1, le=10000)) -> list[dict]:
        rows = [r for r in store.rows(since=since) if who.admin or r.uid == who.uid or r.user == who.user]
        rows = [r for r in rows if (domain is None or r.domain == domain) and (category is None or r.category == category)
                and (node is None or node in r.culprit_nodes)]
        return [_summary(r) for r in reversed(rows)][:limit]

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
    async def analyze(request: Request, who: Caller = Depends(caller)) -> Diagnosis:
        body = await _limited_body(request)
        from slurm_attrib.engine.pipeline import analyze_path

        with tempfile.TemporaryDirectory(prefix="sattrib-upload-") as folder:
            root = Path(folder) / "job"
            _unpack(body, root)
            try:
                return analyze_path(root, tuple(Path(d) for d in config.rule_dirs))
            except SattribError as exc:
                raise HTTPException(422, str(exc).splitlines()[0]) from None

    # -- pages (the dashboard): the same templates as the HTML report ------------------------------
    templates = [Path(d) for d in config.template_dirs]

    @app.get("/", include_in_schema=False)
    def home(who: Caller = Depends(caller)) -> RedirectResponse:
        return RedirectResponse("fleet" if who.admin else "jobs", status_code=303)

    @app.get("/fleet", response_class=HTMLResponse, include_in_schema=False)
    def fleet_page(since: str = "14d", who: Caller = Depends(admin)) -> str:
        from slurm_attrib.fleet.report import fleet_report, parse_days
        from slurm_attrib.render import failures_chart, render_page

        data = fleet_report(store, config, time.time(), parse_days(since))
        return render_page("fleet.html.j2", templates, r=data, chart=failures_chart(data["per_day"]))

    @app.get("/nodes/{node}", response_class=HTMLResponse, include_in_schema=False)
    def node_page(node: str, who: Caller = Depends(admin)) -> str:
        from slurm_attrib.render import render_page

        rows = [r for r in reversed(store.rows()) if node in r.culprit_nodes]
        xids = Counter(str(g["xid"]) for r in rows for g in r.gpus if g.get("node") == node and g.get("xid") is not None)
        shown = [{**vars(r), "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.cause_time or r.job_end or r.analysed_at))}
                 for r in rows]
        return render_page("node.html.j2", templates, node=node, rows=shown, xids=dict(xids.most_common()))

    @app.get("/jobs", response_class=HTMLResponse, include_in_schema=False)
    def jobs_page(who: Caller = Depends(caller)) -> str:
        from slurm_attrib.render import render_page

        rows = [r for r in reversed(store.rows()) if who.admin or r.uid == who.uid or r.user == who.user][:500]
        shown = [{**vars(r), "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.analysed_at))} for r in rows]
        return render_page("jobs.html.j2", templates, rows=shown, who=who)

    @app.get("/jobs/{job_id}", response_class=HTMLResponse, include_in_schema=False)
    def job_page(job_id: str, who: Caller = Depends(caller)) -> str:
        from slurm_attrib.render import render_html

        return render_html(diagnosis_of(job_id, who), templates)

    @app.exception_handler(SattribError)
    def sattrib_error(request: Request, exc: SattribError) -> JSONResponse:
        return JSONResponse({"detail": str(exc).splitlines()[0]}, status_code=400)

    return app


def _summary(row: Row) -> dict:
    return {"job_id": row.job_id, "user": row.user, "state": row.state, "domain": row.domain, "category": row.category,
            "quality": row.quality, "culprit_nodes": row.culprit_nodes, "summary": row.summary,
            "analysed_at": row.analysed_at}


async def _limited_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_UPLOAD_BYTES:
        raise HTTPException(413, f"upload larger than {MAX_UPLOAD_BYTES} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_UPLOAD_BYTES:
            raise HTTPException(413, f"upload larger than {MAX_UPLOAD_BYTES} bytes")
        chunks.append(chunk)
    if not size:
        raise HTTPException(400, "empty upload: send the job folder as a .tar.gz body")
    return b"".join(chunks)


def _unpack(body: bytes, root: Path) -> None:
    """Regular files and folders only, inside root, within the file-count and size limits."""
    try:
        archive = tarfile.open(fileobj=io.BytesIO(body), mode="r:*")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise HTTPException(400, f"not a tar archive: {exc}") from None
    root.mkdir(parents=True)
    files = total = 0
    with archive:
        members = archive.getmembers()
        tops = {PurePosixPath(m.name).parts[0] for m in members if PurePosixPath(m.name).parts}
        # `tar czf job.tgz job/` holds one top folder: its content is the job folder
        strip = len(tops) == 1 and any(m.isdir() and m.name.rstrip("/") in tops for m in members)
        for member in members:
            path = PurePosixPath(member.name)
            if path.is_absolute() or ".." in path.parts:
                raise HTTPException(400, f"{member.name}: path outside the job folder")
            if member.isdir():
                continue
            if not member.isfile():
                continue  # links and devices are never followed or made
            files, total = files + 1, total + member.size
            if files > MAX_UPLOAD_FILES:
                raise HTTPException(413, f"more than {MAX_UPLOAD_FILES} files")
            if total > MAX_UNPACKED_BYTES:
                raise HTTPException(413, f"more than {MAX_UNPACKED_BYTES} bytes unpacked")
            parts = path.parts[1:] if strip else path.parts
            if not parts:
                continue
            target = root.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(member)
            target.write_bytes(source.read() if source else b"")
