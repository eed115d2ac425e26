"""`sattrib batch`: re-analyse many jobs with the current rule pack and store the diagnoses.

Jobs come from capture spool job directories (`<spool>/<jobid>/`), logs-layout directories (a
folder with `job.json`, or named by its job id), folders holding either, or a results tree (its
index names what each job was analysed from).  A job already stored with the same rule-pack
version from the same evidence is skipped, so a run that was interrupted goes on where it
stopped and a second run does nothing.  Analyses run in worker processes; the parent alone
writes the store (one writer per run; several runs, e.g. the tasks of a Slurm job array, share
the store through its own locking).

Re-analysing old jobs never drains: a new diagnosis keeps the drain entries already stored for
it, and otherwise records its recommendations as skipped unless `--drain` asks to recommend
them (the fleet report's repeat offenders are the way history becomes drains); `--drain` also
recommends what an earlier run without it recorded as skipped.

A folder never chooses whose job it replaces: a folder named by a job id must be that job (a
job.json naming another is refused), a stored job is replaced only from a folder owned by root,
SlurmUser, the user running the batch or the job's own user, and only by evidence naming the same
user; a new job from a user's folder is stored as that user's.
"""

from __future__ import annotations

import os
import pwd
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from slurm_attrib.errors import SattribError
from slurm_attrib.store import INDEX, SKIPPED, Row, Store

BATCH_NOTE = "batch re-analysis: not drained (sattrib batch --drain recommends)"


@dataclass(frozen=True)
class BatchJob:
    job_id: str
    evidence: Path


@dataclass
class Outcome:
    """What happened to one job in a run."""

    job_id: str
    status: str  # analysed | skipped | failed
    before: tuple | None = None  # (domain, category, quality, culprits) stored before the run
    after: tuple | None = None
    error: str = ""


@dataclass
class Summary:
    outcomes: list[Outcome] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # sources that name no job
    interrupted: bool = False

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    def by_domain(self) -> Counter:
        return Counter(o.after[0] for o in self.outcomes if o.after)

    def changed(self) -> list[Outcome]:
        return sorted((o for o in self.outcomes if o.before and o.after and o.before != o.after), key=_job_order)


# -- finding jobs ---------------------------------------------------------------------------------


def is_job_id(name: str) -> bool:
    return name.isascii() and bool(name) and name[0].isdigit() and all(c.isdigit() or c in "_+" for c in name)


def find_jobs(sources: Iterable[Path]) -> tuple[list[BatchJob], list[str]]:
    """The jobs under each source (deduplicated by job id, the first source wins) and one line per
    source that holds none."""
    jobs: dict[str, BatchJob] = {}
    problems: list[str] = []
    for source in sources:
        found, problem = _jobs_in(Path(source))
        if problem:
            problems.append(problem)
        for job in found:
            jobs.setdefault(job.job_id, job)
    return sorted(jobs.values(), key=_job_order), problems


def _jobs_in(source: Path) -> tuple[list[BatchJob], str]:
    if not source.is_dir():
        return [], f"{source}: not a directory"
    if (source / INDEX).is_file():
        return _jobs_of_results_tree(source)
    if _is_job_dir(source):
        job_id, problem = _job_id_of(source)
        return ([BatchJob(job_id, source)], "") if job_id else ([], problem)
    try:
        children = sorted(p for p in source.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as exc:
        return [], f"{source}: {exc.strerror or exc}"
    named = [(c, *_job_id_of(c)) for c in children if is_job_id(c.name) or (c / "job.json").is_file()]
    jobs = [BatchJob(job_id, c) for c, job_id, _ in named if job_id]
    refused = [problem for _, job_id, problem in named if not job_id]
    if refused:
        return jobs, "; ".join(refused[:5]) + (f" (and {len(refused) - 5} more)" if len(refused) > 5 else "")
    return jobs, "" if jobs else f"{source}: no job folders in it"


def _is_job_dir(path: Path) -> bool:
    from slurm_attrib.ingest.bundle import is_spool_job_dir

    return is_spool_job_dir(path) or (path / "job.json").is_file()


def _job_id_of(path: Path) -> tuple[str | None, str]:
    """(job id, "") or (None, why).  A folder named by a job id is that job; its job.json may not
    name another (a folder never chooses which stored job it replaces).  Otherwise job.json's
    job_id; a capture spool folder must be named by its job id."""
    import json

    from slurm_attrib.ingest.bundle import is_spool_job_dir

    try:
        named = str(json.loads((path / "job.json").read_text(encoding="utf-8")).get("job_id") or "")
    except (OSError, ValueError, AttributeError):
        named = ""
    if is_job_id(path.name):
        if named and named != path.name:
            return None, f"{path}: job.json names job {named[:40]!r}, the folder job {path.name}: skipped"
        return path.name, ""
    if is_spool_job_dir(path):
        return None, f"{path}: a spool folder must be named by its job id: skipped"
    if is_job_id(named):
        return named, ""
    return None, f"{path}: no job id (job.json or a folder named by the job id)"


def _jobs_of_results_tree(root: Path) -> tuple[list[BatchJob], str]:
    rows = [r for r in Store(root).rows() if r.evidence]
    jobs = [BatchJob(r.job_id, Path(r.evidence)) for r in rows if Path(r.evidence).is_dir()]
    return jobs, "" if jobs else f"{root}: its index names no evidence folder that still exists"


def _job_order(item) -> tuple:
    digits = "".join(c if c.isdigit() else " " for c in item.job_id).split()
    return tuple(int(d) for d in digits), item.job_id


def in_shard(job_id: str, shard: tuple[int, int] | None) -> bool:
    """Stable split of jobs over `count` array tasks: shard = (index, count)."""
    if shard is None:
        return True
    index, count = shard
    return zlib.crc32(job_id.encode()) % count == index


# -- running --------------------------------------------------------------------------------------


def analyse_one(job: BatchJob, config) -> tuple:
    """In a worker process: (job_id, diagnosis, text, user, state) or (job_id, None, error).
    The analysis runs in a child within the analysis budget; one that exceeds it gives an
    incomplete diagnosis (what was read, why it stopped)."""
    from slurm_attrib.budget import budget_of, incomplete_diagnosis, run_within
    from slurm_attrib.engine.pipeline import warm_scanners
    from slurm_attrib.render import render_text

    try:
        warm_scanners(tuple(Path(d) for d in config.rule_dirs))  # once here, inherited by every child
        run = run_within(budget_of(config), _diagnose, job.evidence, config)
    except SattribError as exc:
        return job.job_id, None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    except Exception as exc:  # noqa: BLE001 - one broken job never stops the batch
        return job.job_id, None, f"internal error: {type(exc).__name__}: {exc}"
    if run.stopped:
        context, coverage = run.partial or (None, [])
        diagnosis = incomplete_diagnosis(context, coverage, run.stopped)
    else:
        diagnosis, context = run.result
    user, state = (context.user, context.state) if context is not None else (None, None)
    return job.job_id, diagnosis, render_text(diagnosis), user, state


def _diagnose(report, folder: Path, config) -> tuple:
    """In the budgeted child: (diagnosis, job context); reports (job, coverage) once read."""
    from slurm_attrib.connectors import gather
    from slurm_attrib.engine.pipeline import analyze_evidence, load_any

    evidence = load_any(folder)
    report((evidence.job, list(evidence.coverage)))
    gather(evidence, config)
    report((evidence.job, list(evidence.coverage)))
    return analyze_evidence(evidence, tuple(Path(d) for d in config.rule_dirs)), evidence.job


# A file of a job's evidence newer than its analysis by more than this arrived after it (a bundle a
# node's next epilog forwarded from its local spool); within it, clocks of the nodes and of the
# shared filesystem may differ, and the worker's late_bundle_wait covers bundles that came late.
ARRIVED_AFTER = 60.0
MAX_EVIDENCE_FILES = 10_000  # looked at per job


def arrived_since(evidence: Path, analysed_at: float) -> bool:
    """Whether a file of the job's evidence (a spool job folder's bundles and job.json, a logs
    folder's files two levels deep) was written after the job was analysed."""
    seen = 0
    folders = [evidence]
    for _ in range(2):  # the folder, then its subfolders
        deeper = []
        for folder in folders:
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                seen += 1
                if seen > MAX_EVIDENCE_FILES:
                    return False
                try:
                    if entry.is_dir(follow_symlinks=False):
                        deeper.append(entry.path)
                    elif entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime > analysed_at + ARRIVED_AFTER:
                        return True
                except OSError:
                    continue
        folders = deeper
    return False


def run_batch(
    jobs: list[BatchJob],
    store: Store,
    config,
    *,
    workers: int = 1,
    force: bool = False,
    drain: bool = False,
    progress: Callable[[int, int, Summary], None] | None = None,
) -> Summary:
    """Analyse every job not yet stored with this rule pack, or whose evidence got a file after it
    was analysed (arrived_since); store each as it finishes."""
    from slurm_attrib.ruleset.loader import pack_version

    rule_dirs = tuple(Path(d) for d in config.rule_dirs)
    pack = pack_version(list(rule_dirs))
    trusted = trusted_owners(config)
    stored = {r.job_id: r for r in store.rows()}
    summary = Summary()
    todo = []
    for job in jobs:
        row = stored.get(job.job_id)
        if (not force and row is not None and row.rule_pack == pack and row.evidence == str(job.evidence)
                and not arrived_since(job.evidence, row.analysed_at)):
            summary.outcomes.append(Outcome(job.job_id, "skipped", _verdict(row), _verdict(row)))
        else:
            todo.append(job)
    done = len(summary.outcomes)
    total = len(jobs)
    if progress:
        progress(done, total, summary)
    by_id = {job.job_id: job for job in todo}
    try:
        for result in _results(todo, config, workers):
            job = by_id[result[0]]
            summary.outcomes.append(_store_result(result, job, stored.get(job.job_id), store, config, pack, drain, trusted))
            done += 1
            if progress:
                progress(done, total, summary)
    except KeyboardInterrupt:
        summary.interrupted = True
    summary.outcomes.sort(key=_job_order)
    return summary


def _results(todo: list[BatchJob], config, workers: int):
    """Each job's analysis as it finishes; in this process when one worker is asked for."""
    if workers <= 1 or len(todo) <= 1:
        for job in todo:
            yield analyse_one(job, config)
        return
    queue = list(reversed(todo))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        running = set()
        try:
            while queue or running:
                while queue and len(running) < 2 * workers:  # bounded: memory does not grow with the batch
                    running.add(pool.submit(analyse_one, queue.pop(), config))
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    yield future.result()
        except BaseException:
            for future in running:
                future.cancel()
            raise


def trusted_owners(config) -> set[int]:
    """Owners whose folders may replace anyone's stored job: root, SlurmUser, the batch's user."""
    from slurm_attrib.capture.common import spool_access

    return {0, os.geteuid(), spool_access(config.slurm_user, dict(os.environ))[0].uid}


def _ownership(job: BatchJob, old: Row | None, user: str | None, trusted: set[int]) -> tuple[int | None, str]:
    """(uid to store, "") or (None, why the folder may not write this job)."""
    try:
        folder_uid = os.stat(job.evidence).st_uid
    except OSError as exc:
        return None, f"{job.evidence}: {exc.strerror or exc}"
    if old is not None:
        if old.user and user and user != old.user:
            return None, f"stored for user {old.user}, {job.evidence} names user {user}: not replaced"
        if folder_uid not in trusted and folder_uid != old.uid:
            return None, f"stored for user {old.user or old.uid}, {job.evidence} belongs to uid {folder_uid}: not replaced"
        return old.uid if old.uid is not None else _uid(user), ""
    if folder_uid in trusted:
        return _uid(user), ""
    if user and _uid(user) != folder_uid:
        return None, f"{job.evidence} belongs to uid {folder_uid} but names user {user}: not stored"
    return folder_uid, ""


def _store_result(result: tuple, job: BatchJob, old: Row | None, store: Store, config, pack: str, drain: bool,
                  trusted: set[int]) -> Outcome:
    from slurm_attrib.drain import plan

    before = _verdict(old) if old else None
    if result[1] is None:
        return Outcome(job.job_id, "failed", before, None, result[2])
    job_id, diagnosis, text, user, state = result
    uid, refusal = _ownership(job, old, user, trusted)
    if refusal:
        return Outcome(job_id, "failed", before, None, refusal)
    if old is not None and {e["node"] for e in old.drains} == {d.node for d in diagnosis.drain} and not (
            drain and _batch_skipped(old.drains)):
        entries, note = old.drains, old.drain_note
    else:
        entries, note = plan(diagnosis, config)
        if not drain:
            note = note or (BATCH_NOTE if entries else "")
            entries = [{**e, "status": SKIPPED, "detail": e["detail"] or BATCH_NOTE} for e in entries]
    user = (old.user if old else None) or user or (_user_name(uid) if uid is not None else None)
    row = store.save(
        job_id, diagnosis, text, uid=uid, user=user,
        state=state or diagnosis.outcome.state, drains=entries, drain_note=note, rule_pack=pack, evidence=str(job.evidence),
    )
    return Outcome(job_id, "analysed", before, _verdict(row))


def _batch_skipped(entries: list[dict]) -> bool:
    """Entries an earlier batch without --drain recorded as skipped: `--drain` may recommend them now."""
    return any(e.get("status") == SKIPPED and e.get("detail") == BATCH_NOTE for e in entries)


def _verdict(row: Row) -> tuple:
    return (row.domain, row.category, row.quality, tuple(row.culprit_nodes))


def _uid(user: str | None) -> int | None:
    if not user:
        return None
    try:
        return pwd.getpwnam(user).pw_uid
    except KeyError:
        return None


def _user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def default_workers() -> int:
    return max(1, min(8, (os.cpu_count() or 1)))


# -- a Slurm job array ----------------------------------------------------------------------------


def write_job_list(jobs: list[BatchJob], path: Path) -> None:
    from slurm_attrib import atomic

    atomic.write_file(path, "".join(f"{job.job_id}\t{job.evidence}\n" for job in jobs).encode("utf-8"))


def read_job_list(path: Path) -> tuple[list[BatchJob], list[str]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SattribError(f"{path}: cannot read the job list: {getattr(exc, 'strerror', None) or exc}") from None
    jobs, problems = [], []
    for number, line in enumerate(text.splitlines(), 1):
        job_id, _, folder = line.partition("\t")
        if not line.strip():
            continue
        if not is_job_id(job_id) or not folder:
            problems.append(f"{path}:{number}: expected 'JOBID<TAB>FOLDER'")
            continue
        found, problem = _job_id_of(Path(folder))
        if found != job_id:
            problems.append(f"{path}:{number}: " + (problem or f"{folder} is job {found}, not {job_id}"))
            continue
        jobs.append(BatchJob(job_id, Path(folder)))
    return jobs, problems


ARRAY_SCRIPT = """#!/bin/bash
#SBATCH --job-name=sattrib-batch
#SBATCH --array=0-{last}
#SBATCH --output={folder}/task-%A_%a.out
#SBATCH --ntasks=1
#SBATCH --cpus-per-task={workers}
# Written by `sattrib batch --slurm-array`: each task re-analyses its share of {list}.
exec {command} --job-list {list} --shard "${{SLURM_ARRAY_TASK_ID}}/{tasks}" --workers {workers}{flags}
"""


def submit_array(jobs: list[BatchJob], config, tasks: int, workers: int, force: bool, drain: bool, sbatch_args=()) -> tuple[str, Path]:
    """Write the job list and an array script under <results>/batch/, submit it; (array job id, script)."""
    import shlex
    import subprocess
    import sys
    import time

    if not jobs:
        raise SattribError("no job to analyse: nothing submitted")
    folder = Path(config.results) / "batch" / time.strftime("%Y%m%dT%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)
    job_list = folder / "jobs.tsv"
    write_job_list(jobs, job_list)
    flags = (" --force" if force else "") + (" --drain" if drain else "")
    script = folder / "batch.sh"
    script.write_text(ARRAY_SCRIPT.format(
        last=tasks - 1, folder=shlex.quote(str(folder)), workers=workers, list=shlex.quote(str(job_list)),
        tasks=tasks, flags=flags, command=f"{shlex.quote(sys.executable)} -m slurm_attrib batch",
    ), encoding="utf-8")
    os.chmod(script, 0o755)
    argv = ["sbatch", "--parsable", *sbatch_args, str(script)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SattribError(f"sbatch: cannot submit {script}: {exc}") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["failed"]
        raise SattribError(f"sbatch: {lines[-1][:300]}")
    return proc.stdout.strip().split(";")[0], script
