"""Fuzz the analysis with hostile inputs: no crash, no hang, no run over 1 GB, no drain from a place
the job's user can write.

    python benchmarks/fuzz_hostile.py [--count 100000] [--seed 0] [--jobs 2] [--timeout 10]
                                      [--memory-mb 1024] [--out benchmarks/_work/fuzz] [--replay N]

One input is one job folder, analysed once (`analyze_path`, what `sattrib analyze` runs, then its
JSON rendering).  Input N is made from (seed, N) alone, by its family (fixed by N % 1000):

  forgery     a rule example that could name hardware, wrapped, in a user-writable place
              (tests/hostile_support: lines x wrappings x places, taken in order)
  mutation    1-30 real log lines (rule examples, tests/data) mutated, in a user-writable place
  random      random bytes, in a user-writable place or a node's dmesg
  timestamps  far past / future / malformed stamps of every format, and in job.json
  job-json    malformed job.json: wrong types, NaN, huge numbers, deep nesting, garbage
  bundle      malformed capture bundles: corrupt gzip, wrong types at random places
  redos       rule literals next to long runs of blanks, digits, brackets (backtracking shapes)
  long-line   one line of 1-4 MB
  hostlist    hostlist bombs in job.json (`a[0-999]b[0-999]c[0-99]`)
  deep        folders 100-3,000 deep
  gzip-bomb   a .gz node file or bundle that inflates to 64 MB-2 GB

`--jobs` worker processes each analyse many inputs in-process; the parent hands them one index at
a time and kills a worker whose input runs past `--timeout` seconds (a hang; the worker is
restarted).  Each worker runs under RLIMIT_AS = `--memory-mb` (a MemoryError is a run over the
limit).  Failures: an exception other than InputError (a crash), a hang, a run over the memory
limit, a drain or a `confirmed` hardware cause from a user-writable place.  The first failures of
each kind are saved under `--out` (the job folder when small, and case.json); `--replay N
--seed S` runs one input here, with its traceback.  Exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import re
import resource
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

WORK = REPO / "benchmarks" / "_work"
FIXED_NOW = 1_796_000_000.0  # 2026-11-29: the jobs' window, so that input N is the same on every run
SAVED_PER_KIND = 5
FAILURES = ("crash", "hang", "memory", "drain")

# family: its share of every 1000 inputs.  Input N takes slot (N x 389) mod 1000, so that any run,
# however short, is a spread of the families (389 is prime to 1000: each block of 1000 inputs
# visits every slot once).
FAMILIES = {
    "forgery": 550, "mutation": 262, "random": 60, "timestamps": 40, "job-json": 40, "bundle": 30,
    "redos": 10, "long-line": 2, "hostlist": 2, "deep": 2, "gzip-bomb": 2,
}
assert sum(FAMILIES.values()) == 1000
_SLOTS = [name for name, share in FAMILIES.items() for _ in range(share)]
_STRIDE = 389


def _block_order() -> list[tuple[str, int]]:
    """For each position in a block of 1000 inputs: its family and its rank among them."""
    seen: Counter = Counter()
    order = []
    for position in range(1000):
        family = _SLOTS[position * _STRIDE % 1000]
        order.append((family, seen[family]))
        seen[family] += 1
    return order


_ORDER = _block_order()


def family_of(index: int) -> tuple[str, int]:
    """The input's family and its ordinal among that family's inputs."""
    family, rank = _ORDER[index % 1000]
    return family, (index // 1000) * FAMILIES[family] + rank


# ------------------------------------------------------------------------------------- material


class Material:
    """What inputs are made of, loaded once per worker."""

    def __init__(self) -> None:
        import hostile_support
        from slurm_attrib.ruleset.loader import load_rules

        self.hs = hostile_support
        self.forged = hostile_support.forgeable_lines()
        rules = load_rules([])
        examples = [e.line for r in rules for e in r.examples.match] + [x for r in rules for x in r.examples.no_match]
        self.lines = examples + _data_lines(limit=20_000)
        self.literals = sorted({lit for r in rules for lit in r.match.contains})
        self.places = list(hostile_support.PLACES)
        self.wrappings = list(hostile_support.WRAPPINGS)
        self.window = hostile_support.window(FIXED_NOW)


def _data_lines(limit: int) -> list[str]:
    """Lines of the test corpus (tests/data), every file's first ones, at most `limit`."""
    lines: list[str] = []
    for path in sorted((REPO / "tests" / "data").rglob("*")):
        if path.is_file() and path.suffix not in (".yaml", ".yml", ".json") and path.stat().st_size < 1 << 20:
            text = path.read_bytes().decode("utf-8", "surrogateescape")
            lines.extend(line for line in text.splitlines()[:40] if line.strip())
        if len(lines) >= limit:
            break
    return lines[:limit]


# ------------------------------------------------------------------------------------- families
# Each builder writes the input's job folder at `root` and returns what it is: {"family", "user":
# True when every line is in a user-writable place (a drain or a confirmed cause is a failure),
# "what": a short description, "lines": lines of log written}.


def _in_place(m: Material, rng: random.Random, root: Path, lines: list[str], family: str, what: str) -> dict:
    place = rng.choice(m.places)
    m.hs.PLACES[place](root, lines, m.window)
    return {"family": family, "user": True, "what": f"{place}: {what}", "lines": len(lines)}


def build_forgery(m: Material, rng: random.Random, root: Path, ordinal: int) -> dict:
    """Ordinal -> (place, line, wrapping): every line in every place first, the wrapping shifting
    each round, so the whole product is covered in places x lines x wrappings inputs."""
    lines, places, wrappings = len(m.forged), len(m.places), len(m.wrappings)
    place = ordinal % places
    line = (ordinal // places) % lines
    wrapping = (ordinal // (lines * places) + line + place) % wrappings
    rule, text = m.forged[line]
    m.hs.PLACES[m.places[place]](root, [m.hs.WRAPPINGS[m.wrappings[wrapping]](text, m.window.when)], m.window)
    return {"family": "forgery", "user": True, "lines": 1,
            "what": f"{m.places[place]}: {rule} [{m.wrappings[wrapping]}]"}


_ODD = ["\x00", "\x1b[2J", "\u202e", "\ufeff", "\udcff", "\r", "\t", "\x7f", "\u2028", "😀", "\\", "%s", "'", '"']


def _mutate(rng: random.Random, line: str, other: str) -> str:
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(line))
        op = rng.randrange(8)
        if op == 0:
            line = line[:at] + rng.choice(_ODD) + line[at:]
        elif op == 1:
            line = line[:at] + line[at + rng.randint(1, 20):]
        elif op == 2:
            piece = line[at:at + rng.randint(1, 12)]
            line = line[:at] + piece * rng.randint(2, 60) + line[at:]
        elif op == 3:
            line = line[:at] + other[rng.randint(0, len(other)):]
        elif op == 4:
            line = "".join(str(rng.choice([0, 9, 99999999999999999999, -1])) if c.isdigit() else c for c in line)
        elif op == 5:
            line = line.replace(" ", rng.choice([" " * rng.randint(2, 30), "\t", "\xa0"]), rng.randint(1, 4))
        elif op == 6:
            line = line.swapcase()
        else:
            line = "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randint(1, 30))) + line
    return line


def build_mutation(m: Material, rng: random.Random, root: Path, ordinal: int) -> dict:
    lines = [_mutate(rng, rng.choice(m.lines), rng.choice(m.lines)) for _ in range(rng.randint(1, 30))]
    lines = [m.hs.WRAPPINGS[rng.choice(m.wrappings)](line, m.window.when) for line in lines]
    return _in_place(m, rng, root, lines, "mutation", f"{len(lines)} mutated lines")


def build_random(m: Material, rng: random.Random, root: Path, ordinal: int) -> dict:
    size = rng.choice([0, 1, 100, 1000, 4096, 65536])
    data = rng.randbytes(size).decode("utf-8", "surrogateescape")
    if rng.random() < 0.5:
        return _in_place(m, rng, root, data.split("\n"), "random", f"{size} random bytes")
    m.hs.PLACES["job-stdout"](root, [], m.window)
    (root / "gpu01" / rng.choice(["dmesg.txt", "syslog", "app.log", "x.gz"])).write_bytes(data.encode("utf-8", "surrogateescape"))
    return {"family": "random", "user": False, "what": f"node file of {size} random bytes", "lines": data.count("\n") + 1}


_EXTREME = [
    "9999-12-31T23:59:59-12:00", "0000-01-01T00:00:00", "0001-01-01T00:00:00+14:00", "2026-02-30T25:61:61",
    "99999-01-01T00:00:00", "2026-12-05T12:00:00.999999999999999999999+00:00", "1970-01-01T00:00:00Z",
    "2026-12-05T12:00:00,999999+99:99", "2026-12-05T12:00:00,123456+00:00", "-001-01-01T00:00:00",
]
_STAMPED = [
    "{iso} gpu01 kernel: {line}", "{iso} {line}", "[99999999999999.999999] {line}", "[-1.000000] {line}",
    "[ nan] {line}", "[1e308] {line}", "Feb 29 24:00:00 gpu01 kernel: {line}", "Dec 99 99:99:99 gpu01 kernel: {line}",
    "E9999 99:99:99.999999 1 x.cc:1] {line}", "Mon 9999-12-31 23:59:59 UTC gpu01 kernel: {line}",
    "[9999-12-31T23:59:59.999] {line}", "<3>1 {iso} gpu01 kernel - - - {line}", "Jan  1 00:00:00 0000 gpu01 kernel: {line}",
]
_JOB_TIMES = [float("nan"), float("inf"), -float("inf"), 1e20, -1e20, 1e308, 0, -62135596800, 10**400, True, [], {},
              "", "nan", "1e20", "9999-12-31T23:59:59-12:00", "0000-01-01", "0001-01-01T00:00:00+14:00", "99999999999"]


def build_timestamps(m: Material, rng: random.Random, root: Path, ordinal: int) -> dict:
    rule, line = rng.choice(m.forged)
    lines = [rng.choice(_STAMPED).format(iso=rng.choice(_EXTREME), line=line) for _ in range(rng.randint(1, 5))]
    if rng.random() < 0.5:
        meta = _in_place(m, rng, root, lines, "timestamps", f"{rule} with extreme stamps")
    else:  # a trusted place: drains are allowed, the stamps must not break the analysis
        m.hs.PLACES["job-stdout"](root, [], m.window)
        (root / "gpu02" / "dmesg.txt").write_text("\n".join(lines) + "\n", errors="surrogateescape")
        meta = {"family": "timestamps", "user": False, "what": f"gpu02/dmesg.txt: {rule} with extreme stamps",
                "lines": len(lines)}
    if rng.random() < 0.5:
        _rewrite_job_json(root, start=rng.choice(_JOB_TIMES), end=rng.choice(_JOB_TIMES))
        meta["what"] += "; extreme job.json times"
    return meta


def _rewrite_job_json(root: Path, **changes) -> None:
    job = json.loads((root / "job.json").read_text())
    job.update(changes)
    (root / "job.json").write_text(json.dumps(job, default=str))


def _odd_value(rng: random.Random, depth: int = 0):
    choice = rng.randrange(12)
    if choice == 0 and depth < 3:
        return [_odd_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if choice == 1 and depth < 3:
        return {str(rng.randint(0, 9)): _odd_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return rng.choice([None, True, -1, 2**70, 1e308, float("nan"), "", "x" * 5000, "gpu[01-04]", "\x00\udcff",
                       "gpu01", ["gpu01", 7], {"a": 1}, -0.0, "NODE_FAIL", "0:9"])


def build_job_json(m: Material, rng: random.Random, root: Path, ordinal: int) -> dict:
    m.hs.PLACES["job-stdout"](root, [], m.window)
    kind = rng.randrange(4)
    if kind == 0:  # every key a strange value
        job = {key: _odd_value(rng) for key in ("job_id", "user", "state", "exit_code", "start", "end", "nodes")
               if rng.random() < 0.7}
        text, what = json.dumps(job, default=str), "odd values"
    elif kind == 1:
        depth = rng.choice([100, 1000, 10_000, 100_000])
        text, what = '{"nodes": ' + "[" * depth + "]" * depth + "}", f"nesting {depth} deep"
    elif kind == 2:
        text = rng.randbytes(rng.randint(0, 2000)).decode("latin-1")
        what = "random bytes"
    else:
        text, what = rng.choice(['{"start": NaN}', '{"end": Infinity}', "[1, 2]", '"x"', "{", '{"nodes": "gpu[1-"}',
                                 '{"nodes": ["gpu01", "gpu01", ""]}', "\ufeff{}", '{"start": 1e999}']), "odd JSON"
    (root / "job.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    return {"family": "job-json", "user": False, "what": f"job.json: {what}", "lines": 0}


def _odd_at_random_place(rng: random.Random, value):
    """The value with one element somewhere inside replaced by an odd one."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(list(value))
        return {**value, key: _odd_at_random_place(rng, value[key])}
    if isinstance(value, list) and value and rng.random() < 0.8:
        at = rng.randrange(len(value))
        return [*value[:at], _odd_at_random_place(rng, value[at]), *value[at + 1:]]
    return _odd_value(rng)


def build_bundle(m: Material, rng: random.Random, root: Path, ordinal: int) -> dict:
    rule, line = rng.choice(m.forged)
    m.hs.PLACES["spool-job-stdout"](root, [line], m.window)
    path = rng.choice(sorted((root / "nodes").iterdir()))
    raw = gzip.decompress(path.read_bytes())
    kind = rng.randrange(4)
    if kind == 0:
        bundle = json.loads(raw)
        for _ in range(rng.randint(1, 4)):
            bundle = _odd_at_random_place(rng, bundle)
        data, what = gzip.compress(json.dumps(bundle, default=str).encode("utf-8", "surrogateescape")), "odd values"
    elif kind == 1:
        data = gzip.compress(raw)
        data, what = data[: rng.randint(0, len(data))], "truncated gzip"
    elif kind == 2:
        data = bytearray(gzip.compress(raw))
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data, what = bytes(data), "corrupt gzip"
    else:
        data, what = gzip.compress(raw[: rng.randint(0, len(raw))]), "truncated JSON"
    path.write_bytes(data)
    if rng.random() < 0.2:
        (root / "job.json").write_text(rng.choice(['{"start": NaN, "end": 1e308}', "[", '{"nodes": [1, null]}']))
    return {"family": "bundle", "user": True, "what": f"{path.name}: {what}", "lines": 1}


_RUNS = [" ", "\t", "0", "a", ":", ".", "-", "x ", "[", "(", "=", "/", "0x", " \t"]


def build_redos(m: Material, rng: random.Random, root: Path, ordinal: int) -> dict:
    literal = rng.choice(m.literals)
    run = rng.choice(_RUNS) * rng.choice([10, 24, 40, 100, 1000, 10_000])
    shapes = [run + literal + "x", literal + run, run + literal + run + literal, literal + run + "!",
              " " * rng.choice([24, 40]) + "ValueError:x"]
    line = rng.choice(shapes)
    return _in_place(m, rng, root, [line], "redos", f"{literal!r} with a run of {len(run)} {run[:2]!r}")


def build_long_line(m: Material, rng: random.Random, root: Path, ordinal: int) -> dict:
    size = rng.choice([1, 2, 4]) << 20
    rule, text = rng.choice(m.forged)
    filler = rng.choice(["x", " ", "a b ", rng.choice(m.literals) + " "])
    line = (filler * (size // len(filler)))[:size] + text
    return _in_place(m, rng, root, [line], "long-line", f"{size >> 20} MB line of {filler!r} then {rule}")


_BOMBS = ["a[0-999]b[0-999]c[0-99]", "gpu[0-99999999]", "n[1-1000000000000]", "x[0-9]" * 12,
          "gpu[" + ",".join(str(i) for i in range(200_000)) + "]", "g[0-99999]h[0-99999]", "[" * 5000 + "]" * 5000]


def build_hostlist(m: Material, rng: random.Random, root: Path, ordinal: int) -> dict:
    bomb = rng.choice(_BOMBS)
    m.hs.PLACES["job-stdout"](root, [f"srun: error: Nodes {bomb} are not responding"], m.window)
    _rewrite_job_json(root, nodes=rng.choice([bomb, [bomb, "gpu01"]]))
    return {"family": "hostlist", "user": True, "what": f"job.json nodes {bomb[:40]!r}", "lines": 1}


def build_deep(m: Material, rng: random.Random, root: Path, ordinal: int) -> dict:
    depth = rng.choice([100, 1000, 3000])
    m.hs.PLACES["job-stdout"](root, [], m.window)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in ["gpu01"] + ["d"] * depth:  # relative to the last folder: no path is ever too long
            if name != "gpu01" or not (root / "gpu01").exists():
                os.mkdir(name, dir_fd=fd)
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with os.fdopen(os.open("dmesg.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("[  1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    finally:
        os.close(fd)
    return {"family": "deep", "user": False, "what": f"gpu01/ with folders {depth} deep", "lines": 1}


_BOMB_CACHE: dict[int, bytes] = {}


def _gzip_of_zeros(size: int) -> bytes:
    """A gzip member of `size` zero bytes (about 1/1000 of that on disk), made once per worker."""
    if size not in _BOMB_CACHE:
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        block = b"\0" * (1 << 20)
        _BOMB_CACHE[size] = b"".join(z.compress(block) for _ in range(size >> 20)) + z.flush()
    return _BOMB_CACHE[size]


def build_gzip_bomb(m: Material, rng: random.Random, root: Path, ordinal: int) -> dict:
    size = rng.choice([64, 512, 2048]) << 20
    m.hs.PLACES["job-stdout"](root, [], m.window)
    (root / "gpu01" / "dmesg.gz").write_bytes(_gzip_of_zeros(size))
    return {"family": "gzip-bomb", "user": False, "what": f"gpu01/dmesg.gz inflating to {size >> 20} MB", "lines": 0}


BUILDERS = {
    "forgery": build_forgery, "mutation": build_mutation, "random": build_random, "timestamps": build_timestamps,
    "job-json": build_job_json, "bundle": build_bundle, "redos": build_redos, "long-line": build_long_line,
    "hostlist": build_hostlist, "deep": build_deep, "gzip-bomb": build_gzip_bomb,
}
assert set(BUILDERS) == set(FAMILIES)


# ------------------------------------------------------------------------------------ one input


def build(m: Material, seed: int, index: int, root: Path) -> dict:
    family, ordinal = family_of(index)
    rng = random.Random(f"{seed}/{index}")
    meta = BUILDERS[family](m, rng, root, ordinal)
    return {"index": index, **meta}


def judge(m: Material, root: Path, meta: dict) -> dict:
    """Analyse the folder: the outcome (ok, input-error, crash, memory, drain) and its detail."""
    from slurm_attrib.engine.pipeline import analyze_path
    from slurm_attrib.errors import InputError

    try:
        diagnosis = analyze_path(root)
        json.dumps(diagnosis.model_dump(mode="json"))  # what `sattrib analyze --format json` prints
    except InputError as exc:
        return {"outcome": "input-error", "detail": str(exc)[:300]}
    except MemoryError:
        return {"outcome": "memory", "detail": "MemoryError"}
    except BaseException as exc:  # noqa: BLE001 - counting them is the point
        if isinstance(exc, KeyboardInterrupt):
            raise
        tail = traceback.format_exc().splitlines()[-8:]
        return {"outcome": "crash", "detail": f"{type(exc).__name__}: {str(exc)[:300]}", "traceback": tail,
                "where": _raised_at(exc)}
    if meta["user"] and (diagnosis.drain or m.hs.hardware_verdict(diagnosis)):
        drains = ",".join(d.node for d in diagnosis.drain) or "-"
        return {"outcome": "drain", "detail": f"{diagnosis.domain}/{diagnosis.category} {diagnosis.quality} drain={drains}"}
    return {"outcome": "ok", "detail": ""}


def _raised_at(exc: BaseException) -> str:
    """The project's deepest frame of the exception: `slurm_attrib/x.py:LINE function`."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/slurm_attrib/" in f.filename] or frames[-1:]
    if not ours:
        return "?"
    frame = ours[-1]
    return f"{frame.filename.split('/slurm_attrib/')[-1] if '/slurm_attrib/' in frame.filename else frame.filename}:" \
           f"{frame.lineno} {frame.name}"


def remove(root: Path) -> None:
    """shutil.rmtree recurses once per folder level: the deep inputs need rm."""
    try:
        shutil.rmtree(root)
    except FileNotFoundError:
        pass
    except (RecursionError, OSError):
        subprocess.run(["rm", "-rf", "--", str(root)], check=False)


def run_one(m: Material, seed: int, index: int, scratch: Path) -> dict:
    root = scratch / f"in-{index}"
    started = time.perf_counter()
    try:
        meta = build(m, seed, index, root)
        result = {**meta, **judge(m, root, meta)}
    except MemoryError:
        result = {"index": index, "family": family_of(index)[0], "outcome": "memory", "detail": "MemoryError (building)"}
    finally:
        remove(root)
    result["seconds"] = round(time.perf_counter() - started, 4)
    return result


# ---------------------------------------------------------------------------------------- worker


def worker_main(seed: int, memory_mb: int, scratch: Path) -> None:
    """Read indices from stdin, one per line; write one JSON result per line."""
    limit = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    m = Material()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        print(json.dumps(run_one(m, seed, int(line), scratch), default=str), flush=True)


class Worker:
    def __init__(self, args, scratch: Path, number: int):
        self.log = open(scratch / f"worker-{number}.stderr", "ab")
        argv = [sys.executable, __file__, "--worker", "--seed", str(args.seed), "--memory-mb", str(args.memory_mb),
                "--scratch", str(scratch)]
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.index: int | None = None
        self.since = 0.0
        self.buffer = b""
        self.ready = False

    def give(self, index: int) -> None:
        self.index, self.since = index, time.monotonic()
        self.process.stdin.write(b"%d\n" % index)
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.log.close()


def stderr_tail(worker: Worker) -> str:
    try:
        lines = Path(worker.log.name).read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-3:])[:400]


# ---------------------------------------------------------------------------------------- parent


class Tally:
    def __init__(self, out: Path, seed: int):
        self.out, self.seed = out, seed
        self.outcomes: Counter = Counter()
        self.by_family: dict[str, Counter] = {}
        self.lines = 0
        self.failed: list[dict] = []
        self.saved: Counter = Counter()
        self.slowest: list[tuple[float, int, str]] = []
        self.seconds = 0.0
        self.interrupted = False
        self.family_seconds: Counter = Counter()

    def add(self, result: dict, m: Material | None) -> None:
        outcome = result["outcome"]
        self.outcomes[outcome] += 1
        self.by_family.setdefault(result.get("family", "?"), Counter())[outcome] += 1
        self.family_seconds[result.get("family", "?")] += result.get("seconds", 0.0)
        self.lines += result.get("lines", 0)
        self.slowest = sorted([*self.slowest, (result.get("seconds", 0.0), result["index"], result.get("family", "?"))],
                              reverse=True)[:5]
        if outcome in FAILURES:
            self.failed.append(result)
            if self.saved[outcome] < SAVED_PER_KIND:
                self.saved[outcome] += 1
                self.save(result, m)

    def save(self, result: dict, m: Material | None) -> None:
        """case.json, and the input's folder again when it is small (rebuilt here from seed and index)."""
        folder = self.out / f"{result['outcome']}-{result['index']}"
        folder.mkdir(parents=True, exist_ok=True)
        replay = f"python benchmarks/fuzz_hostile.py --seed {self.seed} --replay {result['index']}"
        (folder / "case.json").write_text(json.dumps({**result, "replay": replay}, indent=1, default=str) + "\n")
        if m is not None and result.get("family") not in ("deep", "gzip-bomb", "long-line", "hostlist"):
            try:
                build(m, self.seed, result["index"], folder / "job")
            except Exception as exc:  # noqa: BLE001 - the case.json is enough to replay
                (folder / "not-rebuilt.txt").write_text(f"{type(exc).__name__}: {exc}\n")


class Pool:
    """The workers: each is handed one input index at a time; one past the timeout is killed
    (a hang) and replaced, one that dies is replaced (its input a crash, or memory)."""

    def __init__(self, args, scratch: Path, tally: Tally, material: Material):
        self.args, self.scratch, self.tally, self.material = args, scratch, tally, material
        self.todo = list(reversed(range(args.start, args.start + args.count)))
        self.selector = selectors.DefaultSelector()
        self.workers: list[Worker] = []
        self.spawned = 0

    def spawn(self) -> None:
        worker = Worker(self.args, self.scratch, self.spawned)
        self.spawned += 1
        self.workers.append(worker)
        self.selector.register(worker.process.stdout, selectors.EVENT_READ, worker)

    def retire(self, worker: Worker, replace: bool = False) -> None:
        self.selector.unregister(worker.process.stdout)
        self.workers.remove(worker)
        worker.stop()
        if replace and self.todo:
            self.spawn()

    def failed(self, worker: Worker, outcome: str, detail: str) -> None:
        self.tally.add({"index": worker.index, "family": family_of(worker.index)[0], "outcome": outcome,
                        "detail": detail, "seconds": time.monotonic() - worker.since}, self.material)

    def kill_hangs(self) -> None:
        now = time.monotonic()
        for worker in list(self.workers):
            if worker.index is not None and now - worker.since > self.args.timeout:
                self.failed(worker, "hang", f"over {self.args.timeout:g} s")
                self.retire(worker, replace=True)

    def read(self, worker: Worker) -> None:
        chunk = os.read(worker.process.stdout.fileno(), 1 << 16)
        if not chunk:
            if worker.index is not None:
                tail = stderr_tail(worker)
                outcome = "memory" if "MemoryError" in tail or "bad_alloc" in tail else "crash"
                self.failed(worker, outcome, f"worker died (exit {worker.process.poll()}): {tail}")
            self.retire(worker, replace=True)
            return
        worker.buffer += chunk
        while b"\n" in worker.buffer:
            line, worker.buffer = worker.buffer.split(b"\n", 1)
            message = json.loads(line)
            if worker.index is not None and time.monotonic() - worker.since > self.args.timeout:
                message = {**message, "outcome": "hang", "detail": f"over {self.args.timeout:g} s (finished late)"}
            if "ready" not in message:
                self.tally.add(message, self.material)
            worker.index = None
            if not self.todo:
                self.retire(worker)
                return
            worker.give(self.todo.pop())

    def run(self) -> None:
        for _ in range(self.args.jobs):
            self.spawn()
        started = last = time.monotonic()
        try:
            while self.workers:
                self.kill_hangs()
                for key, _ in self.selector.select(timeout=min(0.2, self.args.timeout / 2)):
                    if key.data in self.workers:
                        self.read(key.data)
                if time.monotonic() - last > 30:
                    last = time.monotonic()
                    print(f"  {sum(self.tally.outcomes.values()):,} inputs, {len(self.tally.failed)} failures, "
                          f"{last - started:.0f} s", file=sys.stderr)
        finally:
            for worker in list(self.workers):
                worker.stop()


def run(args) -> Tally:
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    scratch = Path(tempfile.mkdtemp(prefix="sattrib-fuzz-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
    tally = Tally(out, args.seed)
    started = time.monotonic()
    try:
        Pool(args, scratch, tally, Material()).run()  # the parent's Material rebuilds failing inputs to save them
    except KeyboardInterrupt:
        tally.interrupted = True
    finally:
        remove(scratch)
    tally.seconds = time.monotonic() - started
    return tally


def signature(result: dict) -> str:
    """What a failure is, without its particulars: crashes by exception and the frame that raised it."""
    outcome, family = result["outcome"], result.get("family", "?")
    if outcome == "drain":
        return f"drain from {result.get('what', '?').split(':')[0]} ({family})"
    if outcome != "crash":
        return f"{outcome} ({family})"
    exception = re.sub(r"\d+", "N", result.get("detail", ""))[:70]
    return f"crash {exception} at {result.get('where', '?')}"


def report(tally: Tally, args) -> None:
    total = sum(tally.outcomes.values())
    print(f"fuzz_hostile: {total:,} inputs (seed {args.seed}, {args.jobs} workers, timeout {args.timeout:g} s, "
          f"RLIMIT_AS {args.memory_mb} MB) in {tally.seconds:.0f} s" + (", INTERRUPTED" if tally.interrupted else ""))
    print(f"one input = one job folder analysed once; together they held {tally.lines:,} log lines")
    print()
    kinds = ["ok", "input-error", *FAILURES]
    print(f"| {'family':<11} | " + " | ".join(f"{k:>11}" for k in kinds) + " | ms/input |")
    print(f"| {'-' * 11} | " + " | ".join("-" * 10 + ":" for _ in kinds) + " | -------: |")
    for family in FAMILIES:
        counts = tally.by_family.get(family, Counter())
        mean = 1000 * tally.family_seconds[family] / max(1, sum(counts.values()))
        print(f"| {family:<11} | " + " | ".join(f"{counts[k]:>11,}" for k in kinds) + f" | {mean:8.1f} |")
    mean = 1000 * sum(tally.family_seconds.values()) / max(1, total)
    print(f"| {'total':<11} | " + " | ".join(f"{tally.outcomes[k]:>11,}" for k in kinds) + f" | {mean:8.1f} |")
    print()
    print("slowest inputs: " + ", ".join(f"#{i} {f} {s:.2f} s" for s, i, f in tally.slowest))
    kinds = Counter(signature(result) for result in tally.failed)
    if kinds:
        print("\nfailures by kind (crash: exception and where; drain: place; hang, memory: family):")
        for kind, count in kinds.most_common(25):
            print(f"  {count:>7,}  {kind}")
    if tally.failed:
        print(f"\nfirst failures (saved under {tally.out}, at most {SAVED_PER_KIND} of each kind):")
        for result in tally.failed[:12]:
            print(f"  #{result['index']} {result['outcome']} [{result.get('family')}] {result.get('what', '')}: "
                  f"{result['detail']}"[:300])


def replay(args) -> int:
    m = Material()
    scratch = Path(tempfile.mkdtemp(prefix="sattrib-fuzz-replay-"))
    root = scratch / "job"
    meta = build(m, args.seed, args.replay, root)
    print(json.dumps(meta, default=str))
    from slurm_attrib.engine.pipeline import analyze_path

    try:
        diagnosis = analyze_path(root)
        print(f"{diagnosis.domain}/{diagnosis.category} {diagnosis.quality} culprits={diagnosis.culprit_nodes} "
              f"drain={[d.node for d in diagnosis.drain]}")
    finally:
        print(f"input kept in {root}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--start", type=int, default=0, help="first input index (to split a run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per input before it counts as a hang")
    parser.add_argument("--memory-mb", type=int, default=1024, help="RLIMIT_AS of each worker")
    parser.add_argument("--out", default=str(WORK / "fuzz"), help="where failing inputs are saved")
    parser.add_argument("--replay", type=int, help="build and analyse input N here, with its traceback")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args.seed, args.memory_mb, Path(args.scratch))
        return 0
    if args.replay is not None:
        return replay(args)
    tally = run(args)
    report(tally, args)
    return 1 if tally.failed or tally.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
