"""Epilog cost per node vs a plain-shell capture of the same sources.

    python3 benchmarks/epilog_bench.py [--runs 3] [--keep DIR]

Realistic sources (a full 1 MB kernel ring buffer, 100k syslog lines, 50 MB of job output, each
with a few lines that match rules) are generated in a temp dir; then, in the same run:
  * epilog: the real epilog/sattrib-epilog wrapper (interpreter start, config, rule literals,
    all sources, bundle write), wall time and peak RSS (largest process of the tree);
  * shell:  `grep -E -f literals <file> > out` for each source (what `journalctl ... | grep -E`
    would cost), wall time.
Prints the medians and the ratio; targets: <= 1.5x the shell time, <= 64 MB RSS.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurm_attrib.capture.literals import load_literals  # noqa: E402

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
WORDS = "the step loss iter rank tensor grad epoch batch info lr=0.0003 tokens/s throughput ok".split()


def make_sources(d: Path) -> dict[str, Path]:
    rnd = random.Random(7)
    kernel = d / "kernel-bench01.log"
    with open(kernel, "w") as f:
        n = 0
        i = 0
        while n < 1024 * 1024:
            i += 1
            line = f"2024-04-09T01:{i // 60 % 60:02d}:{i % 60:02d},{i:06d}+00:00 bench01 kernel: eth0: rx queue {i % 8} stats {rnd.random():.6f}\n"
            if i in (3000, 6000):
                line = f"2024-04-09T01:21:38,000000+00:00 bench01 kernel: {XID}\n"
            f.write(line)
            n += len(line)
    syslog = d / "syslog.log"
    with open(syslog, "w") as f:
        for i in range(1, 100_001):
            if i in (5000, 50_000, 99_000):
                f.write("2024-04-09T01:21:39,000000+00:00 bench01 kernel: mlx5_core 0000:3b:00.0: Port module event: module 0, Cable unplugged\n")
            else:
                f.write(f"2024-04-09T01:{i // 60 % 60:02d}:{i % 60:02d},000000+00:00 bench01 systemd[1]: session-{i}.scope: Succeeded.\n")
    app = d / "slurm-777.out"
    with open(app, "w") as f:
        n = 0
        i = 0
        while n < 50 * 1024 * 1024:
            i += 1
            line = f"[rank{i % 64}] iter {i} " + " ".join(rnd.choices(WORDS, k=12)) + "\n"
            if i in (10, 200_000, 400_000):
                line = "RuntimeError: NCCL communicator was aborted on rank 3.\n"
            f.write(line)
            n += len(line)
    return {"kernel": kernel, "syslog": syslog, "app": app}


def run_measured(argv: list[str], env: dict | None = None) -> tuple[float, int]:
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    return wall, usage.ru_maxrss  # KiB, largest process of the waited tree


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", help="keep the generated files in this directory")
    args = ap.parse_args()
    d = Path(args.keep or tempfile.mkdtemp(prefix="sattrib-bench-"))
    d.mkdir(parents=True, exist_ok=True)
    try:
        src = make_sources(d)
        lits = load_literals()
        (d / "literals").write_bytes(b"\n".join(re.escape(l.decode()).encode() for l in lits.all_literals()) + b"\n")
        spool = d / "spool"
        spool.mkdir(exist_ok=True)
        cfg = {
            "spool": str(spool),
            "local_spool": str(d / "local"),
            "epilog_timeout": 10,
            "sources": [
                {"name": "kernel", "kind": "kernel", "path": str(d / "kernel-%N.log")},
                {"name": "syslog", "kind": "syslog", "path": str(src["syslog"]), "max_bytes": 16 * 1024 * 1024},
                {"name": "job_stdout", "kind": "app", "max_bytes": 64 * 1024 * 1024},
                {"name": "job_stderr", "kind": "app", "enabled": False},
                {"name": "nccl_debug", "kind": "app", "enabled": False},
                {"name": "flight_recorder", "kind": "app", "enabled": False},
                {"name": "nvidia_smi", "kind": "nvidia_smi", "enabled": False},
                {"name": "ib_counters", "kind": "sysfs", "enabled": False},
            ],
        }
        (d / "config.json").write_text(json.dumps(cfg))  # JSON is YAML
        env = {
            "SATTRIB_CONFIG": str(d / "config.json"),
            "SATTRIB_PYTHON": sys.executable,
            "SLURM_JOB_ID": "777",
            "SLURMD_NODENAME": "bench01",
            "SLURM_JOB_NODELIST": "bench[01-04]",
            "SLURM_JOB_USER": "bench",
            "SLURM_JOB_UID": str(os.getuid()),
            "SLURM_JOB_STDOUT": str(d / "slurm-%j.out"),
            "SATTRIB_SYSFS_ROOT": str(d / "sys"),
            "SATTRIB_PROC_ROOT": str(d / "proc"),
        }
        shell = " ; ".join(f"grep -E -f {d / 'literals'} {p} > {d / ('out-' + k)}" for k, p in src.items())
        # warm the page cache
        for p in src.values():
            with open(p, "rb") as f:
                while f.read(1 << 20):
                    pass
        ep_walls, ep_rss, sh_walls = [], [], []
        for _ in range(args.runs):
            wall, rss = run_measured([str(REPO / "epilog" / "sattrib-epilog")], env)
            ep_walls.append(wall)
            ep_rss.append(rss)
            sh_walls.append(run_measured(["sh", "-c", shell])[0])
        with gzip.open(spool / "777" / "nodes" / "bench01.json.gz") as f:
            bundle = json.load(f)
        size = (spool / "777" / "nodes" / "bench01.json.gz").stat().st_size
        ep, sh = statistics.median(ep_walls), statistics.median(sh_walls)
        rss_mb = max(ep_rss) / 1024
        print(f"sources: kernel {src['kernel'].stat().st_size / 1e6:.1f} MB, syslog 100k lines "
              f"({src['syslog'].stat().st_size / 1e6:.1f} MB), job output {src['app'].stat().st_size / 1e6:.1f} MB; "
              f"{len(lits.all_literals())} rule literals")
        for s in bundle["sources"]:
            print(f"  {s['name']:<11} {s['status']:<9} read {s['bytes_read']:>10} B  lines {s['lines_total']:>7}  kept {s['lines_kept']:>4}  {s['duration']:.3f}s")
        print(f"bundle: {size} bytes gzip; capture duration (in-process) {bundle['capture']['duration']:.3f}s")
        print(f"epilog wall  median {ep:.3f}s  runs {', '.join(f'{w:.3f}' for w in ep_walls)}")
        print(f"shell  wall  median {sh:.3f}s  runs {', '.join(f'{w:.3f}' for w in sh_walls)}")
        print(f"ratio epilog/shell: {ep / sh:.2f}x (target <= 1.5x)")
        print(f"epilog peak RSS: {rss_mb:.1f} MB (target <= 64 MB)")
        ok = ep / sh <= 1.5 and rss_mb <= 64
        print("PASS" if ok else "MISS")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
