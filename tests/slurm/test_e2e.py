"""End to end on the real local Slurm cluster: Prolog/Epilog capture on gpu01..gpu04,
EpilogSlurmctld analysis, results store, drain policy `auto`, `sattrib show` as users.

Faults are injected per node and per job through the kernel capture source, which reads
<tmp>/kern/kernel-%N-%j.log instead of dmesg (a test writes a node's kernel lines there while
the job runs).  Slurm scrubs the environment of Prolog/Epilog/EpilogSlurmctld, so each script
is a two-line wrapper (in <tmp>/bin) that exports SATTRIB_CONFIG and SATTRIB_PYTHON and execs the
repository's script.  SlurmUser is root here so that the analysis (EpilogSlurmctld) can hand
each diagnosis to the job's owner (chown); the time-limit job runs in the background from the
start of the module (Slurm's time limits have minute granularity).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 10  # analysis_deadline (s)
LATE_WAIT = 40  # late_bundle_wait (s): a node's bundle after the deadline is analysed again
_STATE: dict = {}


def _workdir() -> Path:
    if "dir" not in _STATE:
        d = Path(tempfile.mkdtemp(prefix="sattrib-e2e-", dir="/tmp"))
        d.chmod(0o755)
        for sub in ("spool", "local", "results", "kern", "bin"):
            (d / sub).mkdir()
            (d / sub).chmod(0o755)
        config = {
            "spool": str(d / "spool"),
            "local_spool": str(d / "local"),
            "results": str(d / "results"),
            "analysis_deadline": DEADLINE,
            "late_bundle_wait": LATE_WAIT,
            "drain_policy": "auto",
            "epilog_timeout": 8,
            "sources": [
                {"name": "kernel", "kind": "kernel", "path": str(d / "kern" / "kernel-%N-%j.log")},
                {"name": "syslog", "kind": "syslog", "enabled": False},
                {"name": "nvidia_smi", "kind": "nvidia_smi", "enabled": False},
                {"name": "flight_recorder", "kind": "app", "enabled": False},
            ],
        }
        (d / "config.yaml").write_text(json.dumps(config, indent=1))  # JSON is YAML
        for name in ("sattrib-prolog", "sattrib-epilog", "sattrib-epilog-ctld"):
            w = d / "bin" / name
            w.write_text(
                "#!/bin/sh\n"
                f"SATTRIB_CONFIG={d / 'config.yaml'}; SATTRIB_PYTHON={sys.executable}\n"
                "export SATTRIB_CONFIG SATTRIB_PYTHON\n"
                # EpilogSlurmctld gets no SLURM_CONF: the module writes it here once the cluster runs
                f"[ -r {d / 'slurm-env'} ] && . {d / 'slurm-env'}\n"
                f"exec {REPO / 'epilog' / name} \"$@\"\n"
            )
            w.chmod(0o755)
        _STATE["dir"] = d
    return _STATE["dir"]


@pytest.fixture(scope="module")
def slurm_cluster_config():
    d = _workdir()
    return {
        "prolog": d / "bin" / "sattrib-prolog",
        "epilog": d / "bin" / "sattrib-epilog",
        "epilog_ctld": d / "bin" / "sattrib-epilog-ctld",
        "extra_env": {"SATTRIB_SLURM_USER": "root", "SATTRIB_NODE_CPUS": "2", "SATTRIB_SLURMD_TIMEOUT": "10"},
    }


@pytest.fixture(scope="module")
def e2e(slurm_cluster):
    d = _workdir()
    env = dict(slurm_cluster.env, SATTRIB_CONFIG=str(d / "config.yaml"), PYTHONPATH=str(REPO))
    (d / "slurm-env").write_text(f"SLURM_CONF={slurm_cluster.conf}\nexport SLURM_CONF\n")
    rank = slurm_cluster.jobs_dir / "rank.sh"
    rank.write_text(RANK_SCRIPT)
    rank.chmod(0o755)
    ctx = E2E(slurm_cluster, d, env, rank)
    # Time-limit job: one CPU of gpu01, 1 minute; checked by the last test.
    ctx.timeout_job = slurm_cluster.sbatch("sleep 300\n", nodes=1, nodelist="gpu01", time="1", job_name="e2e-timelimit")
    ctx.t0 = time.monotonic()
    yield ctx
    shutil.rmtree(d, ignore_errors=True) if not os.environ.get("SATTRIB_KEEP_TESTCLUSTER") else None


RANK_SCRIPT = r"""#!/bin/bash
# One task per node.  MODE: ok | pyexc | xid | forged | sleep
R=$SLURM_PROCID; N=$SLURMD_NODENAME
stamp() { date -u +"%m%d %H:%M:%S.%6N"; }
echo "$N:$$:$$ [0] NCCL INFO comm 0x7a7f rank $R nranks $SLURM_NTASKS cudaDev 0 nvmlDev 0 busId 3b000 commId 0x2801 - Init COMPLETE"
case "$MODE" in
ok)
    echo "rank $R: step 100/100 done"; exit 0 ;;
pyexc)
    if [ "$R" = 1 ]; then
        echo "Traceback (most recent call last):"
        echo '  File "/home/user/train.py", line 42, in <module>'
        echo "    main()"
        echo '  File "/home/user/train.py", line 30, in main'
        echo "    loss = compute(batch)"
        echo "ZeroDivisionError: division by zero"
        # srun forwards a task's output asynchronously: on a loaded machine, a task that exits at
        # once can be reported (and the step killed) before its output reaches the job's file,
        # which then holds no traceback at all (seen in CI).  Give the forwarding a moment.
        sleep 2
        exit 1
    fi
    sleep 30; exit 0 ;;
xid)
    sleep 6
    if [ "$N" = gpu03 ]; then sleep 20; exit 0; fi
    echo "[rank$R]:[E$(stamp) ProcessGroupNCCL.cpp:632] [Rank $R] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88624, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600030 milliseconds before timing out."
    echo "[rank$R]:[E$(stamp) ProcessGroupNCCL.cpp:1664] [PG ID 0 PG GUID 0(default_pg) Rank $R] Process group watchdog thread terminated with exception: [Rank $R] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88624, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600030 milliseconds before timing out."
    exit 134 ;;
forged)
    if [ "$N" = gpu03 ]; then
        echo "$(date -u +%Y-%m-%dT%H:%M:%S,%6N+00:00) NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
        echo "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
        exit 1
    fi
    sleep 1; exit 0 ;;
sleep)
    sleep 120 ;;
esac
"""


class E2E:
    def __init__(self, cluster, d: Path, env: dict, rank: Path):
        self.cluster, self.dir, self.env, self.rank = cluster, d, env, rank
        self.results = d / "results"
        self.timings: dict[str, float] = {}
        self.timeout_job = 0
        self.t0 = 0.0

    def submit(self, mode: str, user: str | None = None, **opts) -> int:
        script = f"export MODE={mode}\nsleep 1\nsrun --kill-on-bad-exit=1 {self.rank}\n"
        opts = {"nodes": 4, "ntasks_per_node": 1, "cpus_per_task": 1, "job_name": f"e2e-{mode}", **opts}
        return self.cluster.sbatch(script, user=user, **opts)

    def wait_running(self, job: int, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = self.cluster.run("squeue", "-h", "-j", str(job), "-o", "%T", check=False).stdout.strip()
            if out == "RUNNING":
                return
            time.sleep(0.3)
        raise TimeoutError(f"job {job} not RUNNING after {timeout}s")

    def diagnosis(self, job: int, every_node: bool = True, timeout: float = DEADLINE + 40) -> dict:
        """The job's diagnosis; with `every_node`, the one made once every node's bundle is in
        (the worker analyses again when a bundle comes after the deadline), else the first."""
        path = self.results / str(job) / "diagnosis.json"
        end = time.monotonic() + timeout + (LATE_WAIT if every_node else 0)
        d = None
        while time.monotonic() < end:
            if path.is_file() and self.indexed(job):
                d = json.loads(path.read_text())
                if not every_node or not _late_nodes(d):
                    return d
            time.sleep(0.3)
        log = self.results / "worker.log"
        raise AssertionError(
            f"no diagnosis for job {job} {'with every node' if d else ''} after {timeout}s: "
            + (why(d) if d else "") + "; worker log:\n" + (log.read_text()[-3000:] if log.exists() else "(none)")
        )

    def indexed(self, job: int) -> bool:
        from slurm_attrib.store import Store

        return Store(self.results).get(str(job)) is not None

    def kernel(self, node: str, job: int, lines: list[str]) -> None:
        path = self.dir / "kern" / f"kernel-{node}-{job}.log"
        now = datetime.now(timezone.utc)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")
        path.write_text("".join(f"{stamp} {line}\n" for line in lines))

    def sattrib(self, *args: str, user: str | None = None, python: str | None = None):
        cmd = [python or sys.executable, "-m", "slurm_attrib", *args]
        if user:
            cmd = ["runuser", "-u", user, "--", "env", *(f"{k}={v}" for k, v in self.env.items()
                                                       if k in ("SATTRIB_CONFIG", "PYTHONPATH", "SLURM_CONF", "PATH")), *cmd]
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=60, cwd="/tmp")

    def reasons(self) -> dict[str, str]:
        out = self.cluster.run("sinfo", "-h", "-R", "-N", "-o", "%N|%E").stdout
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)

    def restore(self) -> None:
        """Every node up and not drained by us (slurmd restarted when dead)."""
        for node in self.cluster.nodes:
            pid = self.cluster.slurmd_pid(node)
            alive = bool(pid) and Path(f"/proc/{pid}").exists()
            if not alive:
                self.cluster.start_slurmd(node)
        for node, reason in self.reasons().items():
            if reason.startswith("sattrib:"):
                self.cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME")
        end = time.monotonic() + 40
        while time.monotonic() < end:
            out = self.cluster.run("sinfo", "-h", "-N", "-o", "%N %t").stdout
            states = dict(line.split() for line in out.splitlines())
            if all(s in ("idle", "mix", "alloc") for s in states.values()):
                return
            time.sleep(0.5)
        raise AssertionError(f"nodes not back: {states}")


def _late_nodes(d: dict) -> list[str]:
    return [c["node"] for c in d["coverage"] if c["status"] == "missing" and c["source"].endswith(".json.gz")]


def why(d: dict) -> str:
    """A failed assertion's story: the verdict, every source that was not read in full, what was
    kept of the job's output (a rare CI failure found no traceback there), the evidence lines."""
    gaps = [f"{c['node']}:{c['source'].rsplit('/', 1)[-1]}={c['status']} ({c['detail']})"
            for c in d["coverage"] if (c["status"] not in ("ok",) or c["source"].endswith("job_stdout"))
            and not c["source"].endswith(("kernel", "ib_counters", "nccl_debug"))]
    lines = [f"{e['role']} {e['source']}:{e['line']} {e['text'][:100]}" for e in d["evidence"][:8]]
    return (f"{d['domain']}/{d['category']} culprits={d['culprit_nodes']}: {d['summary']} | coverage gaps: {'; '.join(gaps)}"
            f" | evidence: {' / '.join(lines) or 'none'}")


@pytest.fixture(autouse=True)
def _restore(request, e2e):
    t = time.monotonic()
    yield
    e2e.timings[request.node.name] = time.monotonic() - t
    e2e.restore()


def _user_python(e2e) -> str:
    for py in (sys.executable, "/usr/bin/python3"):
        r = subprocess.run(["runuser", "-u", e2e.cluster.test_user, "--", py, "-c", "import click, yaml"],
                           capture_output=True, timeout=30)
        if r.returncode == 0:
            return py
    pytest.skip("no Python with click and PyYAML executable by the test user (apt-get install python3-click)")


# ------------------------------------------------------------------------------------------------


def test_1_success(e2e):
    job = e2e.submit("ok")
    assert e2e.cluster.wait_job(job) == "COMPLETED"
    d = e2e.diagnosis(job)
    assert d["domain"] == "none" and d["category"] == "success", d["summary"]
    assert d["drain"] == []
    assert d["outcome"]["state"] == "COMPLETED"
    assert sorted(d["outcome"]["nodes"]) == list(e2e.cluster.nodes)
    assert not [c for c in d["coverage"] if c["status"] == "missing" and c["source"].endswith(".json.gz")]
    # Stored for the owner (root here), readable through `show`
    r = e2e.sattrib("show", str(job))
    assert r.returncode == 0 and f"Job {job}" in r.stdout, r.stderr


def test_2_python_exception_on_one_rank(e2e):
    job = e2e.submit("pyexc")
    assert e2e.cluster.wait_job(job) == "FAILED"
    d = e2e.diagnosis(job)
    assert d["domain"] == "application", why(d)
    assert d["culprit_nodes"] == ["gpu02"], why(d)  # rank 1's node, which srun reports failing after the traceback
    assert d["drain"] == []
    assert not any(r.startswith("sattrib:") for r in e2e.reasons().values())


def test_3_xid79_on_gpu03_drains_gpu03_only(e2e):
    job = e2e.submit("xid")
    e2e.wait_running(job)
    time.sleep(2)
    e2e.kernel("gpu03", job, [
        "NVRM: GPU at PCI:0000:3b:00: GPU-5b0c2f4e-8d3a-4c1e-9f7b-2a6d8e1c4b90",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    ])
    e2e.cluster.wait_job(job)
    d = e2e.diagnosis(job)
    assert d["culprit_nodes"] == ["gpu03"], (d["domain"], d["category"], why(d))
    assert d["domain"] == "gpu" and d["quality"] == "confirmed", d["summary"]
    assert [x["node"] for x in d["drain"]] == ["gpu03"]
    reasons = e2e.reasons()
    ours = {n: r for n, r in reasons.items() if r.startswith("sattrib:")}
    assert list(ours) == ["gpu03"], reasons
    assert "79" in ours["gpu03"][:20], ours  # the essential within sinfo -R's 20 characters
    assert len(ours["gpu03"].encode()) <= 255
    # index: applied
    r = e2e.sattrib("drain", "--recommend")
    assert r.returncode == 0 and "gpu03" not in r.stdout, r.stdout
    # undrain: ours only
    r = e2e.sattrib("undrain", "gpu03")
    assert r.returncode == 0, r.stderr
    assert "gpu03" not in e2e.reasons()


def test_4_node_failure_named_after_deadline(e2e):
    job = e2e.submit("sleep")
    e2e.wait_running(job)
    time.sleep(2)
    e2e.cluster.kill_slurmd("gpu04")
    t = time.monotonic()
    assert e2e.cluster.wait_job(job, timeout=90) == "NODE_FAIL"
    d = e2e.diagnosis(job, every_node=False)
    e2e.timings["node_fail_detect_to_diagnosis"] = time.monotonic() - t
    assert d["outcome"]["state"] == "NODE_FAIL"
    assert d["category"] == "node_failure", d["summary"]
    assert d["culprit_nodes"] == ["gpu04"], d["summary"]
    missing = [c for c in d["coverage"] if c["status"] == "missing" and c["node"] == "gpu04"]
    assert missing, d["coverage"]
    # Slurm's own reason (Not responding) is kept, never overwritten
    reasons = e2e.reasons()
    assert not reasons.get("gpu04", "").startswith("sattrib:"), reasons
    for node in ("gpu01", "gpu02", "gpu03"):
        assert not reasons.get(node, "").startswith("sattrib:"), reasons


def test_6_scancel(e2e):
    job = e2e.submit("sleep")
    e2e.wait_running(job)
    time.sleep(2)
    e2e.cluster.run("scancel", str(job))
    assert e2e.cluster.wait_job(job) == "CANCELLED"
    d = e2e.diagnosis(job)
    assert (d["domain"], d["category"]) == ("scheduler", "cancelled"), d["summary"]
    assert d["drain"] == []


def test_7_forged_xid_in_job_output_drains_nothing(e2e):
    job = e2e.submit("forged")
    assert e2e.cluster.wait_job(job) == "FAILED"
    d = e2e.diagnosis(job)
    assert d["drain"] == [], d["drain"]
    assert not (d["domain"] == "gpu" and d["quality"] == "confirmed"), d["summary"]
    assert not any(r.startswith("sattrib:") for r in e2e.reasons().values())


def test_8_show_as_owner_and_as_other_user(e2e):
    py = _user_python(e2e)
    user = e2e.cluster.test_user
    job = e2e.submit("ok", user=user)
    assert e2e.cluster.wait_job(job) == "COMPLETED"
    e2e.diagnosis(job)
    st = (e2e.results / str(job) / "diagnosis.json").stat()
    worker_log = [ln for ln in (e2e.results / "worker.log").read_text().splitlines() if f"job {job}:" in ln]
    assert st.st_mode & 0o777 == 0o640 and st.st_uid == int(subprocess.check_output(["id", "-u", user])), worker_log
    r = e2e.sattrib("show", str(job), user=user, python=py)
    assert r.returncode == 0 and f"Job {job}" in r.stdout, r.stderr
    r = e2e.sattrib("show", str(job), "--json", user=user, python=py)
    assert r.returncode == 0 and json.loads(r.stdout)["outcome"]["job_id"] == str(job)
    # someone else's job (root's, from an earlier test) is refused
    others = [p.name for p in e2e.results.iterdir() if p.name.isdigit() and int(p.name) != job]
    assert others
    r = e2e.sattrib("show", others[0], user=user, python=py)
    assert r.returncode == 3 and "not your job" in r.stderr, (r.returncode, r.stderr)
    # unknown and running jobs: one clear line each
    r = e2e.sattrib("show", "999999", user=user, python=py)
    assert r.returncode == 4 and "unknown" in r.stderr, r.stderr
    running = e2e.submit("sleep", user=user, nodes=1)
    e2e.wait_running(running)
    r = e2e.sattrib("show", str(running), user=user, python=py)
    assert r.returncode == 5 and "still running" in r.stderr, r.stderr
    e2e.cluster.run("scancel", str(running))
    e2e.cluster.wait_job(running)


def test_5_time_limit(e2e):
    job = e2e.timeout_job
    assert e2e.cluster.wait_job(job, timeout=150) == "TIMEOUT"
    d = e2e.diagnosis(job)
    assert (d["domain"], d["category"]) == ("scheduler", "time_limit"), d["summary"]
    assert d["drain"] == []


def test_9_report_and_timings(e2e):
    r = e2e.sattrib("report", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["jobs"] >= 7
    assert "gpu/" + "xid_79" in data["by_category"] or any(k.startswith("gpu/") for k in data["by_category"])
    print("\nE2E timings (s):", json.dumps({k: round(v, 1) for k, v in e2e.timings.items()}),
          f"module {time.monotonic() - e2e.t0:.0f} s")
