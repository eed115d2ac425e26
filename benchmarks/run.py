#!/usr/bin/env python3
"""slurm-attrib benchmarks: scan throughput against grep, and diagnosis time/memory against job size.

    python benchmarks/run.py [--size-mb 200] [--nodes 8,128,1024] [--e2e-mb 200] [--rss-mb 1000]
                             [--engines hyperscan,ahocorasick,grep,re] [--skip-scan] [--skip-scale]
                             [--skip-e2e] [--skip-rss] [--check]

(a) Scan: builds a log of --size-mb MB (noise lines from simulated jobs, about 1 matching line in
    20,000), then times `Scanner(first_pass_rules()).scan(data, "app")` with each literal-search engine
    (Hyperscan when installed, GNU grep -F, Python `re`), and `grep -c -E -f patterns.txt FILE`
    (LC_ALL=C) over the same file, where patterns.txt holds the rules' `match.regex` translated to
    POSIX ERE.  Best of --repeat runs each; the file is read once before timing (page cache).
(b) Scale: simulates `gpu_fell_off_bus` jobs of each --nodes size and diagnoses each one with
    `analyze_path` in its own subprocess, printing seconds, peak RSS (ru_maxrss) and per-node growth,
    and whether the diagnosis matched the simulator's ground truth.

(c) End to end: `sattrib analyze` (a child process: interpreter start, imports and rule compilation
    included) of a simulated 16-node job inflated to --e2e-mb MB with noise lines, once per engine
    (SATTRIB_SCAN_ENGINE), against `grep -rcE -f literals.ere DIR` (LC_ALL=C), the rules' literals.
(d) Memory: peak RSS (wait4 rusage of the child) of `sattrib analyze` over a --rss-mb MB job.

Generated data goes under benchmarks/_work/ (gitignored) and is reused when already there.
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / "_work"
sys.path.insert(0, str(REPO))

TARGET_SCAN_RATIO = 0.5  # scanner throughput >= 50 % of grep -E
TARGET_E2E_RATIO = 2.0  # sattrib analyze of a 200 MB job <= 2x grep -rcE with the rules' literals
TARGET_PEAK_MB = 128  # peak RSS of analyze over 1 GB of logs
TARGET_1024_SECONDS = 5.0  # diagnosis of a 1,024-node job
RARE_EVERY = 20000  # about one matching line in this many


# --------------------------------------------------------------------------------------------
# (a) scan throughput


def _rules_digest() -> str:
    from slurm_attrib.paths import bundled_dir

    digest = hashlib.sha256()
    for path in sorted(bundled_dir("rules").rglob("*.yaml")) + [REPO / "slurm_attrib" / "ruleset" / "hooks.py"]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:10]


def first_pass_rules() -> list:
    """The rules proper: what `sattrib analyze` scans with (the fallback rules are read only on a
    second look, when the first pass finds a failure but no origin)."""
    from slurm_attrib.ruleset.loader import load_rules

    return [rule for rule in load_rules() if not rule.event.fallback]


def build_scan_log(size_mb: int, seed: int = 0) -> Path:
    """A log of size_mb MB of realistic noise with rare matching lines; cached by size and seed."""
    from slurm_attrib.ruleset.scanner import Scanner
    from slurm_attrib.simulate import SCENARIOS, write_scenario

    path = WORK / f"scan-{size_mb}mb-s{seed}-{_rules_digest()}.log"  # noise depends on the rules
    if path.is_file() and path.stat().st_size >= size_mb * 1_000_000:
        return path
    WORK.mkdir(parents=True, exist_ok=True)
    corpus = WORK / "scan-corpus"
    shutil.rmtree(corpus, ignore_errors=True)
    lines: list[bytes] = []
    for i, name in enumerate(sorted(SCENARIOS)):
        write_scenario(name, corpus / name, nodes=8, seed=seed + i)
    for file in sorted(p for p in corpus.rglob("*") if p.is_file() and p.name != "job.json"):
        lines.extend(line for line in file.read_bytes().splitlines() if line.strip())
    shutil.rmtree(corpus, ignore_errors=True)
    # split the pool into lines the rules match and the rest, with the pure-re scanner
    scanner = Scanner(first_pass_rules(), engine="re")
    blob = b"\n".join(lines) + b"\n"
    matched = {hit.lineno for kind in ("app", "kernel", "syslog") for hit in scanner.scan(blob, kind)}
    rare = sorted({lines[n - 1] for n in matched})
    noise = [line for n, line in enumerate(lines, 1) if n not in matched]
    rng = random.Random(seed)
    target = size_mb * 1_000_000
    written = 0
    with path.open("wb") as out:
        while written < target:
            batch = rng.choices(noise, k=50_000)
            for _ in range(max(1, len(batch) // RARE_EVERY)):
                batch[rng.randrange(len(batch))] = rng.choice(rare)
            chunk = b"\n".join(batch) + b"\n"
            out.write(chunk)
            written += len(chunk)
    return path


def ere_from_python(regex: str) -> str | None:
    """Translate a Python regex to POSIX ERE for grep -E, or None when it cannot be done faithfully.

    Named and non-capturing groups become plain groups, \\d becomes [0-9], lazy quantifiers become
    greedy (same line-level match).  Lookarounds, inline flags, backreferences, multi-line patterns
    and escapes that mean something else inside POSIX brackets are refused.
    """
    out: list[str] = []
    i, n = 0, len(regex)
    in_class = False
    while i < n:
        c = regex[i]
        if in_class:
            if c == "\\" and i + 1 < n:
                e = regex[i + 1]
                mapped = {"d": "0-9", "w": "[:alnum:]_", "s": "[:space:]"}.get(e)
                if mapped:
                    out.append(mapped)
                elif e in "]^-\\" or e.isalnum():
                    return None
                else:
                    out.append(e)
                i += 2
                continue
            if c == "]" and not (out and out[-1] in ("[", "[^")):
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            if regex.startswith("[^", i):
                out.append("[^")
                i += 2
            else:
                out.append("[")
                i += 1
            if i < n and regex[i] == "]":  # a leading ']' is literal in both
                out.append("]")
                i += 1
            continue
        if c == "\\" and i + 1 < n:
            e = regex[i + 1]
            if e == "d":
                out.append("[0-9]")
            elif e == "D":
                out.append("[^0-9]")
            elif e in "wWsSb":
                out.append("\\" + e)
            elif e.isalnum():  # \n, \t, \A, \Z, \1 ... : not in ERE
                return None
            else:
                out.append("\\" + e)
            i += 2
            continue
        if c == "(" and regex.startswith("(?", i):
            m = re.match(r"\(\?P<[A-Za-z_]\w*>|\(\?:", regex[i:])
            if not m:
                return None  # lookaround, inline flags, named backreference, comment
            out.append("(")
            i += len(m.group(0))
            continue
        if c == "?" and out and out[-1] in ("*", "+", "?", "}") and not (len(out) >= 2 and out[-2] == "\\"):
            i += 1  # lazy -> greedy: same verdict for "does this line match"
            continue
        out.append(c)
        i += 1
    if in_class:
        return None
    return "".join(out)


def grep_patterns(rules) -> tuple[list[str], dict[str, int]]:
    patterns: list[str] = []
    skipped: dict[str, int] = {}
    for rule in rules:
        if rule.match.ignore_case:
            skipped["ignore_case"] = skipped.get("ignore_case", 0) + 1
            continue
        ere = ere_from_python(rule.match.regex)
        if ere is None:
            skipped["not expressible in ERE"] = skipped.get("not expressible in ERE", 0) + 1
            continue
        check = subprocess.run(["grep", "-E", "-e", ere, "/dev/null"], capture_output=True, env=_c_env())
        if check.returncode == 2 or check.stderr:
            skipped["rejected by grep -E"] = skipped.get("rejected by grep -E", 0) + 1
            continue
        patterns.append(ere)
    return patterns, skipped


def _c_env() -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    return env


def bench_scan(size_mb: int, repeat: int) -> dict:
    from slurm_attrib.ruleset.scanner import ENGINES, Scanner, best_engine

    t = time.perf_counter()
    path = build_scan_log(size_mb)
    build_s = time.perf_counter() - t
    data = path.read_bytes()
    mb = len(data) / 1e6
    rules = first_pass_rules()
    nlines = data.count(b"\n")
    print(f"scan corpus: {path.relative_to(REPO)}  {mb:.1f} MB, {nlines:,} lines (built/reused in {build_s:.1f} s)")
    print(f"rules: {len(rules)}")

    results: dict[str, dict] = {}
    for engine in ENGINES:
        label = f"scanner ({engine})"
        try:
            scanner = Scanner(rules, engine=engine)
        except ValueError:
            print(f"  {label:24s} skipped: not available (pip install hyperscan)")
            continue
        best, hits = float("inf"), 0
        candidates = len(scanner.candidate_lines(data))
        for _ in range(repeat):
            t = time.perf_counter()
            hits = len(scanner.scan(data, "app"))
            best = min(best, time.perf_counter() - t)
        results[label] = {"seconds": best, "mbps": mb / best, "hits": hits, "candidates": candidates}

    patterns, skipped = grep_patterns(rules)
    pfile = WORK / "patterns.txt"
    pfile.write_text("".join(p + "\n" for p in patterns), encoding="utf-8")
    grep = None
    if patterns:
        best, count = float("inf"), ""
        for _ in range(repeat):
            t = time.perf_counter()
            proc = subprocess.run(["grep", "-c", "-E", "-f", str(pfile), str(path)], capture_output=True, env=_c_env())
            best = min(best, time.perf_counter() - t)
            count = proc.stdout.decode().strip()
        grep = {"seconds": best, "mbps": mb / best, "lines": count}
    skipped_text = ", ".join(f"{v} {k}" for k, v in sorted(skipped.items())) or "none"
    print(f"grep -E patterns: {len(patterns)} of {len(rules)} rule regexes (skipped: {skipped_text}); {pfile.relative_to(REPO)}")
    print()
    print(f"  {'':24s} {'seconds':>8s} {'MB/s':>9s} {'vs grep':>8s}  matches")
    if grep:
        print(f"  {'grep -c -E -f (LC_ALL=C)':24s} {grep['seconds']:8.2f} {grep['mbps']:9.1f} {'1.00x':>8s}  {grep['lines']} lines")
    for label, r in results.items():
        ratio = f"{r['mbps'] / grep['mbps']:.2f}x" if grep else "n/a"
        print(f"  {label:24s} {r['seconds']:8.2f} {r['mbps']:9.1f} {ratio:>8s}  {r['hits']} hits ({r['candidates']} candidate lines)")
    best_label = f"scanner ({best_engine()})"
    ok = None
    if grep and best_label in results:
        ratio = results[best_label]["mbps"] / grep["mbps"]
        ok = ratio >= TARGET_SCAN_RATIO
        print(f"\n  target: {best_label} >= {TARGET_SCAN_RATIO:.0%} of grep's throughput -> {ratio:.0%} {'PASS' if ok else 'MISS'}")
    return {"scanner": results, "grep": grep, "skipped": skipped, "ok": ok}


# --------------------------------------------------------------------------------------------
# (c) end to end: `sattrib analyze` of a large job against `grep -rcE` with the rules' literals


def build_big_job(size_mb: int, nodes: int = 16, scenario: str = "gpu_fell_off_bus", seed: int = 0) -> tuple[Path, dict]:
    """A simulated job inflated to about size_mb MB with noise lines; cached by its parameters.

    Every file of the simulated job keeps its own lines in their order; after each line that no
    rule matches, copies of that line are added (the same timestamp, so the file's clock and every
    rule hit are unchanged), until the job holds size_mb MB spread over its files in proportion
    to their size.
    """
    from slurm_attrib.ruleset.scanner import Scanner
    from slurm_attrib.simulate import write_scenario

    folder = WORK / "jobs" / f"{scenario}-{nodes}n-{size_mb}mb-s{seed}-{_rules_digest()}"
    stamp = folder.parent / f"{folder.name}.truth.json"
    if folder.is_dir() and stamp.is_file():
        return folder, json.loads(stamp.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    truth = write_scenario(scenario, folder, nodes=nodes, ranks_per_node=8, seed=seed)
    scanner = Scanner(first_pass_rules(), engine="re")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "job.json")
    contents = []
    for file in files:
        data = file.read_bytes()
        matched = {hit.lineno for kind in ("app", "kernel", "syslog") for hit in scanner.scan(data, kind)}
        lines = data.splitlines(keepends=True)
        contents.append((file, lines, matched))
    total = sum(len(line) for _, lines, _ in contents for line in lines)
    noise = sum(len(line) for _, lines, matched in contents for n, line in enumerate(lines, 1) if n not in matched)
    copies_per_line = max(0.0, (size_mb * 1_000_000 - total) / max(noise, 1))
    for file, lines, matched in contents:
        owed = 0.0
        parts: list[bytes] = []
        for n, line in enumerate(lines, 1):
            parts.append(line)
            if n in matched or not line.endswith(b"\n"):
                continue
            owed += copies_per_line
            if owed >= 1:
                copies = int(owed)
                parts.append(line * copies)
                owed -= copies
        file.write_bytes(b"".join(parts))
    data = truth.to_dict()
    stamp.write_text(json.dumps(data))
    return folder, data


def literal_patterns(rules) -> list[str]:
    """The rules' `match.contains` literals as POSIX ERE (escaped; caseless letters as [xX])."""
    out = set()
    for rule in rules:
        for literal in rule.match.contains:
            ere = re.sub(r"([][\\.^$*+?(){}|])", r"\\\1", literal)
            if rule.match.ignore_case:
                ere = re.sub(r"[A-Za-z]", lambda m: f"[{m[0].lower()}{m[0].upper()}]", ere)
            out.add(ere)
    return sorted(out)


def _analyze_command(folder: Path) -> list[str]:
    return [sys.executable, "-c", "import sys; from slurm_attrib.cli import main; sys.exit(main())",
            "analyze", str(folder), "--output", os.devnull]


_MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "seconds = time.perf_counter() - t\n"
    "sys.stderr.buffer.write(done.stderr)\n"
    "print(seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode)\n"
)


def _timed(command: list[str], env: dict[str, str]) -> tuple[float, int, subprocess.CompletedProcess]:
    """Wall seconds and peak RSS (KB) of one run of `command`.

    The command runs under a small fresh interpreter that times it and reads RUSAGE_CHILDREN: a
    child forked straight from this process would count this process's pages (the generated data
    it built) in its ru_maxrss.
    """
    proc = subprocess.run([sys.executable, "-c", _MEASURE, *command], capture_output=True, env=env)
    seconds, rss, code = proc.stdout.split()
    return float(seconds), int(rss), subprocess.CompletedProcess(command, int(code), b"", proc.stderr)


def bench_end_to_end(size_mb: int, repeat: int, engines: list[str] | None = None) -> dict:
    from slurm_attrib.ruleset.scanner import available_engines

    t = time.perf_counter()
    folder, truth = build_big_job(size_mb)
    build_s = time.perf_counter() - t
    files = [p for p in folder.rglob("*") if p.is_file()]
    mb = sum(p.stat().st_size for p in files) / 1e6
    for p in files:  # into the page cache for both sides
        with p.open("rb") as f:
            while f.read(1 << 24):
                pass
    pfile = WORK / "literals.ere"
    pfile.write_text("".join(p + "\n" for p in literal_patterns(first_pass_rules())), encoding="utf-8")
    print(f"job: {folder.relative_to(REPO)}  {mb:.1f} MB in {len(files)} files (built/reused in {build_s:.1f} s)")
    print(f"grep patterns: {sum(1 for _ in pfile.open())} rule literals; {pfile.relative_to(REPO)}\n")
    # A wheel's bytecode is compiled when pip installs it; compile this checkout's the same way, or
    # each run (under PYTHONDONTWRITEBYTECODE) would also time compiling every changed module.
    import slurm_attrib

    compileall.compile_dir(Path(slurm_attrib.__file__).parent, quiet=1)
    grep_cmd = ["grep", "-rcE", "-f", str(pfile), str(folder)]
    env = _c_env()
    rows: dict[str, dict] = {}
    best = float("inf")
    for _ in range(repeat):
        seconds, _, _ = _timed(grep_cmd, env)
        best = min(best, seconds)
    grep_s = best
    print(f"  {'':40s} {'seconds':>8s} {'vs grep':>8s} {'peak MB':>8s}")
    print(f"  {'grep -rcE -f literals (LC_ALL=C)':40s} {grep_s:8.2f} {'1.00x':>8s}")
    runs = [(engine, engine, {}) for engine in engines or available_engines()]
    if runs:  # the first engine again, its files scanned by this one process (no worker processes)
        runs.append((f"{runs[0][0]}, 1 process", runs[0][0], {"SATTRIB_SCAN_WORKERS": "1"}))
    for name, engine, extra in runs:
        run_env = dict(os.environ, SATTRIB_SCAN_ENGINE=engine, **extra)
        best, rss, proc = float("inf"), 0, None
        for _ in range(repeat):
            seconds, peak, proc = _timed(_analyze_command(folder), run_env)
            best, rss = min(best, seconds), max(rss, peak)
        label = f"sattrib analyze ({name})"
        if proc.returncode != 0:
            print(f"  {label:40s} failed: {(proc.stderr.decode().strip().splitlines() or ['?'])[-1]}")
            rows[name] = {"error": True}
            continue
        rows[name] = {"seconds": best, "ratio": best / grep_s, "peak_mb": rss / 1024}
        print(f"  {label:40s} {best:8.2f} {best / grep_s:7.2f}x {rss / 1024:8.1f}")
    ok = None
    default = [e for e in rows if e != "re" and "," not in e and "error" not in rows[e]]
    for engine in default:
        print(f"\n  target: analyze ({engine}) <= {TARGET_E2E_RATIO:.0f}x grep -rcE -> {rows[engine]['ratio']:.2f}x "
              f"{'PASS' if rows[engine]['ratio'] <= TARGET_E2E_RATIO else 'MISS'}", end="")
        ok = (ok is not False) and rows[engine]["ratio"] <= TARGET_E2E_RATIO
    print()
    return {"grep": grep_s, "rows": rows, "mb": mb, "truth": truth, "ok": ok}


def bench_memory(size_mb: int) -> dict:
    """Peak RSS of `sattrib analyze` over a generated job of size_mb MB (child's ru_maxrss)."""
    t = time.perf_counter()
    folder, _ = build_big_job(size_mb)
    files = [p for p in folder.rglob("*") if p.is_file()]
    mb = sum(p.stat().st_size for p in files) / 1e6
    biggest = max(p.stat().st_size for p in files) / 1e6
    print(f"job: {folder.relative_to(REPO)}  {mb:.0f} MB in {len(files)} files, largest {biggest:.0f} MB "
          f"(built/reused in {time.perf_counter() - t:.1f} s)")
    seconds, rss, proc = _timed(_analyze_command(folder), dict(os.environ))
    if proc.returncode != 0:
        print(f"  analyze failed: {(proc.stderr.decode().strip().splitlines() or ['?'])[-1]}")
        return {"ok": False}
    peak = rss / 1024
    ok = peak <= TARGET_PEAK_MB
    print(f"  sattrib analyze: {seconds:.2f} s, peak RSS {peak:.1f} MB\n\n"
          f"  target: peak RSS <= {TARGET_PEAK_MB} MB for {mb:.0f} MB of logs -> {'PASS' if ok else 'MISS'}")
    return {"seconds": seconds, "peak_mb": peak, "ok": ok}


# --------------------------------------------------------------------------------------------
# (b) diagnosis time and memory by job size


def _peak_rss_kb() -> int:
    """This process's own peak RSS (VmHWM starts afresh at exec; ru_maxrss keeps the forked parent's)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(path: str) -> None:
    """Run in a subprocess: diagnose one job and print timing, peak RSS and the verdict as JSON."""
    from slurm_attrib.engine.pipeline import analyze_path

    t = time.perf_counter()
    d = analyze_path(Path(path))
    seconds = time.perf_counter() - t
    t = time.perf_counter()
    analyze_path(Path(path))  # again, with the rule pack already compiled (cached in-process)
    warm = time.perf_counter() - t
    print(json.dumps({
        "seconds": seconds,
        "warm": warm,
        "maxrss_kb": _peak_rss_kb(),
        "diagnosis": {k: v for k, v in json.loads(d.model_dump_json()).items() if k in ("domain", "category", "culprit_nodes", "quality", "drain")},
    }))


def job_dir(nodes: int) -> tuple[Path, dict]:
    from slurm_attrib.simulate import write_scenario

    folder = WORK / "jobs" / f"gpu_fell_off_bus-{nodes}n"
    stamp = folder.parent / f"{folder.name}.truth.json"
    if folder.is_dir() and stamp.is_file():
        return folder, json.loads(stamp.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    truth = write_scenario("gpu_fell_off_bus", folder, nodes=nodes, ranks_per_node=8, seed=0)
    data = truth.to_dict()
    stamp.write_text(json.dumps(data))
    return folder, data


def bench_scale(sizes: list[int]) -> dict:
    rows = []
    print(f"  {'nodes':>6s} {'ranks':>6s} {'input MB':>9s} {'gen s':>6s} {'analyze s':>10s} {'warm s':>7s} {'wall s':>7s} {'peak MB':>8s} {'children MB':>11s}  verdict")
    for nodes in sizes:
        t = time.perf_counter()
        folder, truth = job_dir(nodes)
        gen = time.perf_counter() - t
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", str(folder)], capture_output=True, text=True)
        wall = time.perf_counter() - t
        children_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # max over children so far
        if proc.returncode != 0:
            err = (proc.stderr.strip().splitlines() or ["?"])[-1]
            print(f"  {nodes:6d} {nodes * 8:6d} {size:9.1f} {gen:6.2f}   analysis failed: {err}")
            rows.append({"nodes": nodes, "error": err})
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        d = r["diagnosis"]
        drain = sorted(x["node"] for x in d["drain"])
        fits = (d["domain"], d["category"], sorted(d["culprit_nodes"]), drain) == (truth["domain"], truth["category"], truth["culprit_nodes"], truth["drain_nodes"]) and d["quality"] in truth["allowed_qualities"]
        verdict = f"{d['domain']}/{d['category']} {','.join(d['culprit_nodes']) or '-'} ({d['quality']}) {'ok' if fits else 'WRONG, expected ' + truth['category'] + ' ' + ','.join(truth['culprit_nodes'])}"
        peak = r["maxrss_kb"] / 1024
        print(f"  {nodes:6d} {nodes * 8:6d} {size:9.1f} {gen:6.2f} {r['seconds']:10.2f} {r['warm']:7.2f} {wall:7.2f} {peak:8.1f} {children_mb:11.1f}  {verdict}")
        rows.append({"nodes": nodes, "seconds": r["seconds"], "warm": r["warm"], "wall": wall, "peak_mb": peak, "input_mb": size, "fits": fits})
    good = [r for r in rows if "error" not in r]
    ok = None
    if len(good) >= 2:
        a, b = good[0], good[-1]
        dn = b["nodes"] - a["nodes"]
        print(f"\n  growth {a['nodes']}->{b['nodes']} nodes: {(b['warm'] - a['warm']) / dn * 1000:.2f} ms/node (warm), "
              f"{(b['peak_mb'] - a['peak_mb']) / dn * 1024:.0f} KB/node peak RSS")
        for r in good[1:]:
            print(f"    {r['nodes']:5d} nodes: {r['warm'] / r['nodes'] * 1000:.2f} ms/node (warm), {r['warm'] / max(r['input_mb'], 1e-9):.3f} s/MB of input")
        biggest = good[-1]
        if biggest["nodes"] >= 1024:
            ok = biggest["seconds"] <= TARGET_1024_SECONDS
            print(f"\n  target: {biggest['nodes']} nodes in <= {TARGET_1024_SECONDS:.0f} s -> {biggest['seconds']:.2f} s {'PASS' if ok else 'MISS'}")
    if any("error" in r for r in rows):
        ok = False
    return {"rows": rows, "ok": ok}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200, help="size of the scan corpus (default 200)")
    parser.add_argument("--nodes", default="8,128,1024", help="job sizes for the scale benchmark (default 8,128,1024)")
    parser.add_argument("--repeat", type=int, default=3, help="best of N timings for the scan (default 3)")
    parser.add_argument("--e2e-mb", type=int, default=200, help="size of the end-to-end job (default 200)")
    parser.add_argument("--rss-mb", type=int, default=1000, help="size of the peak-memory job (default 1000)")
    parser.add_argument("--engines", default="", help="engines for the end-to-end run (default: every available one)")
    parser.add_argument("--skip-scan", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    WORK.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]} on {os.uname().sysname} {os.uname().machine}, {os.cpu_count()} CPUs\n")
    verdicts = []
    if not args.skip_scan:
        print("== (a) scan throughput vs grep -E ==")
        verdicts.append(bench_scan(args.size_mb, args.repeat)["ok"])
        print()
    if not args.skip_e2e:
        print(f"== (c) end to end: sattrib analyze of a {args.e2e_mb} MB 16-node job vs grep -rcE, per engine ==")
        engines = [e for e in args.engines.split(",") if e.strip()] or None
        verdicts.append(bench_end_to_end(args.e2e_mb, args.repeat, engines)["ok"])
        print()
    if not args.skip_rss:
        print(f"== (d) peak memory: sattrib analyze of {args.rss_mb} MB of logs ==")
        verdicts.append(bench_memory(args.rss_mb)["ok"])
        print()
    if not args.skip_scale:
        print("== (b) diagnosis time and peak memory by job size (gpu_fell_off_bus, 8 ranks/node) ==")
        verdicts.append(bench_scale([int(x) for x in args.nodes.split(",") if x.strip()])["ok"])
    return 1 if args.check and any(v is False for v in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
