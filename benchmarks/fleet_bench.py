#!/usr/bin/env python3
"""slurm-attrib fleet benchmarks: batch re-analysis throughput, and the fleet report over many
stored diagnoses on SQLite and PostgreSQL.

    python benchmarks/fleet_bench.py [--jobs 48] [--rows 100000] [--workers 1,2] [--skip-postgres] [--check]

(a) Batch: simulates --jobs 8-node jobs (8 ranks per node, scenarios in turn) and re-analyses them
    with `sattrib batch` logic (`fleet.batch.run_batch`) once per worker count, into a fresh store,
    after one warm-up analysis (the rule pack compiled, as in any run after the first job).
    Baseline: the one-worker run of the same invocation; printed: jobs per second, jobs per second
    per worker, and the speed-up against one worker (linear = the worker count, up to the cores).
(b) Report: generates --rows diagnoses (rows as `sattrib batch` stores them: culprits, GPUs with
    Xids, links, drains) over 30 days of 2,000 nodes, writes them with `Store.put_many`, then times
    building the whole fleet report as `sattrib report --since 30d` does (`fleet.report.fleet_report`
    + text rendering), on SQLite and on a throw-away PostgreSQL (contrib/testpg).  Baseline: reading
    every row back (`Store.rows()`), same run.  Also the
    index's size per diagnosis (SQLite file bytes / rows; PostgreSQL pg_total_relation_size / rows).

Targets: (a) throughput grows linearly with workers (speed-up >= 0.8 x workers, up to the core
count); (b) the report over 100,000 diagnoses in <= 2 s on each backend.
Generated data goes under benchmarks/_work/fleet (gitignored).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / "_work" / "fleet"
sys.path.insert(0, str(REPO))

TARGET_REPORT_SECONDS = 2.0
TARGET_SPEEDUP_SHARE = 0.8
SCENARIOS = ("gpu_fell_off_bus", "link_down", "app_exception", "host_oom", "success", "nccl_usage", "gpu_oom", "pcie_error")


# --------------------------------------------------------------------------------------------
# (a) batch throughput


def simulated_spool(count: int) -> Path:
    import json

    from slurm_attrib.simulate import write_scenario

    spool = WORK / f"spool-{count}"
    if (spool / ".complete").exists():
        return spool
    shutil.rmtree(spool, ignore_errors=True)
    for n in range(count):
        job_id = str(700000 + n)
        write_scenario(SCENARIOS[n % len(SCENARIOS)], spool / job_id, nodes=8, ranks_per_node=8, seed=n)
        job_file = spool / job_id / "job.json"
        job_file.write_text(json.dumps({**json.loads(job_file.read_text()), "job_id": job_id}))
    (spool / ".complete").touch()
    return spool


def bench_batch(jobs: int, worker_counts: list[int]) -> list[dict]:
    from slurm_attrib.config import Config
    from slurm_attrib.fleet.batch import find_jobs, run_batch
    from slurm_attrib.store import Store

    from slurm_attrib.engine.pipeline import analyze_path

    spool = simulated_spool(jobs)
    found, _ = find_jobs([spool])
    analyze_path(found[0].evidence)  # warm: the rule pack compiled once, inherited by forked workers
    results = []
    for workers in worker_counts:
        results_dir = Path(tempfile.mkdtemp(prefix="fleet-bench-", dir=WORK))
        config = Config(results=str(results_dir), spool=str(spool))
        started = time.perf_counter()
        summary = run_batch(found, Store(results_dir), config, workers=workers)
        seconds = time.perf_counter() - started
        assert summary.count("analysed") == len(found), summary.outcomes
        results.append({"workers": workers, "seconds": seconds, "jobs_per_s": len(found) / seconds})
        shutil.rmtree(results_dir, ignore_errors=True)
    return results


# --------------------------------------------------------------------------------------------
# (b) fleet report over many rows


def generated_rows(count: int, now: float) -> list:
    from slurm_attrib.store import Row

    rng = random.Random(7)
    nodes = [f"gpu{n:04d}" for n in range(2000)]
    shapes = [
        ("gpu", "gpu_fell_off_bus", 79), ("gpu", "gpu_uncorrectable_ecc", 48), ("network", "link_down", None),
        ("application", "app_exception", None), ("application", "gpu_oom", None), ("none", "success", None),
        ("none", "success", None), ("none", "success", None), ("scheduler", "time_limit", None),
        ("unknown", "hang_unattributed", None),
    ]
    rows = []
    for n in range(count):
        domain, category, xid = shapes[n % len(shapes)]
        node_count = rng.choice((1, 2, 4, 8, 16, 64))
        job_nodes = rng.sample(nodes, node_count)
        end = now - rng.uniform(0, 30 * 86400)
        culprit = [job_nodes[0]] if domain in ("gpu", "network") else []
        gpus = [{"node": job_nodes[0], "pci_bus_id": f"0000:{rng.choice(('18', '3b', '5d', '9a'))}:00", "xid": xid,
                 "uuid": None, "serial": None}] if xid else []
        links = [{"node": job_nodes[0], "device": "mlx5_0", "port": 1, "type": "nic_link_down", "rule": "net.mlx5_link_down",
                  "time": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(end - 60)), "count": 1, "trusted": True}] if domain == "network" else []
        drains = [{"node": culprit[0], "reason": f"sattrib: {category} job {n}", "status": "skipped", "detail": "", "at": end}] if culprit else []
        rows.append(Row(
            job_id=str(1_000_000 + n), user=f"user{n % 300}", uid=10000 + n % 300, state="FAILED" if domain != "none" else "COMPLETED",
            domain=domain, category=category, quality=rng.choice(("confirmed", "likely", "likely", "ambiguous")),
            culprit_nodes=culprit, drains=drains, drain_note="", summary=f"{domain}/{category} on {job_nodes[0]}",
            analysed_at=end + 30, owner_ok=True, path=f"/var/lib/sattrib/results/{1_000_000 + n}", rule_pack="0.1.0+bench",
            evidence=f"/var/spool/sattrib/{1_000_000 + n}", job_start=end - rng.uniform(600, 86400), job_end=end,
            node_count=node_count, cause_time=end - 120 if culprit else None, trusted=bool(culprit), systemic=False,
            gpus=gpus, links=links,
        ))
    return rows


def bench_report(store, config, now: float) -> dict:
    import gc

    from slurm_attrib.fleet import report as fleet_report

    started = time.perf_counter()
    rows = store.rows()
    read = time.perf_counter() - started
    del rows
    gc.collect()
    started = time.perf_counter()
    data = fleet_report.fleet_report(store, config, now, since_days=30)  # every stored diagnosis is in range
    text = fleet_report.render_text(data)
    report = time.perf_counter() - started
    return {"rows": data["jobs"], "read_s": read, "report_s": report, "offenders": len(data["repeat_offenders"]),
            "patterns": len(data["fabric_patterns"]), "text_lines": text.count("\n")}


def start_postgres() -> tuple[str, str] | None:
    state = tempfile.mkdtemp(prefix="fleet-bench-pg-", dir="/tmp")
    proc = subprocess.run([str(REPO / "contrib" / "testpg" / "start.sh"), state], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        print(f"PostgreSQL: skipped ({(proc.stderr.strip().splitlines() or ['start failed'])[-1]})")
        shutil.rmtree(state, ignore_errors=True)
        return None
    return proc.stdout.strip().splitlines()[-1], state


def stop_postgres(state: str) -> None:
    subprocess.run([str(REPO / "contrib" / "testpg" / "stop.sh"), state], capture_output=True, timeout=60)
    shutil.rmtree(state, ignore_errors=True)


def _sqlite_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.glob("index.db*"))


def run_report_bench(count: int, skip_postgres: bool) -> list[dict]:
    from slurm_attrib.config import Config
    from slurm_attrib.store import Store

    now = time.time()
    rows = generated_rows(count, now)
    results = []
    backends = [("sqlite", "")]
    pg = None if skip_postgres else start_postgres()
    if pg:
        backends.append(("postgresql", pg[0]))
    try:
        for backend, url in backends:
            root = Path(tempfile.mkdtemp(prefix="fleet-bench-store-", dir=WORK))
            config = Config(results=str(root), index_url=url)
            store = Store(root, index_url=url)
            started = time.perf_counter()
            for chunk in range(0, len(rows), 10000):
                store.put_many(rows[chunk: chunk + 10000])
            write = time.perf_counter() - started
            result = {"backend": backend, "write_s": write, **bench_report(store, config, now)}
            result["bytes_per_row"] = (_pg_bytes(url) if url else _sqlite_bytes(root)) / count
            results.append(result)
            shutil.rmtree(root, ignore_errors=True)
    finally:
        if pg:
            stop_postgres(pg[1])
    return results


def _pg_bytes(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as con:
        return con.execute("SELECT pg_total_relation_size('diagnoses')").fetchone()[0]


# --------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=48)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--skip-batch", action="store_true")
    parser.add_argument("--skip-report", action="store_true")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SATTRIB_SCAN_WORKERS", "1")  # one process per job: the batch's workers are the parallelism
    missed = []
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    if not args.skip_batch:
        counts = [int(w) for w in args.workers.split(",")]
        results = bench_batch(args.jobs, counts)
        base = results[0]["jobs_per_s"]
        print(f"\n(a) batch re-analysis of {args.jobs} simulated 8-node jobs (64 ranks each)")
        print(f"{'workers':>8} {'seconds':>8} {'jobs/s':>8} {'jobs/s/worker':>14} {'speed-up':>9}")
        for r in results:
            speedup = r["jobs_per_s"] / base
            print(f"{r['workers']:>8} {r['seconds']:>8.2f} {r['jobs_per_s']:>8.2f} {r['jobs_per_s'] / r['workers']:>14.2f} {speedup:>8.2f}x")
            expected = min(r["workers"], os.cpu_count() or 1)
            if speedup < TARGET_SPEEDUP_SHARE * expected / results[0]["workers"]:
                missed.append(f"batch speed-up {speedup:.2f}x with {r['workers']} workers < {TARGET_SPEEDUP_SHARE} x {expected}")
    if not args.skip_report:
        results = run_report_bench(args.rows, args.skip_postgres)
        print(f"\n(b) fleet report over {args.rows:,} stored diagnoses (2,000 nodes, 30 days)")
        print(f"{'backend':>11} {'write s':>8} {'read s':>7} {'report s':>9} {'vs read':>8} {'bytes/row':>10} {'offenders':>10} {'patterns':>9}")
        for r in results:
            print(f"{r['backend']:>11} {r['write_s']:>8.2f} {r['read_s']:>7.2f} {r['report_s']:>9.2f} {r['report_s'] / r['read_s']:>7.2f}x"
                  f" {r['bytes_per_row']:>10.0f} {r['offenders']:>10} {r['patterns']:>9}")
            if r["report_s"] > TARGET_REPORT_SECONDS:
                missed.append(f"report on {r['backend']}: {r['report_s']:.2f} s > {TARGET_REPORT_SECONDS} s")
    print("\ntargets: " + ("all met" if not missed else "MISSED: " + "; ".join(missed)))
    return 1 if (missed and args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
