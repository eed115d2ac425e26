#!/usr/bin/env python3
"""Record how Slurm jobs really end, on the local test cluster (contrib/testcluster), as case folders.

    sudo tests/data/termination/record.py [--only NAME,...] [--raw DIR]

Starts a private cluster (STATE_DIR /tmp/term-cluster unless TERM_STATE_DIR is set, own ports)
with our node Epilog (epilog/sattrib-epilog) and a Prolog that fails on demand, submits one job per
ending as the non-root test user from the cluster's jobs/ dir, makes it end that way, and writes:

  tests/data/termination/<case>/              what a site would give sattrib:
      slurm-<id>.out                          the job's output file, as Slurm left it
      job.json                                the job record as the worker writes it (scontrol, then sacct)
      <node>/slurmd.log                       that node's slurmd log lines about the job
  tests/data/termination/<case>-output-only/  the job's output file alone
  <raw>/<case>/                               sacct, scontrol show job, slurmctld lines, the epilog's
                                              spool folder and sattrib's diagnosis of it and of the case

An existing expected.yaml is kept (the diagnosis there is a person's judgement, not recorded);
<raw>/summary.txt lists every ending with its Slurm state and what sattrib says.  Job ids, times and
the recorded lines change on each recording: re-check each expected.yaml's `how_established`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "tests"))
from support import epilog_test_config  # noqa: E402
sys.path.insert(0, str(REPO))

from slurm_attrib.cli import render_json  # noqa: E402
from slurm_attrib.engine.pipeline import analyze_path  # noqa: E402
from slurm_attrib.hostlist import expand  # noqa: E402

STATE = Path(os.environ.get("TERM_STATE_DIR", "/tmp/term-cluster"))
WORK = Path(str(STATE) + "-work")  # our config, spool and hook wrappers
USER = "sattrib-user"
PORTS = {"SATTRIB_CTLD_PORT": "26817", "SATTRIB_DBD_PORT": "26819", "SATTRIB_DB_PORT": "26306",
         "SATTRIB_SLURMD_PORT_BASE": "26831"}
# Preemption: `low` jobs are requeued (`lowgrace` ones after a 5 s grace that starts with SIGTERM), `scav`
# jobs cancelled, when an `urgent` job needs their node.
EXTRA_CONF = """FirstJobId=1000
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=urgent Nodes=gpu01,gpu02,gpu03,gpu04 PriorityTier=10 PreemptMode=OFF
PartitionName=low Nodes=gpu01,gpu02,gpu03,gpu04 PriorityTier=1 PreemptMode=REQUEUE
PartitionName=lowgrace Nodes=gpu01,gpu02,gpu03,gpu04 PriorityTier=1 PreemptMode=REQUEUE GraceTime=5
PartitionName=scav Nodes=gpu01,gpu02,gpu03,gpu04 PriorityTier=1 PreemptMode=CANCEL"""
ENV = dict(os.environ, SLURM_CONF=str(STATE / "etc" / "slurm.conf"), LC_ALL="C")
SACCT_FIELDS = "JobID,State,ExitCode,DerivedExitCode,Reason,NodeList"

# ------------------------------------------------------------------ the jobs' own programs
TASK_OK = """srun bash -c 'echo "rank $SLURM_PROCID on $SLURMD_NODENAME: step 100/100, training finished"'"""
TASK_RANK_EXIT = """srun bash -c 'if [ "$SLURM_PROCID" = 1 ]; then echo "rank 1: ValueError: shard 7 is empty" >&2; exit 3; fi
sleep 4; echo "rank $SLURM_PROCID: step 100/100 done"'"""
TASK_RANK_SEGV = """srun bash -c 'echo "rank $SLURM_PROCID started"; if [ "$SLURM_PROCID" = 1 ]; then sleep 1; kill -SEGV $$; fi; sleep 4'"""
TASK_RANK_ABORT = """srun python3 -c 'import os, time
rank = int(os.environ["SLURM_PROCID"]); print(f"rank {rank} started", flush=True)
os.abort() if rank == 1 else time.sleep(4)'"""
TASK_SLEEP = """srun bash -c 'echo "rank $SLURM_PROCID started on $SLURMD_NODENAME"; sleep 300'"""
TASK_TRAP_USR1 = """srun bash -c 'trap "echo rank \\$SLURM_PROCID: got SIGUSR1, saving checkpoint" USR1
echo "rank $SLURM_PROCID started"; while :; do sleep 1; done'"""
TASK_KILL_ON_BAD_EXIT = """srun --kill-on-bad-exit=1 bash -c 'echo "rank $SLURM_PROCID started"
if [ "$SLURM_PROCID" = 1 ]; then sleep 2; echo "rank 1: RuntimeError: loss is NaN" >&2; exit 1; fi; sleep 120'"""
TASK_REQUEUE = """echo "run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID"
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then srun bash -c 'echo "rank $SLURM_PROCID: step 1/100"; sleep 300'
else srun bash -c 'echo "rank $SLURM_PROCID: resumed from checkpoint, step 100/100 done"'; fi"""

TWO = {"nodes": 2, "ntasks-per-node": 1, "nodelist": "gpu02,gpu03"}
# name: (sbatch options, script body, what is done to the running job, seconds to wait for the end)
ENDINGS: dict[str, tuple[dict, str, str, int]] = {
    "01-exit-0": (TWO, TASK_OK, "", 60),
    "02-batch-script-exit-1": ({"nodes": 1, "nodelist": "gpu02"},
                               'echo "loading /nonexistent/config.yaml"\necho "error: config file not found" >&2\nexit 1', "", 60),
    "03-one-rank-exit-3": (TWO, TASK_RANK_EXIT, "", 60),
    "04-one-rank-sigsegv": (TWO, TASK_RANK_SEGV, "", 60),
    "05-one-rank-abort": (TWO, TASK_RANK_ABORT, "", 60),
    "06-batch-script-sigsegv": ({"nodes": 1, "nodelist": "gpu02"}, 'echo "started"\nsleep 1\nkill -SEGV $$', "", 60),
    "07-scancel": (TWO, TASK_SLEEP, "scancel", 60),
    "08-scancel-signal-usr1": (TWO, TASK_SLEEP, "scancel --signal=USR1", 60),
    "09-scancel-signal-term": (TWO, TASK_SLEEP, "scancel --signal=TERM", 60),
    "10-kill-on-bad-exit": (TWO, TASK_KILL_ON_BAD_EXIT, "", 60),
    "11-time-limit": ({"nodes": 1, "nodelist": "gpu01", "time": "1"}, TASK_SLEEP, "", 200),
    "12-time-limit-usr1-grace": ({"nodes": 1, "nodelist": "gpu01", "time": "1", "signal": "USR1@30"},
                                 TASK_TRAP_USR1, "", 200),
    "13-requeue-first-run": (dict(TWO, requeue=True), TASK_REQUEUE, "scontrol requeue", 60),
    # 14-requeue-second-run is recorded from the same job, once it has run again
    "15-preempt-requeue": ({"nodes": 1, "nodelist": "gpu04", "partition": "low", "exclusive": True, "requeue": True},
                           TASK_SLEEP, "preempt", 30),
    "16-preempt-cancel": ({"nodes": 1, "nodelist": "gpu04", "partition": "scav", "exclusive": True},
                          TASK_SLEEP, "preempt", 90),
    "19-preempt-requeue-grace": ({"nodes": 1, "nodelist": "gpu04", "partition": "lowgrace", "exclusive": True,
                                  "requeue": True}, TASK_SLEEP, "preempt", 30),
    "17-node-failure": ({"nodes": 2, "ntasks-per-node": 1, "nodelist": "gpu03,gpu04"}, TASK_SLEEP, "kill slurmd gpu04", 120),
    "18-prolog-failure": ({"nodes": 1, "nodelist": "gpu04"}, TASK_OK.replace("srun ", "srun -n1 "), "prolog fails", 60),
}
SLOW = ("11-time-limit", "12-time-limit-usr1-grace")


# ------------------------------------------------------------------ cluster plumbing
def run(*argv: str, user: str | None = None, check: bool = True, timeout: float = 60) -> str:
    cmd = ["runuser", "-u", user, "--", *argv] if user else list(argv)
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout, cwd=STATE / "jobs")
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout + proc.stderr if not check else proc.stdout


def write_hooks() -> None:
    shutil.rmtree(WORK, ignore_errors=True)
    for sub in ("spool", "local", "bin"):
        (WORK / sub).mkdir(parents=True)
    WORK.chmod(0o755)
    for sub in ("spool", "local", "bin"):
        (WORK / sub).chmod(0o755)
    config = epilog_test_config(WORK)
    (WORK / "config.yaml").write_text(json.dumps(config, indent=1))  # JSON is YAML
    head = f"#!/bin/sh\nSATTRIB_CONFIG={WORK / 'config.yaml'}; SATTRIB_PYTHON={sys.executable}\nexport SATTRIB_CONFIG SATTRIB_PYTHON\n"
    hooks = {
        "epilog": head + f"exec {REPO / 'epilog' / 'sattrib-epilog'}\n",
        # the Prolog fails while the marker file exists (one job of the matrix)
        "prolog": head + f"if [ -e {WORK / 'fail-prolog'} ]; then echo 'prolog: simulated failure' >&2; exit 1; fi\n"
                         f"exec {REPO / 'epilog' / 'sattrib-prolog'}\n",
    }
    for name, text in hooks.items():
        (WORK / "bin" / name).write_text(text)
        (WORK / "bin" / name).chmod(0o755)


def start_cluster() -> None:
    write_hooks()
    env = dict(os.environ, **PORTS, SATTRIB_EPILOG=str(WORK / "bin" / "epilog"), SATTRIB_PROLOG=str(WORK / "bin" / "prolog"),
               SATTRIB_NODE_CPUS="4", SATTRIB_SLURMD_TIMEOUT="10", SATTRIB_EXTRA_SLURM_CONF=EXTRA_CONF)
    env.pop("SLURM_CONF", None)
    subprocess.run([str(REPO / "contrib" / "testcluster" / "start.sh"), str(STATE)], env=env, check=True, timeout=300)


def sbatch(opts: dict, body: str, name: str) -> int:
    script = STATE / "jobs" / f"{name}.sh"
    script.write_text("#!/bin/bash\n" + body + "\n")
    script.chmod(0o755)
    args = ["sbatch", "--parsable", f"--job-name={name}"]
    for key, val in opts.items():
        args.append(f"--{key}" if val is True else f"--{key}={val}")
    return int(run(*args, str(script), user=USER).strip().split(";")[0])


def sacct(job: int, *extra: str) -> str:
    return run("sacct", "-j", str(job), "-o", SACCT_FIELDS, "-P", *extra, check=False).strip()


def state(job: int) -> str:
    """The job's state as the controller has it (sacct lags)."""
    out = run("scontrol", "show", "job", "-o", str(job), check=False)
    m = re.search(r"JobState=(\S+)", out)
    return m.group(1) if m else ""


def wait(job: int, done, timeout: float) -> str:
    end = time.monotonic() + timeout
    while True:
        s = state(job)
        if done(s) or time.monotonic() > end:
            return s
        time.sleep(0.3)


ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "SIGNALING", "STAGE_OUT",
          "RESIZING", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "RESV_DEL_HOLD"}


def wait_running(job: int) -> None:
    wait(job, lambda s: s == "RUNNING", 30)
    time.sleep(3)  # the tasks have started and printed


def node_pid(node: str) -> int:
    return int((STATE / "run" / f"slurmd-{node}.pid").read_text().strip())


# ------------------------------------------------------------------ the endings' actions
def act(action: str, job: int, opts: dict) -> dict:
    """Do `action` to the running job; returns facts worth keeping (e.g. the preemptor's id)."""
    if not action:
        return {}
    if action.startswith("scancel"):
        wait_running(job)
        run(*action.split(), str(job), user=USER)
        return {"command": f"{action} {job}"}
    if action == "scontrol requeue":
        wait_running(job)
        run("scontrol", "requeue", str(job), user=USER)
        return {"command": f"scontrol requeue {job}"}
    if action == "preempt":
        wait_running(job)
        urgent = sbatch({"nodes": 1, "nodelist": opts["nodelist"], "partition": "urgent", "exclusive": True},
                        'echo "urgent job ran"', f"urgent-for-{job}")
        return {"command": f"sbatch -p urgent --exclusive -w {opts['nodelist']} (job {urgent})", "preemptor": urgent}
    if action == "kill slurmd gpu04":
        wait_running(job)
        os.kill(node_pid("gpu04"), 9)
        return {"command": f"kill -9 <slurmd -N gpu04 pid> while job {job} ran"}
    if action == "prolog fails":
        return {"command": "Prolog exits 1"}
    raise ValueError(action)


def restore_nodes() -> None:
    """Every slurmd alive, every node back in service, no prolog failure armed."""
    (WORK / "fail-prolog").unlink(missing_ok=True)
    for node in ("gpu01", "gpu02", "gpu03", "gpu04"):
        try:
            os.kill(node_pid(node), 0)
        except (OSError, ValueError):
            subprocess.run(["setsid", "slurmd", "-N", node], env=ENV, check=True, timeout=30,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for line in run("sinfo", "-h", "-N", "-o", "%N %t").splitlines():
        node, st = line.split()
        if st.startswith(("drain", "down", "drng")):
            run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)


# ------------------------------------------------------------------ what is kept
def job_lines(path: Path, job: int) -> list[str]:
    """A daemon log's lines about `job` (its steps too)."""
    pat = re.compile(rf"(JobId={job}\b|StepId={job}\.|\[{job}[.\]]|[Jj]ob[ _]?(?:id )?{job}\b|JOB {job}\b|job_id[= ]{job}\b)")
    try:
        return [ln for ln in path.read_text(errors="replace").splitlines() if pat.search(ln)]
    except OSError:
        return []


def job_record(job: int) -> dict | None:
    """job.json as the worker writes it (slurm_attrib.worker._write_job_json)."""
    os.environ["SLURM_CONF"] = ENV["SLURM_CONF"]
    from slurm_attrib.slurm.cli import CliBackend

    info = CliBackend().job_info(str(job))
    return info.record() if info else None


def wait_bundles(job: int, nodes: list[str], timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    folder = WORK / "spool" / str(job) / "nodes"
    while time.monotonic() < end and not all((folder / f"{n}.json.gz").exists() for n in nodes):
        time.sleep(0.3)


def diagnosis_line(path: Path) -> str:
    try:
        d = json.loads(render_json(analyze_path(path)))
    except Exception as exc:  # noqa: BLE001 - the recording goes on
        return f"error {type(exc).__name__}: {exc}"
    return (f"{d['domain']}/{d['category']} {d['quality']} culprits={d['culprit_nodes']} "
            f"drain={[x['node'] for x in d['drain']]} state={d.get('outcome', {}).get('state')} | {d['summary']}")


def keep(case: str, job: int, raw_root: Path, facts: dict, output_text: str | None = None) -> str:
    """Write the case folders and the raw captures of `job`; returns the summary line."""
    raw = raw_root / case
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)
    acct = sacct(job, "-D")
    show = run("scontrol", "show", "job", str(job), check=False)
    (raw / "sacct.txt").write_text(f"$ sacct -j {job} -o {SACCT_FIELDS} -P -D\n{acct}\n")
    (raw / "scontrol.txt").write_text(show)
    (raw / "slurmctld.log").write_text("\n".join(job_lines(STATE / "log" / "slurmctld.log", job)) + "\n")
    (raw / "facts.json").write_text(json.dumps(facts, indent=1) + "\n")
    m = re.search(r"NodeList=(\S+)", show)
    nodes = list(expand(m.group(1))) if m and m.group(1) not in ("(null)", "None") else []
    wait_bundles(job, nodes)
    record = job_record(job)
    out_file = STATE / "jobs" / f"slurm-{job}.out"
    text = output_text if output_text is not None else (out_file.read_text(errors="replace") if out_file.exists() else None)

    for folder, full in ((HERE / case, True), (HERE / f"{case}-output-only", False)):
        if not full and text is None:
            continue  # no output file: nothing to give without the job record
        expected = folder / "expected.yaml"
        kept = expected.read_text() if expected.exists() else None
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        if kept is not None:
            expected.write_text(kept)
        if text is not None:
            (folder / f"slurm-{job}.out").write_text(text)
        if full:
            if record:
                (folder / "job.json").write_text(json.dumps(record, indent=1) + "\n")
            for node in nodes:
                lines = job_lines(STATE / "log" / f"slurmd-{node}.log", job)
                if lines:
                    (folder / node).mkdir()
                    (folder / node / "slurmd.log").write_text("\n".join(lines) + "\n")
    spool = WORK / "spool" / str(job)
    if spool.is_dir() and record:
        (spool / "job.json").write_text(json.dumps(record, indent=1) + "\n")
        shutil.copytree(spool, raw / "spool")
    lines = [f"{case}: job {job} {' '.join(acct.splitlines()[1:2])}",
             f"  case:        {diagnosis_line(HERE / case)}"]
    if (HERE / f"{case}-output-only").is_dir():
        lines.append(f"  output-only: {diagnosis_line(HERE / f'{case}-output-only')}")
    if (raw / "spool").is_dir():
        lines.append(f"  epilog spool: {diagnosis_line(raw / 'spool')}")
    (raw / "diagnosis.txt").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


# ------------------------------------------------------------------ one ending
def record(case: str, raw_root: Path, job: int | None = None) -> str:
    opts, body, action, timeout = ENDINGS[case]
    if action == "prolog fails":
        (WORK / "fail-prolog").touch()
    job = job or sbatch(opts, body, case)
    facts = {"job": job, "sbatch": opts, "script": body, **act(action, job, opts)}
    if action == "prolog fails":
        # Slurm requeues (held) a batch job whose Prolog failed; it never ends by itself.
        wait(job, lambda s: s not in ("PENDING", "CONFIGURING") or "held" in run("squeue", "-h", "-j", str(job), "-o", "%r",
                                                                                  check=False).lower(), 20)
        time.sleep(2)
        facts["squeue_reason"] = run("squeue", "-h", "-j", str(job), "-o", "%T %r", check=False).strip()
        (WORK / "fail-prolog").unlink(missing_ok=True)
        if state(job) in ACTIVE:
            run("scancel", str(job), check=False)
            facts["then"] = f"scancel {job} (held after the prolog failure)"
    if case == "13-requeue-first-run":
        wait(job, lambda s: s not in ("RUNNING", "COMPLETING"), 30)
        out_file = STATE / "jobs" / f"slurm-{job}.out"
        first = out_file.read_text(errors="replace") if out_file.exists() else None
        facts["state_after_requeue"] = state(job)
        summary = keep(case, job, raw_root, facts, first)
        wait(job, lambda s: s not in ACTIVE, 240)
        facts["second_run"] = True
        return summary + "\n" + keep("14-requeue-second-run", job, raw_root, facts)
    final = wait(job, lambda s: s not in ACTIVE, timeout)
    facts["final_state"] = final
    if "preemptor" in facts:
        wait(facts["preemptor"], lambda s: s not in ACTIVE, 30)
        if final in ACTIVE:  # requeued after preemption: record its first run's end, then let it go
            facts["then"] = f"scancel {job} (requeued after preemption, state {final})"
            summary = keep(case, job, raw_root, facts)
            run("scancel", str(job), check=False)
            return summary
    return keep(case, job, raw_root, facts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--raw", default=str(STATE) + "-raw", help="where the raw captures go")
    ap.add_argument("--no-start", action="store_true", help="use the cluster already running in STATE_DIR")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (starts the test cluster, kills a slurmd)")
    cases = [c for c in ENDINGS if not args.only or c in args.only.split(",")]
    raw_root = Path(args.raw)
    raw_root.mkdir(parents=True, exist_ok=True)
    if not args.no_start:
        start_cluster()
    version = run("sinfo", "--version").strip()
    summaries = [f"recorded {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} on {version}"]
    slow = {c: sbatch(ENDINGS[c][0], ENDINGS[c][1], c) for c in cases if c in SLOW}  # run meanwhile
    for case in cases:
        if case in SLOW:
            continue
        print(f"--- {case}", flush=True)
        try:
            summaries.append(record(case, raw_root))
        except Exception as exc:  # noqa: BLE001 - one broken ending does not stop the others
            summaries.append(f"{case}: FAILED TO RECORD: {type(exc).__name__}: {exc}")
        finally:
            restore_nodes()
        print(summaries[-1], flush=True)
    for case, job in slow.items():
        print(f"--- {case}", flush=True)
        summaries.append(record(case, raw_root, job))
        print(summaries[-1], flush=True)
    (raw_root / "summary.txt").write_text("\n".join(summaries) + "\n")
    print(f"raw captures and summary.txt in {raw_root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
