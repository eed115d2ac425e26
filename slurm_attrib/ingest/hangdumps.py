"""Which rank a hang started from, read from stack and flight-recorder dumps.

When a job hangs, the logs often hold only collective timeouts, which every rank prints.  Three
kinds of dumps tell which rank is different:

* PyTorch flight-recorder (FR) dumps, pickle or JSON (`TORCH_NCCL_DUMP_ON_TIMEOUT`, files
  `nccl_trace_rank_<rank>` and the like, anywhere in a logs-layout directory, read from disk with
  the restricted loader of capture.frdump: no code from a dump ever runs), or the
  `sattrib-fr ...` summary lines the node epilog wrote into the bundle;
* the text report of `torchfrtrace` / `fr_trace` ("missing ranks: {1}", "Missing ranks are
  {1}", "Culprit rank 3; ...");
* py-spy dumps (`py-spy dump --pid N`), one per rank, in one file or one file per rank.

Rules of judgement (hang_finding):
  1. FR, per process group: a rank whose collectives (for each process group: the highest
     enqueued, else started, else completed collective_seq_id) are behind all other ranks' is the
     suspect; collectives with the same seq id but a different op or input sizes name the ranks
     that differ from the majority (checked first: a mismatch is the stronger evidence).
  2. torchfrtrace report: the missing / culprit ranks it names.
  3. py-spy: when (nearly) all ranks' main threads wait in a collective and one or two are
     elsewhere (forward, a data-loader wait, another collective), those are the suspects.
  At most two suspects; more, or sources naming different ranks, give None.  Never raises: a
  corrupt dump gives None.
"""

from __future__ import annotations

import gzip
import os
import re
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from slurm_attrib.capture import frdump
from slurm_attrib.ingest.types import Evidence, SourceFile

MAX_SUSPECTS = 2
MAX_FR_FILES = 4096
MAX_FR_TOTAL = 1024 * 1024 * 1024
MAX_SCAN_BYTES = 32 * 1024 * 1024  # a text file larger than this is scanned only with a telling name
MAX_DUMPS = 100_000
TELLING_NAME = re.compile(r"py-?spy|stack|dump|hang|trace|flight|fr[_-]", re.I)


@dataclass
class HangFinding:
    ranks: list[int]
    nodes: list[str]
    reason: str
    evidence: list[tuple[str, int, str]] = field(default_factory=list)
    # lagging: behind the others (did not join); mismatch: a different collective (op or sizes)
    # than the others, a desync in the program; stack: elsewhere than the others (py-spy)
    kind: str = "lagging"


def hang_finding(evidence: Evidence, rank_nodes: dict[int, str] | None = None) -> HangFinding | None:
    """The rank(s) a hang started from, when the dumps single them out; None otherwise.

    `rank_nodes` (optional): rank -> node, e.g. from NCCL init lines, to name the nodes of
    suspects whose dumps do not say where they ran."""
    try:
        return _finding(evidence, dict(rank_nodes or {}))
    except Exception:  # noqa: BLE001 - a dump never breaks the diagnosis
        return None


def _finding(evidence: Evidence, rank_nodes: dict[int, str]) -> HangFinding | None:
    fr = _FrCollector()
    texts: list[tuple[SourceFile, list[tuple[int, str]]]] = []
    for source in evidence.files:
        if _collect_fr_file(evidence, source, fr):
            continue
        lines, pyspy = _interesting_lines(source)
        if lines or pyspy:
            texts.append((source, lines, pyspy))
    report_lines: list[tuple[str, int, str, list[int]]] = []
    dumps: list[_Dump] = []
    for source, lines, pyspy in texts:
        for lineno, text in lines:
            if frdump.PREFIX in text:
                parsed = frdump.parse_line(text)
                if parsed:
                    fr.add_line(source, lineno, text, *parsed)
                continue
            named = _report_ranks(text)
            if named is not None:
                report_lines.append((source.rel, lineno, text.strip(), named))
        if pyspy:
            dumps.extend(_pyspy_dumps(source, evidence))
    findings = [f for f in (fr.finding(), _report_finding(report_lines), _pyspy_finding(dumps)) if f]
    if not findings:
        return None
    ranks = findings[0].ranks
    if any(f.ranks != ranks for f in findings[1:]):
        return None  # the dumps disagree
    first = findings[0]
    for other in findings[1:]:
        first.evidence.extend(e for e in other.evidence if e not in first.evidence)
        first.nodes = sorted(set(first.nodes) | set(other.nodes))
    if not first.nodes:
        first.nodes = sorted({rank_nodes[r] for r in ranks if r in rank_nodes})
    elif rank_nodes:
        first.nodes = sorted(set(first.nodes) | {rank_nodes[r] for r in ranks if r in rank_nodes})
    return first


def _rank_list(ranks: list[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def _plural(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_rank_list(ranks)}"


# ------------------------------------------------------------------------------ flight recorder


@dataclass
class _RankPg:
    state: frdump.PgState
    where: tuple[str, int, str]  # evidence for this rank's status in this group
    node: str | None


class _FrCollector:
    def __init__(self) -> None:
        self.groups: dict[str, dict[int, _RankPg]] = {}
        self.bytes = 0
        self.files = 0

    def add_state(self, rank: int, state: frdump.PgState, where: tuple[str, int, str], node: str | None,
                  status: bool = True) -> None:
        group = self.groups.setdefault(state.pg, {})
        known = group.get(rank)
        if known is None:
            if not status and not state.entries:
                return
            group[rank] = _RankPg(state, where, node)
            return
        if known.node is None:
            known.node = node
        if status:
            for attr in ("last_enqueued", "last_started", "last_completed", "frontier"):
                if getattr(state, attr) is not None and getattr(known.state, attr) is None:
                    setattr(known.state, attr, getattr(state, attr))
            known.state.name = known.state.name or state.name
        for seq, value in state.entries.items():
            known.state.entries.setdefault(seq, value)

    def add_line(self, source: SourceFile, lineno: int, text: str, rank: int, state: frdump.PgState, status: bool) -> None:
        self.add_state(rank, state, (source.rel, lineno, text.strip()), source.node, status)

    def finding(self) -> HangFinding | None:
        mismatch = self._mismatch()
        if mismatch is not None:
            return mismatch
        return self._lagging()

    def _node_of(self, ranks: list[int]) -> list[str]:
        nodes = set()
        for group in self.groups.values():
            for rank in ranks:
                if rank in group and group[rank].node:
                    nodes.add(group[rank].node)
        return sorted(nodes)

    def _mismatch(self) -> HangFinding | None:
        suspects: set[int] = set()
        evidence: list[tuple[str, int, str]] = []
        reasons = []
        for pg in sorted(self.groups, key=lambda k: (len(k), k)):
            group = self.groups[pg]
            if len(group) < 3:
                continue
            seqs = sorted({s for g in group.values() for s in g.state.entries})
            for seq in seqs:
                sigs = {r: g.state.entries[seq][:2] for r, g in group.items()
                        if seq in g.state.entries and "?" not in g.state.entries[seq][:2]}
                if len(sigs) < 3:
                    continue
                counts = Counter(sigs.values())
                (major, count), = counts.most_common(1)
                odd = sorted(r for r, s in sigs.items() if s != major)
                if not odd or count * 2 <= len(sigs) or len(odd) > MAX_SUSPECTS:
                    continue
                suspects.update(odd)
                op, sizes = major
                other = sigs[odd[0]]
                reasons.append(f"collective {seq} of process group {pg} is {other[0]} {other[1]} on "
                               f"{_plural(odd)} but {op} {sizes} on the {count} other rank(s)")
                evidence.extend(group[r].where for r in odd)
                evidence.append(group[next(r for r, s in sigs.items() if s == major)].where)
                break  # the first mismatch of a group is its origin
        if not suspects or len(suspects) > MAX_SUSPECTS:
            return None
        ranks = sorted(suspects)
        return HangFinding(ranks, self._node_of(ranks), f"Flight recorder: {reasons[0]}.", _unique(evidence), "mismatch")

    def _lagging(self) -> HangFinding | None:
        suspects: set[int] = set()
        evidence: list[tuple[str, int, str]] = []
        reasons = []
        for pg in sorted(self.groups, key=lambda k: (len(k), k)):
            group = self.groups[pg]
            if len(group) < 2:
                continue
            for attr, label in (("last_enqueued", "enqueued"), ("last_started", "started"),
                                ("last_completed", "completed")):
                values = {r: getattr(g.state, attr) for r, g in group.items() if getattr(g.state, attr) is not None}
                if len(values) < 2 or len(set(values.values())) == 1:
                    continue
                low = min(values.values())
                behind = sorted(r for r, v in values.items() if v == low)
                ahead = [r for r in values if r not in behind]
                if len(behind) > MAX_SUSPECTS or len(ahead) < len(behind) or (len(behind) == 2 and len(ahead) < 3):
                    break  # this group singles out nobody
                suspects.update(behind)
                others = sorted({values[r] for r in ahead})
                shown = str(others[0]) if len(others) == 1 else f"{others[0]}-{others[-1]}"
                name = next((g.state.name for g in group.values() if g.state.name), "")
                reasons.append(f"{_plural(behind)} {'is' if len(behind) == 1 else 'are'} behind in process group "
                               f"{pg}{' (' + name + ')' if name else ''}: last {label} collective {low}, "
                               f"{shown} on the {len(ahead)} other rank(s)")
                evidence.extend(group[r].where for r in behind)
                evidence.append(group[min(ahead)].where)
                break
        if not suspects or len(suspects) > MAX_SUSPECTS:
            return None
        ranks = sorted(suspects)
        return HangFinding(ranks, self._node_of(ranks), f"Flight recorder: {reasons[0]}.", _unique(evidence))


def _unique(items: list) -> list:
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def _collect_fr_file(evidence: Evidence, source: SourceFile, fr: _FrCollector) -> bool:
    """A flight-recorder dump file of a logs layout, read from disk; True when it is one (even a
    corrupt one, which then adds nothing)."""
    rank = frdump.rank_from_name(source.rel)
    if rank is None or fr.files >= MAX_FR_FILES:
        return False
    path = Path(evidence.root) / source.rel
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_size > frdump.MAX_DUMP_BYTES or fr.bytes + info.st_size > MAX_FR_TOTAL:
        return False
    data = _read_capped(path, frdump.MAX_DUMP_BYTES)
    if data is None or not frdump.looks_like_dump(data[:64]):
        return False
    fr.files += 1
    fr.bytes += len(data)
    dump = frdump.load_dump(data)
    del data
    if dump is None:
        return True
    for state in frdump.summarise(dump):
        text = (f"flight recorder dump of rank {rank}: process group {state.pg}"
                f"{' (' + state.name + ')' if state.name else ''} last enqueued {state.last_enqueued},"
                f" started {state.last_started}, completed {state.last_completed}")
        if state.frontier is not None and state.frontier in state.entries:
            op, sizes, st = state.entries[state.frontier]
            text += f"; collective {state.frontier} {op} {st} input sizes {sizes}"
        fr.add_state(rank, state, (source.rel, 1, text), source.node)
    return True


def _read_capped(path: Path, cap: int) -> bytes | None:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as raw:
            head = raw.read(2)
            raw.seek(0)
            if head == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=raw) as unzipped:
                    data = unzipped.read(cap + 1)
            else:
                data = raw.read(cap + 1)
    except (OSError, EOFError, ValueError):
        return None
    return data if len(data) <= cap else None


# ------------------------------------------------------------------------------ text sources


_MARKERS = (frdump.PREFIX.encode(), b"issing ranks", b"Culprit rank", b"Process ")
_MARKED_LINE = re.compile(rb"^.*(?:sattrib-fr |[Mm]issing ranks|Culprit rank ).*$", re.M)
_PROCESS_AT = re.compile(rb"Process \d+: ")
_LINE_PREFIX = re.compile(rb"(?:\s*\d{1,6}:\s|\[rank\d{1,6}\]:\s?)?")
MAX_MARKED = 100_000


def _interesting_lines(source: SourceFile) -> tuple[list[tuple[int, str]], bool]:
    """(original line, text) of the report and summary lines, and whether the source holds a
    py-spy `Process N:` line: cheap literal checks per block; large files without a telling name
    are not read again."""
    if source.content_size() > MAX_SCAN_BYTES and not TELLING_NAME.search(source.rel):
        return [], False
    out: list[tuple[int, str]] = []
    pyspy = False
    lineno = 0  # lines before the block
    for block in source.blocks():
        if not pyspy and b"Process " in block:
            pyspy = _has_process_line(block)
        if any(m in block for m in _MARKERS[:3]) and len(out) < MAX_MARKED:
            counted, at = lineno, 0
            for found in _MARKED_LINE.finditer(block):
                counted += block.count(b"\n", at, found.start())
                at = found.start()
                out.append((source.original_line(counted + 1), found.group(0)[:4096].decode("utf-8", "replace")))
                if len(out) >= MAX_MARKED:
                    break
        lineno += block.count(b"\n")
    return out, pyspy


def _has_process_line(block: bytes) -> bool:
    """A py-spy `Process N: cmd` line (maybe behind an srun -l or [rankN]: label)."""
    for found in _PROCESS_AT.finditer(block):
        start = block.rfind(b"\n", 0, found.start()) + 1
        if _LINE_PREFIX.fullmatch(block, start, found.start()):
            return True
    return False


# torchfrtrace / fr_trace report lines
_MISSING = re.compile(r"[Mm]issing ranks(?: are|:)\s*\{([\d,\s]+)\}")
_CULPRIT = re.compile(r"Culprit rank (\d+)")


def _report_ranks(text: str) -> list[int] | None:
    found = _MISSING.search(text)
    if found:
        return sorted({int(x) for x in re.findall(r"\d+", found.group(1))})
    culprits = _CULPRIT.findall(text)
    if culprits:
        return sorted({int(x) for x in culprits})
    return None


def _report_finding(lines: list[tuple[str, int, str, list[int]]]) -> HangFinding | None:
    if not lines:
        return None
    named = sorted({r for *_, ranks in lines for r in ranks})
    if not named or len(named) > MAX_SUSPECTS:
        return None
    missing = any("issing ranks" in text for _, _, text, _ in lines)
    what = "did not join a collective" if missing else "differ from the others in a collective"
    reason = f"The flight-recorder analysis (torchfrtrace) reports that {_plural(named)} {what}."
    evidence = _unique([(rel, n, text) for rel, n, text, _ in lines])[:6]
    return HangFinding(named, [], reason, evidence, "lagging" if missing else "mismatch")


# ------------------------------------------------------------------------------ py-spy

_PREFIX = re.compile(r"^(?:\s*(\d{1,6}):\s|\[rank(\d{1,6})\]:\s?)")
_PROCESS = re.compile(r"^Process (\d+): (.*)$")
_PYTHON = re.compile(r"^Python v\d")
_THREAD = re.compile(r"^Thread (?:0x[0-9A-Fa-f]+|\d+) \((active|idle)[^)]*\)(?:: \"(.*)\")?")
_FRAME = re.compile(r"^\s+(\S.*?) \((.+?):(\d+)\)\s*$")
_HOST = re.compile(
    r"^\s*(?:={2,}>?|-{2,}|#{1,3}|==>)\s*(?:host(?:name)?[:=]?\s*|node[:=]?\s*)?([A-Za-z][\w.-]*?)\s*(?:={2,}|-{2,}|<==|:)?\s*$"
    r"|^\s*\[([A-Za-z][\w.-]*)\]\s*$|^([A-Za-z][\w.-]*\d[\w.-]*):\s*$"
)
_GLOBAL_RANK = re.compile(r"\[rank(\d+)\]|\bRANK=(\d+)|--(?:node_|global_)?rank[= ](\d+)")
_LOCAL_RANK = re.compile(r"--local[_-]rank[= ](\d+)|\bLOCAL_RANK=(\d+)")
_FILE_RANK = re.compile(r"rank[_-]?(\d{1,6})", re.I)
_NOT_HOSTS = {"pid", "process", "thread", "python", "traceback", "arguments", "locals"}


def _strip(text: str) -> tuple[str, int | None]:
    found = _PREFIX.match(text)
    if not found:
        return text, None
    label = found.group(1) or found.group(2)
    return text[found.end():], int(label)


@dataclass
class _Dump:
    rel: str
    line: int
    text: str  # the Process line
    node: str | None
    rank: int | None  # global rank when the dump says so
    local: int | None
    label: int | None  # srun -l / [rankN]: prefix
    host: str | None
    index: int  # position in its file
    host_index: int  # position under its host header
    threads: list[tuple[str, str, list[tuple[str, str, int, str]]]] = field(default_factory=list)
    frames_at: list[int] = field(default_factory=list)

    def main_stack(self) -> list[tuple[str, str, int, str]]:
        for name, _state, frames in self.threads:
            if name == "MainThread":
                return frames
        for _name, state, frames in self.threads:
            if state == "active" and frames:
                return frames
        return self.threads[0][2] if self.threads else []


def _pyspy_dumps(source: SourceFile, evidence: Evidence) -> list[_Dump]:
    job_nodes = set(evidence.job.nodes)
    dumps: list[_Dump] = []
    host: str | None = None
    host_count: dict[str | None, int] = {}
    current: _Dump | None = None
    expect_python = False
    pending_host: str | None = None
    for lineno, raw in _all_lines(source):
        body, label = _strip(raw)
        process = _PROCESS.match(body)
        if process:
            current = None
            expect_python = True
            pending = (lineno, raw, body, label, process)
            continue
        if expect_python:
            expect_python = False
            if _PYTHON.match(body):
                lineno0, raw0, body0, label0, proc = pending
                if pending_host is not None:
                    host = pending_host
                    pending_host = None
                cmd = proc.group(2)
                g = _GLOBAL_RANK.search(cmd)
                loc = _LOCAL_RANK.search(cmd)
                index = len(dumps)
                current = _Dump(
                    rel=source.rel, line=lineno0, text=raw0.strip(), node=source.node, host=host,
                    rank=int(next(x for x in g.groups() if x)) if g else None,
                    local=int(next(x for x in loc.groups() if x)) if loc else None,
                    label=label0, index=index, host_index=host_count.get(host, 0),
                )
                host_count[host] = host_count.get(host, 0) + 1
                dumps.append(current)
                if len(dumps) > MAX_DUMPS:
                    return []
            continue
        thread = _THREAD.match(body)
        if thread and current is not None:
            current.threads.append((thread.group(2) or "", thread.group(1), []))
            continue
        frame = _FRAME.match(body)
        if frame and current is not None and current.threads:
            current.threads[-1][2].append((frame.group(1), frame.group(2), int(frame.group(3)), raw.strip()))
            current.frames_at.append(lineno)
            continue
        named = _HOST.match(body)
        if named:
            name = next((x for x in named.groups() if x), None)
            if (name and name.lower() not in _NOT_HOSTS and not re.fullmatch(r"(?i)(?:local_?)?rank\d*", name)
                    and (name in job_nodes or re.search(r"\d", name))):
                pending_host = name.split(".", 1)[0]
                current = None
    _assign_ranks(dumps, source)
    return dumps


def _all_lines(source: SourceFile):
    """Every line of the source, with its original line number."""
    lineno = 0
    for block in source.blocks():
        for raw in block.split(b"\n"):
            lineno += 1
            yield source.original_line(lineno), raw[:4096].decode("utf-8", "replace")
        lineno -= 1


def _assign_ranks(dumps: list[_Dump], source: SourceFile) -> None:
    if not dumps:
        return
    hosts = []
    for d in dumps:
        if d.host not in hosts:
            hosts.append(d.host)
    per_host = Counter(d.host for d in dumps)
    file_rank = _FILE_RANK.search(source.rel.rsplit("/", 1)[-1])
    offsets, total = {}, 0
    for h in hosts:
        offsets[h] = total
        total += per_host[h]
    for d in dumps:
        if d.rank is not None:
            continue
        if d.label is not None:
            d.rank = d.label
        elif len(dumps) == 1 and file_rank:
            d.rank = int(file_rank.group(1))
        elif d.local is not None and (len(hosts) == 1 or None not in hosts):
            d.rank = offsets[d.host] + d.local if len(hosts) > 1 else d.local
        elif len(dumps) > 1:
            d.rank = offsets[d.host] + d.host_index
        if d.host:
            d.node = d.host


_COLLECTIVE_FILE = re.compile(r"distributed_c10d\.py|_functional_collectives|deepspeed/comm/|torch/distributed/c10d")
_DATA_FILE = re.compile(r"torch/utils/data/|dataloader", re.I)
_SYNC = re.compile(r"torch/cuda/(?:__init__|streams)\.py")


def _category(frames: list[tuple[str, str, int, str]]) -> tuple[str, int]:
    """(what the main thread does, index of the telling frame): collective:<op>, dataloader,
    cuda_sync, compute:<innermost function>, or idle."""
    if not frames:
        return "idle", -1
    for i, (func, path, _line, _text) in enumerate(frames):
        if _COLLECTIVE_FILE.search(path):
            return f"collective:{func}", i
    for i, (func, path, _line, _text) in enumerate(frames):
        if _DATA_FILE.search(path):
            return "dataloader", i
    for i, (func, path, _line, _text) in enumerate(frames):
        if _SYNC.search(path):
            return "cuda_sync", i
    return f"compute:{frames[0][0]}", 0


def _describe(category: str) -> str:
    kind, _, what = category.partition(":")
    if kind == "collective":
        return f"in the collective {what}"
    if kind == "compute":
        return f"in {what} (not in a collective)"
    return {"dataloader": "waiting for the data loader", "cuda_sync": "in a CUDA synchronize",
            "idle": "with no Python frames"}.get(kind, category)


def _pyspy_finding(dumps: list[_Dump]) -> HangFinding | None:
    by_rank: dict[int, _Dump] = {}
    for d in dumps:
        if d.rank is not None and d.threads:
            by_rank.setdefault(d.rank, d)
    if len(by_rank) < 2:
        return None
    cats = {r: _category(d.main_stack()) for r, d in by_rank.items()}
    counts = Counter(c for c, _ in cats.values())
    (major, count), = counts.most_common(1)
    odd = sorted(r for r, (c, _) in cats.items() if c != major)
    n = len(by_rank)
    if n == 2:
        waiting = [r for r, (c, _) in cats.items() if c.startswith("collective:")]
        if len(waiting) != 1:
            return None
        major = cats[waiting[0]][0]
        count = 1
        odd = [r for r in by_rank if r not in waiting]
    elif not major.startswith("collective:") or count * 2 <= n or not odd or len(odd) > MAX_SUSPECTS:
        return None
    if len(odd) == 2 and count < 3:
        return None
    evidence = []
    for r in odd:
        d = by_rank[r]
        frames = d.main_stack()
        _cat, at = cats[r]
        evidence.append((d.rel, d.line, d.text))
        if 0 <= at < len(frames) and d.threads:
            # line of that frame: recorded in order of frames across threads
            evidence.append((d.rel, _frame_line(d, frames, at), frames[at][3]))
    sample = by_rank[min(r for r in by_rank if r not in odd)]
    frames = sample.main_stack()
    _cat, at = cats[sample.rank]
    evidence.append((sample.rel, sample.line, sample.text))
    if 0 <= at < len(frames):
        evidence.append((sample.rel, _frame_line(sample, frames, at), frames[at][3]))
    where = {_describe(cats[r][0]) for r in odd}
    reason = (f"py-spy: {count} of {n} ranks are {_describe(major)}, while {_plural(odd)} "
              f"{'is' if len(odd) == 1 else 'are'} {' / '.join(sorted(where))}.")
    nodes = sorted({by_rank[r].node for r in odd if by_rank[r].node})
    return HangFinding(odd, nodes, reason, _unique(evidence), "stack")


def _frame_line(dump: _Dump, frames: list, at: int) -> int:
    offset = 0
    for _name, _state, thread_frames in dump.threads:
        if thread_frames is frames:
            return dump.frames_at[offset + at] if offset + at < len(dump.frames_at) else dump.line
        offset += len(thread_frames)
    return dump.line
