"""`sattrib show | report | drain | undrain | analyze-job`: the controller-side commands.

Registered on the CLI group by `register(main)` (see the end of slurm_attrib/cli.py).
`show` imports neither pydantic nor the engine: it reads the stored files, so it is quick on a
login node.  Exit codes of `show`: 0 ok, 3 not your job, 4 job unknown, 5 job still running,
6 no diagnosis yet (analysis pending), 2 other errors.
"""

from __future__ import annotations

import grp
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import click

from slurm_attrib.errors import SattribError

NOT_YOURS, UNKNOWN, RUNNING, PENDING = 3, 4, 5, 6


def _config():
    from slurm_attrib.config import ConfigError, load_config

    try:
        return load_config()
    except ConfigError as exc:
        raise SattribError(str(exc)) from None


def _store(config):
    from slurm_attrib.store import Store

    return Store(config.results, config.admin_group, config.index_url)


def _privileged(config) -> bool:
    if os.geteuid() == 0:
        return True
    if config.admin_group:
        try:
            gid = grp.getgrnam(config.admin_group).gr_gid
        except KeyError:
            return False
        return gid in os.getgroups() or gid == os.getegid()
    return False


def _fail(code: int, message: str) -> None:
    click.echo(f"sattrib: {message}", err=True)
    sys.exit(code)


def _backend(config):
    from slurm_attrib.slurm import get_backend

    return get_backend(config.slurm_backend)


@click.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="The diagnosis as JSON instead of text.")
def show(job_id: str, as_json: bool) -> None:
    """Show the diagnosis of one of your jobs (found through the results index)."""
    from slurm_attrib.slurm import SlurmError
    from slurm_attrib.store import JSON_NAME, TEXT_NAME, StoreError

    config = _config()
    store = _store(config)
    privileged = _privileged(config)
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
            text = store.read(job_id, JSON_NAME if as_json else TEXT_NAME)
        except PermissionError:
            if row.uid == me and not row.owner_ok:
                _fail(2, f"job {job_id}: the diagnosis was stored without per-user access (analysis did not run as root); ask an administrator")
            _fail(NOT_YOURS, f"job {job_id} is not your job (diagnosis not readable)")
        except FileNotFoundError:
            _fail(PENDING, f"job {job_id}: no diagnosis yet (analysis pending)")
        click.echo(text, nl=not text.endswith("\n"))
        return
    # Not in the index: ask Slurm why.
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


@click.command()
@click.option("--since", "days", type=float, default=7.0, show_default=True, help="Days back.")
@click.option("--json", "as_json", is_flag=True)
def report(days: float, as_json: bool) -> None:
    """Admin summary: counts by domain/category, top culprit nodes, pending drains."""
    from slurm_attrib.drain import pending

    config = _config()
    if not _privileged(config):
        raise SattribError("report is for administrators (root or admin_group)")
    store = _store(config)
    rows = store.rows(since=time.time() - days * 86400)
    by_cat = Counter(f"{r.domain}/{r.category}" for r in rows)
    by_quality = Counter(r.quality for r in rows)
    nodes = Counter(n for r in rows if r.domain not in ("none",) for n in r.culprit_nodes)
    waiting = pending(store)
    applied = [(r.job_id, e) for r in rows for e in r.drains if e.get("status") == "applied"]
    data = {
        "since_days": days,
        "jobs": len(rows),
        "by_category": dict(by_cat.most_common()),
        "by_quality": dict(by_quality.most_common()),
        "top_culprit_nodes": dict(nodes.most_common(10)),
        "pending_drains": [{"job_id": j, **e} for j, e in waiting],
        "applied_drains": [{"job_id": j, **e} for j, e in applied],
    }
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"{len(rows)} job(s) analysed in the last {days:g} day(s)")
    click.echo("By domain/category:")
    for key, count in by_cat.most_common():
        click.echo(f"  {count:6d}  {key}")
    click.echo("By quality: " + ", ".join(f"{k} {v}" for k, v in by_quality.most_common()))
    click.echo("Top culprit nodes:")
    for node, count in nodes.most_common(10):
        click.echo(f"  {count:6d}  {node}")
    click.echo(f"Pending drain recommendations: {len(waiting)}")
    for job, e in waiting:
        click.echo(f"  {e['node']:16} job {job:10} {e['reason']}")
    click.echo(f"Drains applied: {len(applied)}")


@click.command()
@click.option("--recommend", "mode", flag_value="recommend", default=True, help="List pending recommendations (default).")
@click.option("--apply", "mode", flag_value="apply", help="Apply pending recommendations (for NODE... only, if given).")
@click.argument("nodes", nargs=-1)
def drain(mode: str, nodes: tuple[str, ...]) -> None:
    """List or apply pending drain recommendations from the results index."""
    from slurm_attrib.drain import apply_pending, pending

    config = _config()
    store = _store(config)
    if mode == "recommend":
        waiting = pending(store, nodes)
        if not waiting:
            click.echo("no pending drain recommendations")
        for job, e in waiting:
            click.echo(f"{e['node']}\tjob {job}\t{e['reason']}")
        return
    if os.geteuid() != 0 and not _privileged(config):
        raise SattribError("drain --apply needs root (or SlurmUser) rights")
    done = apply_pending(store, _backend(config), nodes)
    if not done:
        click.echo("nothing to apply")
    failed = False
    for job, e in done:
        detail = f" ({e['detail']})" if e.get("detail") else ""
        click.echo(f"{e['node']}\tjob {job}\t{e['status']}{detail}")
        failed = failed or e["status"] == "failed"
    if failed:
        sys.exit(1)


@click.command()
@click.argument("nodes", nargs=-1, required=True)
def undrain(nodes: tuple[str, ...]) -> None:
    """Resume NODEs drained by sattrib (reason starting with `sattrib:`); others are left alone."""
    from slurm_attrib.drain import UndrainRefused
    from slurm_attrib.drain import undrain as do_undrain

    backend = _backend(_config())
    refused = False
    for node in nodes:
        try:
            old = do_undrain(node, backend)
            click.echo(f"{node}: resumed (was: {old})")
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


def register(main: click.Group) -> None:
    for command in (show, report, drain, undrain, analyze_job):
        main.add_command(command)
