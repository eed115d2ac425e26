"""Epilog cost per node vs a plain-shell capture of the same sources.

    python3 benchmarks/epilog_bench.py [--quick] [--runs 3] [--keep DIR]

One node of realistic jobs (benchmarks/realistic_corpora.py, cached under
benchmarks/_work/epilog/):
  * its journal: the culprit node of corpus c (IB link down; audit, mlx5, EDAC, Lustre noise),
    with a quarter more lines (about 50 MB), one Xid 79 added among its last kernel lines; a fake `journalctl` script
    prints the kernel lines for `-k` and the other lines otherwise (short-iso, as journald would);
  * the job output of corpus a at 768 nodes (NCCL 2.21 INFO start-up of 6,144 ranks in four
    communicators, `via P2P/CUMEM/read` channel lines), about 200 MB.
(--quick: a quarter of the journal and 32 nodes of job output.)

Then, in the same run:
  * epilog: the real epilog/sattrib-epilog wrapper with the built-in kernel and syslog sources
    (their journalctl arguments, the fake journalctl's path) and job_stdout: CPU of the process
    tree, wall time and peak RSS (largest process of the tree);
  * shell:  `journalctl -k ... | grep -a -F [-i] -f literals > out` for each source, one after
    the other, with the literals the epilog uses for that source's kind.
Prints both, the ratios, and whether the failure lines (the late `Link down`, `Lost carrier`, the
Xid) and the rank map (every world rank's NCCL `Init COMPLETE` line) are in the bundle.
Targets: CPU <= 1.5x the shell's, peak RSS <= 64 MB, the failure lines and rank map kept.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / "_work" / "epilog"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from realistic import ensure_corpus, measure  # noqa: E402
from realistic_corpora import SPECS  # noqa: E402

from slurm_attrib.capture.literals import load_literals  # noqa: E402
from slurm_attrib.capture.sources import default_sources  # noqa: E402

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
FAILURE_LINES = {"Link down": "kernel", "Lost carrier": "syslog", "NVRM: Xid": "kernel"}
TARGET_RATIO = 1.5
TARGET_RSS_MB = 64
FAKE_JOURNALCTL = """#!/bin/sh
# journalctl stand-in: -k prints the kernel transport, anything else the other lines
for a in "$@"; do [ "$a" = "-k" ] && exec cat "{kernel}"; done
exec cat "{other}"
"""


def node_sources(quick: bool) -> dict[str, Path]:
    """The journal (kernel and other lines, a fake journalctl) and the job output of one node."""
    journal_spec = replace(SPECS["c_16n_journal_heavy"], name="epilog_c_journal", nodes=2, kernel_lines=50000, journal_lines=250000)
    job_spec = replace(SPECS["a_1024n_nccl_info"], name="epilog_a_job_output", nodes=768)
    if quick:
        journal_spec = replace(journal_spec.scaled(0.25, nodes=2), name="epilog_c_journal_quick")
        job_spec = replace(job_spec, name="epilog_a_job_output_quick", nodes=32)
    journal_folder, truth, _ = ensure_corpus(journal_spec)
    job_folder, job_truth, _ = ensure_corpus(job_spec)
    node = truth["expectations"][0]["culprit_nodes"][0]
    out = WORK / ("quick" if quick else "full")
    out.mkdir(parents=True, exist_ok=True)
    kernel, other = out / "journal-kernel.txt", out / "journal-other.txt"
    stamp = out / "stamp.json"
    key = {"journal": truth["spec"], "node": node}
    if not (stamp.is_file() and json.loads(stamp.read_text()) == key):
        split_journal(journal_folder / node / "journal.txt", node, kernel, other)
        stamp.write_text(json.dumps(key))
    fake = out / "journalctl"
    fake.write_text(FAKE_JOURNALCTL.format(kernel=kernel, other=other))
    fake.chmod(0o755)
    job_out = job_folder / f"slurm-{job_truth['job_id']}.out"
    return {"kernel": kernel, "syslog": other, "journalctl": fake, "job_stdout": job_out,
            "node": Path(node), "nranks": Path(str(job_spec.nodes * job_spec.rpn))}


def split_journal(journal: Path, node: str, kernel: Path, other: Path) -> None:
    """journalctl -k's lines and the rest; one Xid 79 among the last 1 % of the kernel lines."""
    marker = f" {node} kernel: "
    with journal.open(encoding="utf-8") as f:
        lines = f.readlines()
    kernel_lines = [line for line in lines if marker in line]
    at = len(kernel_lines) - max(1, len(kernel_lines) // 100)
    stamp = kernel_lines[at].split(" ", 1)[0]
    kernel_lines.insert(at, f"{stamp} {node} kernel: {XID}\n")
    kernel.write_text("".join(kernel_lines), encoding="utf-8")
    other.write_text("".join(line for line in lines if marker not in line), encoding="utf-8")


def config(d: Path, src: dict[str, Path]) -> dict:
    builtin = {s.name: s for s in reversed(default_sources()) if s.command or s.name == "job_stdout"}
    sources = []
    for name in ("kernel", "syslog", "job_stdout"):
        s = builtin[name]
        entry = {"name": name, "kind": s.kind, "timeout": s.timeout, "max_bytes": s.max_bytes}
        if s.command:
            entry["command"] = [str(src["journalctl"]), *s.command[1:]]
        sources.append(entry)
    for name in ("job_stderr", "nccl_debug", "flight_recorder", "nvidia_smi", "ib_counters"):
        sources.append({"name": name, "kind": "app", "enabled": False})
    return {"spool": str(d / "spool"), "local_spool": str(d / "local"), "epilog_timeout": 10, "sources": sources}


def shell_capture(d: Path, src: dict[str, Path]) -> str:
    """`journalctl ... | grep -F -f literals` per source, with the literals of its kind."""
    steps = []
    for name, kind in (("kernel", "kernel"), ("syslog", "syslog"), ("job_stdout", "app")):
        lits = kind_literals(kind)
        path = d / f"literals-{kind}"
        path.write_bytes(b"".join(lit + b"\n" for lit in lits.all_literals()))
        grep = f"LC_ALL=C grep -a -F {'-i ' if lits.folded else ''}-f {path}"
        if name == "job_stdout":
            steps.append(f"{grep} {src['job_stdout']} > {d / 'out-app'}")
        else:
            flag = "-k " if name == "kernel" else ""
            steps.append(f"{src['journalctl']} {flag}--no-pager | {grep} > {d / ('out-' + name)}")
    return " ; ".join(steps)


def kind_literals(kind: str):
    lits = load_literals()
    return lits.for_kind(kind) if hasattr(lits, "for_kind") else lits


def kept(bundle: dict, src: dict[str, Path]) -> dict[str, bool | str]:
    sources = {s["name"]: s for s in bundle["sources"]}
    found: dict[str, bool | str] = {}
    for text, name in FAILURE_LINES.items():
        found[text] = any(text in line for _, line in sources.get(name, {}).get("lines", []))
    nranks = int(str(src["nranks"]))
    world = re.compile(rf" rank (\d+) nranks {nranks} .*Init COMPLETE")
    ranks = {int(m[1]) for _, line in sources.get("job_stdout", {}).get("lines", []) if (m := world.search(line))}
    found["rank map"] = f"{len(ranks)}/{nranks} ranks"
    return found


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a quarter of the journal, 32 nodes of job output")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", help="keep the spool and outputs in this directory")
    args = ap.parse_args()
    src = node_sources(args.quick)
    d = Path(args.keep or tempfile.mkdtemp(prefix="sattrib-bench-"))
    d.mkdir(parents=True, exist_ok=True)
    try:
        (d / "config.json").write_text(json.dumps(config(d, src)))  # JSON is YAML
        (d / "spool").mkdir(exist_ok=True)
        env = {
            "SATTRIB_CONFIG": str(d / "config.json"),
            "SATTRIB_PYTHON": sys.executable,
            "SLURM_JOB_ID": "777",
            "SLURMD_NODENAME": str(src["node"]),
            "SLURM_JOB_NODELIST": str(src["node"]),
            "SLURM_JOB_USER": "bench",
            "SLURM_JOB_UID": str(os.getuid()),
            "SLURM_JOB_STDOUT": str(src["job_stdout"]),
            "SLURM_JOB_START_TIME": "1700000000",
            "SLURM_JOB_END_TIME": "1700090000",
            "SATTRIB_SYSFS_ROOT": str(d / "sys"),
            "SATTRIB_PROC_ROOT": str(d / "proc"),
        }
        shell = shell_capture(d, src)
        for p in (src["kernel"], src["syslog"], src["job_stdout"]):  # warm the page cache
            with open(p, "rb") as f:
                while f.read(1 << 20):
                    pass
        ep, sh = [], []
        for _ in range(args.runs):
            ep.append(measure([str(REPO / "epilog" / "sattrib-epilog")], env))
            sh.append(measure(["sh", "-c", shell], {**os.environ, "LC_ALL": "C"}))
        bundle_path = d / "spool" / "777" / "nodes" / f"{src['node']}.json.gz"
        with gzip.open(bundle_path) as f:
            bundle = json.load(f)
        mb = {k: src[k].stat().st_size / 1e6 for k in ("kernel", "syslog", "job_stdout")}
        print(f"sources: journal {mb['kernel'] + mb['syslog']:.1f} MB (kernel {mb['kernel']:.1f}, other {mb['syslog']:.1f}), "
              f"job output {mb['job_stdout']:.1f} MB; literals per kind: "
              + ", ".join(f"{k} {len(kind_literals(k).all_literals())}" for k in ("kernel", "syslog", "app")))
        for s in bundle["sources"]:
            print(f"  {s['name']:<11} {s['status']:<9} read {s['bytes_read']:>10} B  lines {s['lines_total']:>8}  "
                  f"kept {s['lines_kept']:>6}  {s['duration']:.3f}s")
            if s.get("detail"):
                print(f"    {s['detail'][:300]}")
        print(f"bundle: {bundle_path.stat().st_size} bytes gzip; capture duration (in-process) {bundle['capture']['duration']:.3f}s")
        if bundle["capture"]["errors"]:
            print(f"capture errors: {bundle['capture']['errors']}")
        med = {k: (statistics.median(r[k] for r in ep), statistics.median(r[k] for r in sh)) for k in ("cpu", "wall")}
        rss_mb = max(r["rss_kb"] for r in ep) / 1024
        for k, (e, s) in med.items():
            print(f"{k:<4} median  epilog {e:.3f}s  shell {s:.3f}s  ratio {e / s:.2f}x   runs epilog "
                  f"{', '.join(f'{r[k]:.2f}' for r in ep)}; shell {', '.join(f'{r[k]:.2f}' for r in sh)}")
        print(f"epilog peak RSS: {rss_mb:.1f} MB (target <= {TARGET_RSS_MB} MB)")
        found = kept(bundle, src)
        print("kept: " + ", ".join(f"{k}: {'yes' if v is True else 'NO' if v is False else v}" for k, v in found.items()))
        nranks = int(str(src["nranks"]))
        ok = (med["cpu"][0] / med["cpu"][1] <= TARGET_RATIO and rss_mb <= TARGET_RSS_MB
              and all(v for v in found.values() if isinstance(v, bool)) and found["rank map"] == f"{nranks}/{nranks} ranks")
        print(f"targets: CPU <= {TARGET_RATIO}x the shell's, <= {TARGET_RSS_MB} MB, failure lines and rank map kept: "
              + ("PASS" if ok else "MISS"))
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
