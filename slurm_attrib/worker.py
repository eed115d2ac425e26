"""Analysis on the controller: the EpilogSlurmctld worker.

    python -m slurm_attrib.worker --detach        # from EpilogSlurmctld (job from SLURM_JOB_ID)
    python -m slurm_attrib.worker JOBID           # in the foreground

`--detach` returns at once: the worker double-forks into its own session with stdin/stdout on
/dev/null and stderr appended to <results>/worker.log (so Slurm's script runner is not held).
The worker waits until every node of the job (SLURM_JOB_NODELIST, else the job record) has
written <spool>/<jobid>/nodes/<node>.json.gz or until `analysis_deadline` seconds have passed,
fetches the job's final state, exit code and times from Slurm, analyses the spool job directory,
stores the diagnosis and applies the drain policy.  Nodes that never reported are named in the
diagnosis' coverage (`missing`).  The worker then keeps watching for those nodes' bundles for
`late_bundle_wait` seconds: when one arrives the job is analysed again, the diagnosis replaced
and the drain policy applied to the new result.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from slurm_attrib.ingest.types import CoverageEntry

POLL = 0.5


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(f"{stamp} sattrib-worker[{os.getpid()}]: {message}", file=sys.stderr, flush=True)


def wait_for_bundles(job_dir: Path, nodes: list[str], deadline: float, stop_when_any: bool = False) -> list[str]:
    """Poll until every node's bundle exists (with `stop_when_any`: until one more does) or the
    deadline (monotonic) passes; returns the nodes still missing."""
    while True:
        missing = [n for n in nodes if not (job_dir / "nodes" / f"{n}.json.gz").is_file()]
        if not missing or time.monotonic() >= deadline or (stop_when_any and len(missing) < len(nodes)):
            return missing
        time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))


def job_info_final(backend, job_id: str, attempts: int = 6):
    """The job record, re-asked briefly while Slurm still shows it active."""
    from slurm_attrib.slurm import SlurmError

    info = None
    for i in range(attempts):
        try:
            info = backend.job_info(job_id)
        except SlurmError as exc:
            log(f"job {job_id}: {exc}")
            if i >= 1:
                return None
            info = None
        if info is not None and not info.active:
            return info
        time.sleep(0.5 * (i + 1))
    return info


def analyse_job(
    job_id: str,
    config=None,
    *,
    nodes: list[str] | None = None,
    deadline: float | None = None,
    backend=None,
    env: dict | None = None,
    apply: bool = True,
):
    """Wait for bundles, analyse, store, apply the drain policy.  Returns the index Row."""
    from slurm_attrib.config import load_config
    from slurm_attrib.hostlist import expand
    from slurm_attrib.slurm import SlurmError, get_backend

    t0 = time.monotonic()
    env = dict(os.environ if env is None else env)
    config = config or load_config()
    job_id = str(job_id)
    if backend is None:
        try:
            backend = get_backend(config.slurm_backend)
        except SlurmError as exc:
            log(f"job {job_id}: no Slurm access ({exc}); analysing without the job record")
    if nodes is None:
        try:
            nodes = expand(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"))
        except ValueError:
            nodes = []
    info = None
    if not nodes and backend is not None:
        info = job_info_final(backend, job_id, attempts=2)
        nodes = list(info.nodes) if info else []
    job_dir = Path(config.spool) / job_id
    wait = config.analysis_deadline if deadline is None else deadline
    missing = wait_for_bundles(job_dir, nodes, t0 + wait)
    waited = time.monotonic() - t0
    if missing:
        log(f"job {job_id}: no bundle from {', '.join(missing)} after {waited:.1f} s")
    if backend is not None:
        info = job_info_final(backend, job_id)
    if info is not None:
        _write_job_json(job_dir, info)
    facts = JobFacts(job_id, job_dir, nodes, info, env, wait)
    row = _analyse_and_store(facts, config, backend, apply, f"waited {waited:.1f} s, total {time.monotonic() - t0:.1f} s")
    while missing and config.late_bundle_wait > 0:
        still = wait_for_bundles(job_dir, missing, time.monotonic() + config.late_bundle_wait, stop_when_any=True)
        arrived = [n for n in missing if n not in still]
        if not arrived or not job_dir.is_dir():
            break
        missing = still
        row = _analyse_and_store(facts, config, backend, apply, f"again after the late bundle of {', '.join(arrived)}")
    return row


@dataclass(frozen=True)
class JobFacts:
    """What the worker knows of a job besides its bundles."""

    job_id: str
    job_dir: Path
    nodes: list[str]
    info: object  # slurm JobInfo, or None without Slurm access
    env: dict
    wait: float


def _analyse_and_store(facts: JobFacts, config, backend, apply: bool, how: str):
    """Analyse the spool job directory as it is now (in a child within the analysis budget),
    store the diagnosis, apply the drain policy."""
    from slurm_attrib.budget import budget_of, incomplete_diagnosis, run_within
    from slurm_attrib.drain import apply_policy, plan
    from slurm_attrib.ingest.types import JobContext
    from slurm_attrib.render import render_text
    from slurm_attrib.ruleset.loader import pack_version
    from slurm_attrib.store import Store

    info, env = facts.info, facts.env
    run = run_within(budget_of(config), _diagnose, facts, config)
    if run.stopped:
        job, coverage = run.partial or (JobContext(nodes=tuple(facts.nodes)), [])
        if run.partial is None and info is not None:
            job = _merge(job, info)
        diagnosis = incomplete_diagnosis(job, coverage, run.stopped)
        log(f"job {facts.job_id}: {run.stopped}")
    else:
        diagnosis, job = run.result
    entries, note = plan(diagnosis, config)
    if apply:
        entries = apply_policy(entries, config, backend)
    uid, user, told_by = job_owner(info, env)
    if uid is None:
        log(f"job {facts.job_id}: owner unknown (neither Slurm's record nor SLURM_JOB_UID gives one); "
            "the diagnosis stays readable by the admin group only")
    state = info.state if info is not None else job.state
    store = Store(config.results, config.admin_group, config.index_url, config.index_visibility)
    row = store.save(
        facts.job_id, diagnosis, render_text(diagnosis), uid=uid, user=user, state=state, drains=entries,
        drain_note=note, rule_pack=pack_version([Path(d) for d in config.rule_dirs]), evidence=str(facts.job_dir),
    )
    _after_store(store, config, row, diagnosis)
    summary = ", ".join(f"{e['node']}={e['status']}" for e in entries) or "none"
    log(
        f"job {facts.job_id}: {diagnosis.domain}/{diagnosis.category} ({diagnosis.quality}) culprits="
        f"{','.join(diagnosis.culprit_nodes) or '-'} drains: {summary}; owner {user or '-'} uid {uid} ({told_by}); {how}"
    )
    return row


def _diagnose(report, facts: JobFacts, config):
    """In the budgeted child: (diagnosis, job context); reports (job, coverage) once read."""
    from slurm_attrib.connectors import gather
    from slurm_attrib.engine.pipeline import analyze_evidence
    from slurm_attrib.ingest.bundle import load_spool_job

    info = facts.info
    evidence = load_spool_job(facts.job_dir)
    if info is not None:
        evidence.job = _merge(evidence.job, info)
    known_nodes = list(dict.fromkeys([*evidence.job.nodes, *facts.nodes]))
    if known_nodes != list(evidence.job.nodes):
        evidence.job = replace(evidence.job, nodes=tuple(known_nodes))
    noted = {c.node for c in evidence.coverage if c.node}  # its bundle was read, or said missing or unreadable
    for node in known_nodes:
        if node not in noted:
            evidence.coverage.append(
                CoverageEntry(node, f"nodes/{node}.json.gz", None, "missing", f"no node bundle within {facts.wait:g} s")
            )
    report((evidence.job, list(evidence.coverage)))
    gather(evidence, config)
    report((evidence.job, list(evidence.coverage)))
    return analyze_evidence(evidence, tuple(Path(d) for d in config.rule_dirs)), evidence.job


def _after_store(store, config, row, diagnosis) -> None:
    """Integrations fed by each new diagnosis; their failures are logged, never fatal."""
    if config.metrics_textfile_dir:
        try:
            from slurm_attrib.fleet.metrics import metrics_text, write_textfile

            write_textfile(config.metrics_textfile_dir, metrics_text(store, config, time.time()))
        except Exception as exc:  # noqa: BLE001 - the diagnosis is stored; metrics wait for the next one
            log(f"job {row.job_id}: metrics textfile not written: {type(exc).__name__}: {exc}")
    if config.webhooks:
        try:
            from slurm_attrib.notify import notify

            for delivery in notify(row, diagnosis, config):
                if not delivery.delivered:
                    log(f"job {row.job_id}: webhook {delivery.url} not delivered after {delivery.attempts} attempt(s): "
                        f"{delivery.error}; kept in the dead-letter file")
        except Exception as exc:  # noqa: BLE001 - a webhook never fails the worker
            log(f"job {row.job_id}: webhooks: {type(exc).__name__}: {exc}")


def job_owner(info, env: dict) -> tuple[int | None, str | None, str]:
    """(uid, user name, who said so) of the job's owner: Slurm's record, else the EpilogSlurmctld
    environment, else the user name looked up in the password database."""
    import pwd

    user = (info.user if info is not None else None) or env.get("SLURM_JOB_USER") or None
    if info is not None and info.uid is not None:
        return info.uid, user, info.source or "slurm"
    uid = _env_int(env, "SLURM_JOB_UID")
    if uid is not None:
        return uid, user, "SLURM_JOB_UID"
    if user:
        try:
            return pwd.getpwnam(user).pw_uid, user, "passwd"
        except KeyError:
            pass
    return None, user, "unknown"


def _env_int(env: dict, key: str) -> int | None:
    value = env.get(key, "")
    return int(value) if re.fullmatch(r"[0-9]{1,10}", value) else None


def _merge(job, info):
    return replace(
        job,
        job_id=info.job_id or job.job_id,
        user=info.user or job.user,
        state=info.state or job.state,
        exit_code=info.exit_code or job.exit_code,
        start=info.start if info.start is not None else job.start,
        end=info.end if info.end is not None else job.end,
        nodes=tuple(info.nodes) or job.nodes,
        source="job.json",
    )


def _write_job_json(job_dir: Path, info) -> None:
    """Leave the controller's job record next to the bundles (for re-analysis with
    `sattrib analyze <spool>/<jobid>`); best effort."""
    try:
        for folder in (job_dir, job_dir / "nodes"):  # the spool's modes (capture.common)
            folder.mkdir(mode=0o750, exist_ok=True)
        tmp = job_dir / f".job.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(info.record(), indent=1) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o640)
        os.replace(tmp, job_dir / "job.json")
    except OSError as exc:
        log(f"job {info.job_id}: cannot write {job_dir}/job.json ({exc.strerror or exc}); using it in memory")


def detach(log_path: Path | None) -> bool:
    """Double fork; returns True in the grandchild (the worker), exits in the parent's child.
    The caller (parent) gets False and should exit 0 at once."""
    pid = os.fork()
    if pid > 0:
        os.waitpid(pid, 0)  # the intermediate child exits immediately
        return False
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    err = devnull
    if log_path is not None:
        try:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            err = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        except OSError:
            err = devnull
    os.dup2(err, 2)
    for fd in {devnull, err}:
        if fd > 2:
            os.close(fd)
    os.chdir("/")
    return True


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="sattrib-worker")
    parser.add_argument("job_id", nargs="?", help="default: $SLURM_JOB_ID")
    parser.add_argument("--detach", action="store_true", help="return at once, work in the background")
    parser.add_argument("--deadline", type=float, default=None, help="seconds to wait for node bundles")
    args = parser.parse_args(argv)
    job_id = args.job_id or os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID")
    if not job_id or not re.fullmatch(r"[0-9]{1,12}", job_id):
        print("sattrib-worker: no job id (argument or SLURM_JOB_ID)", file=sys.stderr)
        return 2
    from slurm_attrib.config import load_config

    try:
        config = load_config()
    except Exception as exc:  # noqa: BLE001
        print(f"sattrib-worker: {exc}", file=sys.stderr)
        return 2
    if args.detach and not detach(Path(config.results) / "worker.log"):
        return 0
    try:
        analyse_job(job_id, config, deadline=args.deadline)
    except Exception as exc:  # noqa: BLE001 - told in the worker's log and the job's status file
        import traceback

        log(f"job {job_id}: analysis failed: {type(exc).__name__}: {exc}")
        traceback.print_exc(file=sys.stderr)
        _record_failure(config, job_id, f"analysis failed: {type(exc).__name__}: {exc}", f"analysis failed: {type(exc).__name__}")
        return 1
    return 0


def _record_failure(config, job_id: str, reason: str, public_reason: str) -> None:
    """<results>/<jobid>/status.json and <results>/hook-failures.log (slurm_attrib.store.status)."""
    from slurm_attrib.store import StoreError, _admin_gid
    from slurm_attrib.store.status import record_failure

    try:
        gid = _admin_gid(config.admin_group)
    except StoreError:
        gid = 0
    try:
        record_failure(config.results, job_id, reason, _env_int(dict(os.environ), "SLURM_JOB_UID"), gid,
                       public_reason=public_reason)
    except (OSError, StoreError) as exc:
        log(f"job {job_id}: cannot record the failure in {config.results}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
