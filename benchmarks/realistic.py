#!/usr/bin/env python3
"""sattrib analyze on realistic jobs against `grep -rcE` with the rule pack's literals.

    python benchmarks/realistic.py [--quick] [--only NAME[,NAME]] [--scale F] [--skip-workers]

Generates (benchmarks/realistic_corpora.py, cached under benchmarks/_work/realistic/) job folders
shaped like what real jobs print, none of their lines removed, and measures for each:
- `sattrib analyze DIR` CPU seconds of the whole process tree (user+sys from os.wait4, which
  includes the worker processes it waited for), wall time and peak RSS (ru_maxrss: the largest
  process of the tree), with SATTRIB_SCAN_WORKERS=1 and with the default workers;
- `LC_ALL=C grep -rcE -f literals.ere DIR` plus `grep -rciE -f literals_i.ere DIR` (the rules'
  `match.contains`, escaped for ERE; the caseless ones in the second run), CPU summed the same way;
- whether the diagnosis matched the corpus' truth file;
- per rule literal, the fraction of lines holding it (top 15 per corpus).
Numbers also go to benchmarks/_work/realistic.json.  Always exits 0 unless --check is given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / "_work"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from realistic_corpora import GENERATOR_VERSION, SCALING_NODES, SPECS, Spec, scaling_spec, write_corpus  # noqa: E402

TARGET_GREP_RATIO = 2.0  # analyze CPU on one core <= 2x grep's
TARGET_1024_WALL = 5.0  # the 1,024-node NCCL INFO job, default workers
TARGET_PEAK_MB_4096 = 256
QUICK_FACTOR = 0.03
QUICK_NODES = {"a_1024n_nccl_info": 32, "g_32768_rank_cascade": 256}
QUICK_SCALING = (8, 64, 256)
TOP_LITERALS = 15

# Runs a command, waits with os.wait4 and prints the child tree's CPU, wall, peak RSS and status.
# A small fresh interpreter: a child forked from the benchmark would inherit its peak RSS.  Output
# goes to a pipe, never /dev/null: GNU grep stops at the first match when it writes to /dev/null.
_MEASURE = (
    "import json, os, subprocess, sys, tempfile, time\n"
    "errors = tempfile.TemporaryFile()\n"
    "t = time.perf_counter()\n"
    "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=errors)\n"
    "while p.stdout.read(1 << 16):\n"
    "    pass\n"
    "_, status, ru = os.wait4(p.pid, 0)\n"
    "errors.seek(0)\n"
    "err = errors.read()\n"
    "p.returncode = os.waitstatus_to_exitcode(status)\n"
    "print(json.dumps({'cpu': ru.ru_utime + ru.ru_stime, 'wall': time.perf_counter() - t,\n"
    "                  'rss_kb': ru.ru_maxrss, 'rc': p.returncode, 'err': err[-2000:].decode('utf-8', 'replace')}))\n"
)


def measure(command: list[str], env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", _MEASURE, *command], capture_output=True, env=env, check=True)
    return json.loads(proc.stdout)


# --------------------------------------------------------------------------------------------
# corpora


def corpus_specs(quick: bool, scale: float) -> list[Spec]:
    specs = []
    for spec in SPECS.values():
        if quick:
            specs.append(spec.scaled(QUICK_FACTOR, nodes=QUICK_NODES.get(spec.name, spec.nodes)))
        elif scale != 1.0:
            specs.append(spec.scaled(scale, nodes=max(2, round(spec.nodes * scale)) if spec.nodes > 64 else spec.nodes))
        else:
            specs.append(spec)
    for nodes in QUICK_SCALING if quick else SCALING_NODES:
        specs.append(scaling_spec(nodes))
    return specs


def ensure_corpus(spec: Spec) -> tuple[Path, dict, float]:
    """The job folder and truth of `spec`, generated unless an identical one is cached."""
    root = WORK / "realistic"
    folder, truth_file = root / spec.name, root / f"{spec.name}.truth.json"
    if folder.is_dir() and truth_file.is_file():
        truth = json.loads(truth_file.read_text())
        if truth.get("spec") == asdict(spec) and truth.get("generator_version") == GENERATOR_VERSION:
            return folder, truth, 0.0
    import shutil

    shutil.rmtree(folder, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    truth = write_corpus(spec, folder, truth_file)
    return folder, truth, time.perf_counter() - t


# --------------------------------------------------------------------------------------------
# the grep baseline


def rule_literals() -> tuple[list[str], list[str]]:
    """Every rule's `match.contains` (fallback rules included): (case-sensitive, caseless)."""
    from slurm_attrib.ruleset.loader import load_rules

    sensitive, caseless = set(), set()
    for rule in load_rules():
        for literal in rule.match.contains:
            (caseless if rule.match.ignore_case else sensitive).add(literal)
    return sorted(sensitive), sorted(caseless - sensitive)


def ere_escape(literal: str) -> str:
    return re.sub(r"([][\\.^$*+?(){}|])", r"\\\1", literal)


def grep_commands(folder: Path) -> list[list[str]]:
    sensitive, caseless = rule_literals()
    files = []
    for name, literals in (("literals.ere", sensitive), ("literals_i.ere", caseless)):
        path = WORK / "realistic" / name
        path.write_text("".join(ere_escape(lit) + "\n" for lit in literals), encoding="utf-8")
        files.append(path)
    return [["grep", "-rcE", "-f", str(files[0]), str(folder)], ["grep", "-rciE", "-f", str(files[1]), str(folder)]]


def run_grep(folder: Path) -> dict:
    env = dict(os.environ, LC_ALL="C")
    runs = [measure(cmd, env) for cmd in grep_commands(folder)]
    return {"cpu": sum(r["cpu"] for r in runs), "wall": sum(r["wall"] for r in runs)}


# --------------------------------------------------------------------------------------------
# sattrib analyze


def run_analyze(folder: Path, workers: str | None, output: Path) -> dict:
    env = dict(os.environ)
    env.pop("SATTRIB_SCAN_WORKERS", None)
    if workers is not None:
        env["SATTRIB_SCAN_WORKERS"] = workers
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [sys.executable, "-c", "import sys; from slurm_attrib.cli import main; sys.exit(main())",
               "analyze", str(folder), "--format", "json", "--output", str(output)]
    result = measure(command, env)
    result["diagnosis"] = json.loads(output.read_text()) if result["rc"] == 0 and output.is_file() else None
    return result


def verdict_problems(diagnosis: dict | None, truth: dict) -> list[str]:
    """[] when the diagnosis fits one of the truth's acceptable readings."""
    if diagnosis is None:
        return ["no diagnosis"]
    drain = sorted({d["node"] for d in diagnosis.get("drain", [])})
    best = None
    for exp in truth["expectations"]:
        issues = []
        if (diagnosis.get("domain"), diagnosis.get("category")) != (exp["domain"], exp["category"]):
            issues.append(f"{diagnosis.get('domain')}/{diagnosis.get('category')} != {exp['domain']}/{exp['category']}")
        if sorted(diagnosis.get("culprit_nodes", [])) != exp["culprit_nodes"]:
            issues.append(f"culprits {sorted(diagnosis.get('culprit_nodes', []))[:4]} != {exp['culprit_nodes'][:4]}")
        if diagnosis.get("quality") not in exp["allowed_qualities"]:
            issues.append(f"quality {diagnosis.get('quality')} not in {exp['allowed_qualities']}")
        if drain != exp["drain_nodes"]:
            issues.append(f"drain {drain[:4]} != {exp['drain_nodes'][:4]}")
        if not issues:
            return []
        best = best or issues
    return best or []


# --------------------------------------------------------------------------------------------
# candidate rates: the fraction of lines holding each rule literal


def literal_rates(folder: Path) -> tuple[int, dict[str, int]]:
    """(lines, {literal: lines holding it}) over every file of the folder, with Hyperscan."""
    import hyperscan

    sensitive, caseless = rule_literals()
    literals = sensitive + caseless
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=[re.escape(lit).encode() for lit in literals], ids=list(range(len(literals))),
               elements=len(literals), flags=[0] * len(sensitive) + [hyperscan.HS_FLAG_CASELESS] * len(caseless))
    counts = [0] * len(literals)
    line_end = [-1] * len(literals)  # end of the last line counted for each literal (per buffer)
    lines = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "job.json"):
        with path.open("rb") as f:
            rest = b""
            while True:
                block = f.read(16 << 20)
                data = rest + block
                if not block:
                    cut = len(data)
                else:
                    cut = data.rfind(b"\n") + 1
                chunk, rest = data[:cut], data[cut:]
                if chunk:
                    lines += chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
                    for i in range(len(line_end)):
                        line_end[i] = -1

                    def on_match(literal_id: int, _start: int, end: int, _flags: int, _ctx: object) -> None:
                        if end > line_end[literal_id]:
                            counts[literal_id] += 1
                            stop = chunk.find(b"\n", end)
                            line_end[literal_id] = stop if stop >= 0 else len(chunk)

                    db.scan(chunk, match_event_handler=on_match)
                if not block:
                    break
    return lines, {lit: n for lit, n in zip(literals, counts) if n}


# --------------------------------------------------------------------------------------------


def folder_size(folder: Path) -> tuple[float, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    for p in files:  # into the page cache for both sides
        with p.open("rb") as f:
            while f.read(1 << 24):
                pass
    return sum(p.stat().st_size for p in files) / 1e6, len(files)


def bench_one(spec: Spec, skip_workers: bool) -> dict:
    folder, truth, gen_s = ensure_corpus(spec)
    mb, nfiles = folder_size(folder)
    row: dict = {"corpus": spec.name, "nodes": spec.nodes, "ranks": spec.nodes * spec.rpn, "mb": mb, "files": nfiles,
                 "generated_s": gen_s, "description": spec.description}
    row["grep"] = run_grep(folder)
    out = WORK / "realistic" / f"{spec.name}.diagnosis.json"
    one = run_analyze(folder, "1", out)
    row["analyze_1"] = {k: one[k] for k in ("cpu", "wall", "rss_kb", "rc")}
    row["problems"] = verdict_problems(one["diagnosis"], truth) if one["rc"] == 0 else [f"analyze failed: {one['err'].strip().splitlines()[-1:] }"]
    row["diagnosis"] = {k: (one["diagnosis"] or {}).get(k) for k in ("domain", "category", "culprit_nodes", "quality")}
    if not skip_workers:
        default = run_analyze(folder, None, WORK / "realistic" / f"{spec.name}.diagnosis-default.json")
        row["analyze_default"] = {k: default[k] for k in ("cpu", "wall", "rss_kb", "rc")}
        row["default_same_diagnosis"] = default["diagnosis"] == one["diagnosis"]
    lines, counts = literal_rates(folder)
    row["lines"] = lines
    row["top_literals"] = [{"literal": lit, "lines": n, "rate": n / max(lines, 1)}
                           for lit, n in sorted(counts.items(), key=lambda kv: -kv[1])[:TOP_LITERALS]]
    return row


def print_row(row: dict) -> None:
    g = row["grep"]["cpu"]
    one = row["analyze_1"]
    d = row.get("analyze_default")
    ok = "yes" if not row["problems"] else "NO: " + "; ".join(row["problems"])
    dcpu = f"{d['cpu']:8.2f} {d['cpu'] / g:6.1f}x {d['wall']:6.2f} {d['rss_kb'] / 1024:6.0f}" if d else f"{'-':>8s} {'-':>7s} {'-':>6s} {'-':>6s}"
    print(f"{row['corpus']:24s} {row['mb']:7.1f} {g:6.2f} {one['cpu']:8.2f} {one['cpu'] / g:6.1f}x {one['wall']:6.2f} "
          f"{one['rss_kb'] / 1024:6.0f} {dcpu}  {ok}", flush=True)


HEADER = (f"{'corpus':24s} {'MB':>7s} {'grep s':>6s} {'1w CPU':>8s} {'ratio':>7s} {'wall':>6s} {'RSS MB':>6s} "
          f"{'dflt CPU':>8s} {'ratio':>7s} {'wall':>6s} {'RSS MB':>6s}  diagnosis right")


def print_literals(rows: list[dict]) -> None:
    print("\nCandidate rates: the fraction of lines holding each rule literal (top per corpus)")
    for row in rows:
        top = ", ".join(f"{t['literal']!r} {t['rate']:.1%}" for t in row["top_literals"] if t["rate"] >= 0.001)
        print(f"  {row['corpus']} ({row['lines']:,} lines): {top or 'none above 0.1 %'}")


def print_targets(rows: list[dict]) -> list[bool]:
    verdicts = []
    print("\nTargets")
    worst = max(rows, key=lambda r: r["analyze_1"]["cpu"] / r["grep"]["cpu"])
    ok = worst["analyze_1"]["cpu"] / worst["grep"]["cpu"] <= TARGET_GREP_RATIO
    verdicts.append(ok)
    print(f"  analyze <= {TARGET_GREP_RATIO:.0f}x grep CPU on one core, every corpus: worst {worst['corpus']} "
          f"{worst['analyze_1']['cpu'] / worst['grep']['cpu']:.1f}x {'PASS' if ok else 'MISS'}")
    with_workers = [r for r in rows if "analyze_default" in r]
    if with_workers:
        over = [r["corpus"] for r in with_workers if r["analyze_default"]["cpu"] > r["analyze_1"]["cpu"] * 1.05]
        verdicts.append(not over)
        print(f"  default workers never use more CPU than one process (5 % noise allowed): "
              f"{'PASS' if not over else 'MISS on ' + ', '.join(over)}")
    for r in rows:
        if r["corpus"].startswith("a_") and r["nodes"] >= 1024 and "analyze_default" in r:
            ok = r["analyze_default"]["wall"] <= TARGET_1024_WALL
            verdicts.append(ok)
            print(f"  1,024-node NCCL INFO job <= {TARGET_1024_WALL:.0f} s wall (default workers): "
                  f"{r['analyze_default']['wall']:.1f} s {'PASS' if ok else 'MISS'}")
    scaling = sorted((r for r in rows if r["corpus"].startswith("h_")), key=lambda r: r["nodes"])
    if len(scaling) >= 2:
        print("  scaling (one process): " + ", ".join(
            f"{r['nodes']} nodes {r['analyze_1']['cpu'] / r['nodes'] * 1000:.1f} ms CPU/node "
            f"{r['analyze_1']['rss_kb'] / 1024:.0f} MB" for r in scaling))
        big = scaling[-1]
        if big["nodes"] >= 4096:
            peak = max(big["analyze_1"]["rss_kb"], big.get("analyze_default", {}).get("rss_kb", 0)) / 1024
            ok = peak <= TARGET_PEAK_MB_4096
            verdicts.append(ok)
            print(f"  peak RSS <= {TARGET_PEAK_MB_4096} MB at 4,096 nodes: {peak:.0f} MB {'PASS' if ok else 'MISS'}")
    wrong = [r["corpus"] for r in rows if r["problems"]]
    verdicts.append(not wrong)
    print(f"  diagnosis right on every corpus: {'PASS' if not wrong else 'MISS on ' + ', '.join(wrong)}")
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small versions of every shape (a few minutes)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the line counts (and node counts above 64)")
    parser.add_argument("--only", default="", help="comma-separated corpus names or prefixes (a,b,h_scaling_8n ...)")
    parser.add_argument("--skip-workers", action="store_true", help="measure one process only")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    specs = corpus_specs(args.quick, args.scale)
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        specs = [s for s in specs if any(s.name == w or s.name.startswith(w + "_") or s.name.startswith(w) for w in wanted)]
    WORK.mkdir(exist_ok=True)
    import slurm_attrib

    import compileall

    compileall.compile_dir(Path(slurm_attrib.__file__).parent, quiet=1)  # as pip install does
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; grep {subprocess.run(['grep', '--version'], capture_output=True, text=True).stdout.split()[3]}")
    sensitive, caseless = rule_literals()
    print(f"rule literals: {len(sensitive)} case-sensitive, {len(caseless)} caseless; CPU = user+sys of the process tree\n")
    print(HEADER, flush=True)
    rows = []
    for spec in specs:
        row = bench_one(spec, args.skip_workers)
        rows.append(row)
        print_row(row)
    print_literals(rows)
    verdicts = print_targets(rows)
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "quick": args.quick, "scale": args.scale, "rows": rows}
    (WORK / "realistic.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten: {(WORK / 'realistic.json').relative_to(REPO)}")
    return 1 if args.check and not all(verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
