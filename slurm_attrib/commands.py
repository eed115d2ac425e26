"""`sattrib show | jobs | report | drain | undrain | analyze-job`: the controller-side commands.

Registered on the CLI group by `register(main)` (see the end of slurm_attrib/cli.py).
`show` imports neither pydantic nor the engine (except `--html`): it reads the stored files, so it is quick on a
login node.  Exit codes of `show`: 0 ok, 3 not your job, 4 job unknown, 5 job still running,
6 no diagnosis yet (analysis pending), 7 the analysis failed (ask an admin), 2 other errors.
"""

from __future__ import annotations

import grp
import json
import os
import sys
import time
from pathlib import Path

import click

from slurm_attrib.errors import SattribError

NOT_YOURS, UNKNOWN, RUNNING, PENDING, ANALYSIS_FAILED = 3, 4, 5, 6, 7


def _config():
    from slurm_attrib.config import ConfigError, load_config

    try:
        return load_config()
    except ConfigError as exc:
        raise SattribError(str(exc)) from None


def _store(config):
    from slurm_attrib.store import Store

    return Store(config.results, config.admin_group, config.index_url, config.index_visibility)


def _privileged() -> bool:
    """Root, or a member of the admin_group of a config only root can write (never the caller's
    own config: config.admin_group_for_gates)."""
    from slurm_attrib.config import ConfigError, admin_group_for_gates

    if os.geteuid() == 0:
        return True
    try:
        admin_group, _ = admin_group_for_gates()
    except ConfigError as exc:
        raise SattribError(str(exc)) from None
    if not admin_group:
        return False
    try:
        gid = grp.getgrnam(admin_group).gr_gid
    except KeyError:
        return False
    return gid in os.getgroups() or gid == os.getegid()


def _require_admin(command: str) -> None:
    if not _privileged():
        from slurm_attrib.config import admin_group_for_gates

        _, path = admin_group_for_gates()
        raise SattribError(f"{command} is for administrators (root, or admin_group of the root-owned {path})")


def _fail(code: int, message: str) -> None:
    click.echo(f"sattrib: {message}", err=True)
    sys.exit(code)


def _backend(config):
    from slurm_attrib.slurm import get_backend

    return get_backend(config.slurm_backend)


@click.command()
@click.argument("job_id")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True,
              help="markdown: for pasting into a GitHub issue.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the diagnosis as one self-contained HTML page to this file.")
def show(job_id: str, fmt: str, as_json: bool, html_out: Path | None) -> None:
    """Show the diagnosis of one of your jobs (found through the results index)."""
    from slurm_attrib.slurm import SlurmError
    from slurm_attrib.store import JSON_NAME, TEXT_NAME, StoreError

    fmt = "html" if html_out else "json" if as_json else fmt
    name = TEXT_NAME if fmt == "text" else JSON_NAME
    config = _config()
    store = _store(config)
    privileged = _privileged()
    me = os.getuid()
    try:
        store.job_dir(job_id)
    except StoreError as exc:
        _fail(2, str(exc))
    row = store.get(job_id)
    if row is not None:
        if not privileged and row.uid is not None and row.uid != me:
            _fail(NOT_YOURS, f"job {job_id} is not your job (it belongs to {row.user or row.uid})")
        try:
            text = store.read(job_id, name)
        except PermissionError:
            if row.uid == me and not row.owner_ok:
                _fail(2, f"job {job_id}: the diagnosis was stored without per-user access (the results filesystem takes no POSIX ACLs and the analysis did not run as root); ask an administrator")
            _fail(NOT_YOURS, f"job {job_id} is not your job (diagnosis not readable)")
        except FileNotFoundError:
            _fail_if_analysis_failed(store, job_id)
            _fail(PENDING, f"job {job_id}: no diagnosis yet (analysis pending)")
        _print_diagnosis(text, fmt, html_out)
        return
    # Not in the index, or the index is not readable by this user (PrivateData): the per-user
    # files, whose permissions say whose they are.
    try:
        text = store.read(job_id, name)
    except PermissionError:
        _fail(NOT_YOURS, f"job {job_id}: its diagnosis is not readable by you (not your job, or stored without per-user access)")
    except FileNotFoundError:
        _fail_if_analysis_failed(store, job_id)
    else:
        _print_diagnosis(text, fmt, html_out)
        return
    # No diagnosis: ask Slurm why.
    try:
        info = _backend(config).job_info(job_id)
    except SlurmError as exc:
        _fail(PENDING, f"job {job_id}: no diagnosis (not analysed yet, or unknown job; Slurm not reachable: {exc})")
    if info is None:
        _fail(UNKNOWN, f"job {job_id} unknown (neither in the results index nor known to Slurm)")
    if not privileged and info.uid is not None and info.uid != me:
        _fail(NOT_YOURS, f"job {job_id} is not your job")
    if info.active:
        _fail(RUNNING, f"job {job_id} still running (state {info.state}): the diagnosis comes after it ends")
    _fail(PENDING, f"job {job_id} ended ({info.state}): no diagnosis yet (analysis pending)")


def _fail_if_analysis_failed(store, job_id: str) -> None:
    """Exit 7 when the job's analysis failed (its status.json: slurm_attrib.store.status)."""
    from slurm_attrib.store.status import read_status

    try:
        status = read_status(store.job_dir(job_id))
    except OSError:  # not readable by this user: not theirs to know
        return
    if status and status.get("status") == "failed":
        reason = str(status.get("reason") or "").strip()
        _fail(ANALYSIS_FAILED, f"job {job_id}: analysis failed{f' ({reason})' if reason else ''}; ask an administrator")


def _print_diagnosis(text: str, fmt: str, html_out: Path | None) -> None:
    """The stored text or JSON as it is; HTML and Markdown rendered from the stored JSON."""
    if fmt in ("html", "markdown"):
        from slurm_attrib.model import Diagnosis
        from slurm_attrib.render import render_html, render_markdown

        diagnosis = Diagnosis.model_validate_json(text)
        if fmt == "html":
            html_out.write_text(render_html(diagnosis), encoding="utf-8")
            return
        text = render_markdown(diagnosis)
    click.echo(text, nl=not text.endswith("\n"))


@click.command()
@click.option("--since", default="7d", show_default=True, help="How far back (analysed since): 7d, 12h, 2w, or days.")
@click.option("--limit", type=click.IntRange(1, 10000), default=20, show_default=True, help="At most this many jobs, newest first.")
@click.option("--user", "user_name", help="Another user's jobs (administrators).")
def jobs(since: str, limit: int, user_name: str | None) -> None:
    """Your recent jobs, newest first, each with its one-line diagnosis (from the results index)."""
    import pwd

    from slurm_attrib.fleet.report import parse_days
    from slurm_attrib.store import JobFilter

    config = _config()
    if user_name:
        _require_admin("jobs --user")
        try:
            viewer = (pwd.getpwnam(user_name).pw_uid, user_name)
        except KeyError:
            viewer = (None, user_name)
    else:
        viewer = (os.getuid(), _user_name(os.getuid()))
    store = _store(config)
    rows = store.page(JobFilter(viewer=viewer, since=time.time() - parse_days(since) * 86400, limit=limit))
    if not rows:
        index = Path(config.results) / "index.db"
        if not config.index_url and index.exists() and not os.access(index, os.R_OK):
            _fail(2, "the results index is private here (Slurm's PrivateData): `sattrib show JOBID` reads your own diagnoses")
        click.echo(f"no diagnosed job of {viewer[1] or viewer[0]} in the last {since}")
        return
    for row in rows:
        verdict = f"{row.domain}/{row.category}" if row.domain else "-"
        where = ",".join(row.culprit_nodes) or "-"
        click.echo(f"{row.job_id}\t{row.state or '-'}\t{verdict} ({row.quality or '-'})\t{where}\t{_one_line(row.summary)}")


def _user_name(uid: int) -> str | None:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _one_line(text: str, width: int = 160) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 3] + "..."


@click.command()
@click.option("--since", "since", default="7d", show_default=True, help="How far back: 7d, 12h, 2w, or days.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "csv"]), default="text", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
def report(since: str, fmt: str, as_json: bool) -> None:
    """Fleet report: failures by domain/category and day, GPU-hours lost, top culprit nodes and
    GPUs, Xid histogram, repeat offenders, fabric patterns, drain recommendations."""
    from slurm_attrib.fleet import report as fleet_report

    config = _config()
    _require_admin("report")
    data = fleet_report.fleet_report(_store(config), config, time.time(), fleet_report.parse_days(since))
    fmt = "json" if as_json else fmt
    render = {"json": fleet_report.render_json, "csv": fleet_report.render_csv, "text": fleet_report.render_text}[fmt]
    click.echo(render(data), nl=False)


@click.command()
@click.option("--recommend", "mode", flag_value="recommend", default=True, help="List pending recommendations (default).")
@click.option("--apply", "mode", flag_value="apply", help="Apply pending recommendations (for NODE... only, if given).")
@click.argument("nodes", nargs=-1)
def drain(mode: str, nodes: tuple[str, ...]) -> None:
    """List or apply pending drain recommendations: single jobs' (from the results index) and the
    fleet's (repeat offenders over `repeat_window_days`)."""
    from slurm_attrib.drain import apply_pending, pending
    from slurm_attrib.fleet.history import fleet_view
    from slurm_attrib.fleet.offenders import acknowledge

    config = _config()
    store = _store(config)
    now = time.time()
    fleet = [d for d in fleet_view(store, config, now).drains if not nodes or d["node"] in nodes]
    if mode == "recommend":
        waiting = pending(store, nodes)
        if not waiting and not fleet:
            click.echo("no pending drain recommendations")
        for job, e in waiting:
            click.echo(f"{e['node']}\tjob {job}\t{e['reason']}")
        for e in fleet:
            click.echo(f"{e['node']}\tfleet {','.join(e['jobs'])}\t{e['reason']}")
        return
    _require_admin("drain --apply")
    backend = _backend(config)
    done = apply_pending(store, backend, nodes, fleet)
    acknowledge(config.results, [e["node"] for job, e in done if job.startswith("fleet:") and e["status"] == "applied"], now)
    if not done:
        click.echo("nothing to apply")
    failed = False
    for job, e in done:
        detail = f" ({e['detail']})" if e.get("detail") else ""
        click.echo(f"{e['node']}\t{job if job.startswith('fleet:') else 'job ' + job}\t{e['status']}{detail}")
        failed = failed or e["status"] == "failed"
    if failed:
        sys.exit(1)


@click.command()
@click.argument("nodes", nargs=-1, required=True)
def undrain(nodes: tuple[str, ...]) -> None:
    """Resume NODEs drained by sattrib (reason starting with `sattrib:`); others are left alone."""
    from slurm_attrib.drain import UndrainRefused
    from slurm_attrib.drain import undrain as do_undrain

    from slurm_attrib.fleet.offenders import acknowledge

    config = _config()
    backend = _backend(config)
    refused = False
    for node in nodes:
        try:
            old = do_undrain(node, backend)
            click.echo(f"{node}: resumed (was: {old})")
            try:  # its earlier repeat-offender jobs are settled
                acknowledge(config.results, [node], time.time())
            except OSError as exc:
                click.echo(f"sattrib: {node}: cannot record the resume in {config.results}: {exc.strerror or exc}", err=True)
        except UndrainRefused as exc:
            click.echo(f"sattrib: {exc}", err=True)
            refused = True
    if refused:
        sys.exit(1)


@click.command("analyze-job")
@click.argument("job_id")
@click.option("--deadline", type=float, default=0.0, show_default=True, help="Seconds to wait for missing node bundles.")
@click.option("--no-drain", is_flag=True, help="Store only; do not apply the drain policy.")
@click.option("--detach", is_flag=True, help="Return at once; work in the background (EpilogSlurmctld).")
def analyze_job(job_id: str, deadline: float, no_drain: bool, detach: bool) -> None:
    """Analyse a job's spool directory now, store the diagnosis, apply the drain policy."""
    from slurm_attrib.worker import analyse_job, detach as do_detach

    config = _config()
    if detach and not do_detach(Path(config.results) / "worker.log"):
        return
    row = analyse_job(job_id, config, deadline=deadline, apply=not no_drain)
    if detach:
        os._exit(0)
    click.echo(f"job {row.job_id}: {row.domain}/{row.category} ({row.quality}) culprits: {', '.join(row.culprit_nodes) or '-'}")
    for e in row.drains:
        detail = f" ({e['detail']})" if e.get("detail") else ""
        click.echo(f"  drain {e['node']}: {e['status']}{detail}  {e['reason']}")
    if row.drain_note:
        click.echo(f"  {row.drain_note}")
    click.echo(f"  stored in {row.path}")


def _comma_list(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


def _shard(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    index, _, count = value.partition("/")
    if not (index.isdigit() and count.isdigit() and 0 <= int(index) < int(count)):
        raise SattribError(f"--shard {value!r}: expected INDEX/COUNT with 0 <= INDEX < COUNT")
    return int(index), int(count)


@click.command()
@click.argument("sources", nargs=-1, type=click.Path(file_okay=False, path_type=Path))
@click.option("--jobs", "job_ids", multiple=True, help="Only these job ids (comma-separated, repeatable).")
@click.option("--since", help="Only jobs that ended since this time, asked of sacct (e.g. now-7days, 2026-12-01).")
@click.option("--until", default="now", show_default=True, help="With --since: ended before this time.")
@click.option("--state", "states", multiple=True, help="With --since: only jobs in these Slurm states (e.g. FAILED,NODE_FAIL).")
@click.option("--partition", "partitions", multiple=True, help="With --since: only jobs of these partitions.")
@click.option("--workers", type=click.IntRange(1, 256), default=None, help="Worker processes [default: CPUs, at most 8].")
@click.option("--force", is_flag=True, help="Analyse again jobs already stored with this rule pack.")
@click.option("--drain", "recommend", is_flag=True, help="Record new drain recommendations (never applied here).")
@click.option("--dry-run", is_flag=True, help="List the jobs that would be analysed, and stop.")
@click.option("--slurm-array", "array_tasks", type=click.IntRange(1, 10000), help="Submit the work as a Slurm job array of N tasks.")
@click.option("--sbatch-arg", "sbatch_args", multiple=True, help="Extra sbatch argument for --slurm-array (repeatable).")
@click.option("--job-list", type=click.Path(dir_okay=False, path_type=Path), help="Jobs to analyse, one 'JOBID<TAB>FOLDER' a line (what --slurm-array hands its tasks).")
@click.option("--shard", help="Only this share of the jobs: INDEX/COUNT (a job array task's part).")
def batch(sources, job_ids, since, until, states, partitions, workers, force, recommend, dry_run, array_tasks, sbatch_args, job_list, shard) -> None:
    """Re-analyse many jobs with the current rule pack and store their diagnoses.

    SOURCES are spool job folders, logs-layout folders, folders holding either, or a results
    tree (default: the configured spool).  Jobs already stored with this rule pack are skipped,
    so an interrupted run resumes where it stopped.  Ends with counts by domain and the
    diagnoses that changed."""
    from slurm_attrib.fleet import batch as fleet_batch

    config = _config()
    if job_list:
        jobs, problems = fleet_batch.read_job_list(job_list)
    else:
        jobs, problems = fleet_batch.find_jobs(sources or (Path(config.spool),))
    wanted = set(_comma_list(job_ids))
    if since or states or partitions:
        if not since:
            raise SattribError("--state and --partition select through sacct: give --since too")
        from slurm_attrib.slurm.cli import CliBackend

        ended = CliBackend().ended_jobs(since, until, _comma_list(states), _comma_list(partitions))
        wanted = wanted & set(ended) if wanted else set(ended)
        if not wanted:
            click.echo("sacct selected no job", err=True)
    if job_ids or since or states or partitions:
        missing = wanted - {j.job_id for j in jobs}
        jobs = [j for j in jobs if j.job_id in wanted]
        if missing:
            problems.append(f"{len(missing)} selected job(s) have no evidence folder here: {', '.join(sorted(missing)[:10])}")
    jobs = [j for j in jobs if fleet_batch.in_shard(j.job_id, _shard(shard))]
    for problem in problems:
        click.echo(f"sattrib: {problem}", err=True)
    if dry_run:
        for job in jobs:
            click.echo(f"{job.job_id}\t{job.evidence}")
        return
    if array_tasks:
        job_id, script = fleet_batch.submit_array(jobs, config, array_tasks, workers or 1, force, recommend, sbatch_args)
        click.echo(f"submitted job array {job_id} ({array_tasks} task(s), {len(jobs)} job(s)); script {script}")
        return
    summary = fleet_batch.run_batch(
        jobs, _store(config), config, workers=workers or fleet_batch.default_workers(), force=force,
        drain=recommend, progress=_batch_progress(),
    )
    _print_batch_summary(summary)
    if summary.interrupted:
        sys.exit(130)
    if summary.count("failed") or (problems and not jobs):
        sys.exit(1)


def _batch_progress():
    """A progress bar on a terminal, a plain line every 5 seconds otherwise."""
    started = time.monotonic()
    last = [0.0]
    tty = sys.stderr.isatty()

    def show(done: int, total: int, summary) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < (0.2 if tty else 5.0):
            return
        last[0] = now
        rate = summary.count("analysed") / max(now - started, 1e-6)
        failed = summary.count("failed")
        text = f"{done}/{total} jobs, {rate:.1f}/s" + (f", {failed} failed" if failed else "")
        if tty:
            width = 30
            filled = width * done // max(total, 1)
            click.echo(f"\r[{'#' * filled}{'.' * (width - filled)}] {text}", nl=done >= total, err=True)
        else:
            click.echo(f"batch: {text}", err=True)

    return show


def _print_batch_summary(summary) -> None:
    analysed, skipped, failed = (summary.count(s) for s in ("analysed", "skipped", "failed"))
    click.echo(f"{analysed} analysed, {skipped} skipped (already stored with this rule pack), {failed} failed"
               + (" -- interrupted: run again to go on" if summary.interrupted else ""))
    by_domain = summary.by_domain()
    if by_domain:
        click.echo("By domain: " + ", ".join(f"{domain} {count}" for domain, count in sorted(by_domain.items(), key=lambda kv: (-kv[1], kv[0]))))
    changed = summary.changed()
    click.echo(f"Changed versus the stored diagnosis: {len(changed)}")
    for outcome in changed:
        (d0, c0, q0, n0), (d1, c1, q1, n1) = outcome.before, outcome.after
        click.echo(f"  job {outcome.job_id}: {d0}/{c0} ({q0}) {','.join(n0) or '-'} -> {d1}/{c1} ({q1}) {','.join(n1) or '-'}")
    for outcome in summary.outcomes:
        if outcome.status == "failed":
            click.echo(f"  job {outcome.job_id}: failed: {outcome.error}")


@click.command()
@click.option("--textfile", type=click.Path(file_okay=False, path_type=Path),
              help="Write DIR/sattrib.prom atomically (node_exporter's textfile collector) instead of stdout.")
def metrics(textfile: Path | None) -> None:
    """Prometheus metrics of the results store: diagnoses by domain/category/quality, drains,
    hardware attributions per node and GPU, pending recommendations, last analysis time."""
    from slurm_attrib.fleet.metrics import metrics_text, write_textfile

    config = _config()
    _require_admin("metrics")
    text = metrics_text(_store(config), config, time.time())
    if textfile is None:
        click.echo(text, nl=False)
        return
    try:
        click.echo(write_textfile(textfile, text))
    except OSError as exc:
        raise SattribError(f"{textfile}: cannot write the metrics: {exc.strerror or exc}") from None


@click.command()
@click.option("--retry", is_flag=True, help="Send the dead letters again; keep those that still fail.")
@click.option("--test", "job_id", help="Send the stored diagnosis of JOBID to every webhook now.")
def webhooks(retry: bool, job_id: str | None) -> None:
    """Webhooks: resend what could not be delivered, or test the receivers with a stored diagnosis."""
    from slurm_attrib import notify

    config = _config()
    _require_admin("webhooks")
    if not retry and not job_id:
        raise SattribError("give --retry or --test JOBID")
    if job_id:
        from slurm_attrib.model import Diagnosis
        from slurm_attrib.store import JSON_NAME

        store = _store(config)
        row = store.get(job_id)
        if row is None:
            raise SattribError(f"job {job_id}: no stored diagnosis")
        diagnosis = Diagnosis.model_validate_json(store.read(job_id, JSON_NAME))
        if not config.webhooks:
            raise SattribError("no webhooks configured")
        failed = False
        for delivery in notify.notify(row, diagnosis, config):
            click.echo(f"{delivery.url}: " + ("delivered" if delivery.delivered else f"NOT delivered ({delivery.error}); dead-lettered"))
            failed = failed or not delivery.delivered
        if failed:
            sys.exit(1)
        return
    delivered, kept = notify.retry_dead_letters(config)
    click.echo(f"{delivered} delivered, {kept} still in {notify.dead_letter_path(config)}")
    if kept:
        sys.exit(1)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8642, show_default=True, type=click.IntRange(1, 65535))
@click.option("--socket", "socket_path", default=None, metavar="PATH",
              help="Listen on this Unix socket instead (mode 0660, group service_socket_group): the reverse proxy's channel.")
def serve(host: str, port: int, socket_path: str | None) -> None:
    """Serve the results store over HTTP (REST API under /v1, OpenAPI at /openapi.json).
    Needs the `serve` extra: pip install 'slurm-attrib[serve]'."""
    try:
        import uvicorn

        from slurm_attrib.service.app import create_app, unix_listener
    except ImportError as exc:
        raise SattribError(f"sattrib serve needs the serve extra (pip install 'slurm-attrib[serve]'): {exc}") from None
    config = _config()
    try:
        app = create_app(config, over_socket=socket_path is not None)
    except OSError as exc:
        raise SattribError(str(exc)) from None
    if socket_path is None:
        uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False)
        return
    # uvicorn ends the process with the signal that stopped it: the socket file stays, and the
    # next start replaces it.
    listener = unix_listener(socket_path, config.service_socket_group)
    uvicorn.run(app, fd=listener.fileno(), log_level="warning", proxy_headers=False)


@click.command("connectors")
@click.option("--node", "nodes", multiple=True, required=True, help="A node to look for (repeatable).")
@click.option("--since", default="1h", show_default=True, help="How far back: 30m, 12h, 2d.")
def connectors(nodes: tuple[str, ...], since: str) -> None:
    """Check the Loki and Prometheus connectors of the config: read what each holds for the
    nodes over the last --since, as for a job that ran there then, and print one line per source
    (status and what was read).  Exit 1 when a server could not be read."""
    from slurm_attrib.connectors import configured, probe
    from slurm_attrib.fleet.report import parse_days

    config = _config()
    if not configured(config):
        raise SattribError("no connector configured: set loki.url or prometheus.url in the config")
    now = time.time()
    entries = probe(config, list(_comma_list(nodes)), now - parse_days(since) * 86400, now)
    for entry in entries:
        click.echo(f"{entry.source:<32} {entry.status:<10} {entry.detail}")
    if any(e.status == "unreadable" for e in entries):
        sys.exit(1)


@click.command()
@click.option("--role", type=click.Choice(["auto", "controller", "node", "all"]), default="auto", show_default=True,
              help="controller: EpilogSlurmctld, results, index; node: Prolog, Epilog, local spool; "
                   "auto: all on a SlurmctldHost, else node.")
@click.option("--srun", "use_srun", is_flag=True, help="Measure clock skew: run `date` on every idle node (a one-minute job).")
@click.option("--since", default="7d", show_default=True, help="How far back hook failures are reported: 7d, 12h.")
@click.option("--json", "as_json", is_flag=True, help="The checks as JSON.")
def doctor(role: str, use_srun: bool, since: str, as_json: bool) -> None:
    """Check this node's or controller's deployment, one line per check (ok, warn, FAIL with what
    to do, skip): the config; Slurm reachable; Prolog, Epilog, EpilogSlurmctld and PrologFlags
    in Slurm's config; each hook run with --check as the user Slurm runs it as (its interpreter
    and config); spool, results and index owners and modes; munge; clock skew (--srun); hook
    failures recorded recently.  Exit 1 when a check fails.  Run it as root."""
    from slurm_attrib import doctor as checks_of
    from slurm_attrib.fleet.report import parse_days

    checks = checks_of.diagnose(role, use_srun, parse_days(since))
    if as_json:
        click.echo(json.dumps(checks_of.as_json(checks), indent=1))
    else:
        for check in checks:
            click.echo(check.line())
    if any(c.status == checks_of.FAIL for c in checks):
        sys.exit(1)


def register(main: click.Group) -> None:
    for command in (show, jobs, report, drain, undrain, analyze_job, batch, metrics, webhooks, serve, connectors, doctor):
        main.add_command(command)
