"""The plain "logs layout" (see the analyze contract):

    PATH/job.json          optional job context (every key optional)
    PATH/<file>            job-level logs (node None, never trusted)
    PATH/<node>/<file>     logs of node <node> (the folder's name); deeper files belong to <node>

Provenance: a node folder's file counts as what its kind says (a kernel log as the kernel's, see
slurm_attrib.provenance) only when the operator vouches for it by owning it (ingest.ownership);
job-level files, and everything of a folder a user made or could write, are `user`.

Hidden files and folders (names starting with `.`) are ignored.  Symbolic links are never
followed (coverage `skipped`, with where they point); FIFOs, sockets and devices are skipped;
files that cannot be read are `unreadable`; empty files are `empty` and not among the files.
Each file keeps at most readers.MAX_FILE_BYTES of (decompressed) content, its newest bytes, and the
whole evidence at most readers.MAX_TOTAL_BYTES: small files are read first so that one huge file
cannot crowd out the others.  CRLF line ends are normalised to LF (line numbers are unchanged).
Files and coverage are sorted by their path relative to PATH.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from slurm_attrib import hostlist
from slurm_attrib.errors import InputError
from slurm_attrib.ingest import readers
from slurm_attrib.ingest.kinds import detect_kind, name_hint
from slurm_attrib.ingest.ownership import OwnerCheck
from slurm_attrib.ingest.timestamps import sample_years
from slurm_attrib.ingest.types import CoverageEntry, Evidence, JobContext, SourceFile
from slurm_attrib.provenance import Provenance, vouched
from slurm_attrib.timebounds import describe_range, sane_time, sane_year

JOB_FILE = "job.json"
# Files whose content is at most this size stay in memory (SourceFile.data), smallest first while
# all held stay within HELD_TOTAL; the others are read again, one at a time, when analysed (peak
# memory does not grow with the evidence: 4,096 nodes' small logs held 330 MB).  16 MB, not 64:
# at 4,096 nodes the events need the room (peak RSS 648 -> 599 MB), and reading a small file
# again from the page cache costs no measurable CPU there.
HOLD_BYTES = 256 * 1024
HELD_TOTAL = 16 * readers.MiB
MAX_JOB_FILE = 16 * readers.MiB


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _stat_input(path: Path) -> os.stat_result:
    """The analysed PATH's own status, or InputError ("<path>: <problem>")."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or directory") from None
    except OSError as error:
        raise InputError(f"{path}: {_one_line(readers._describe(error))}") from None


def load_evidence(path: Path, vouch: bool = True) -> Evidence:
    """Read a logs-layout directory.  Raises InputError (one line: "<file>: <problem>").
    vouch=False: nothing in it is the operator's (an upload)."""
    path = Path(path)
    if not stat.S_ISDIR(_stat_input(path).st_mode):
        raise InputError(f"{path}: not a directory or a regular file")
    if not os.access(path, os.R_OK | os.X_OK):
        raise InputError(f"{path}: permission denied")
    root = Path(os.path.realpath(path))
    try:
        entries = _walk(root)
    except OSError as error:
        raise InputError(f"{path}: {_one_line(readers._describe(error))}") from None
    evidence = _read_layout(path, root, entries, vouch)
    if (root / JOB_FILE).is_symlink():
        raise InputError(f"{path / JOB_FILE}: symbolic link (not followed)")
    if (root / JOB_FILE).exists() and not (root / JOB_FILE).is_file():
        raise InputError(f"{path / JOB_FILE}: not a regular file")
    return evidence


SLURM_OUTPUT = re.compile(r"slurm-(\d+(?:_\d+)?)\.(?:out|err)(?:\.gz)?")


def load_file(path: Path) -> Evidence:
    """One job-level file (e.g. `slurm-123.out`) read as a logs layout holding just that file; a
    Slurm output file's name gives the job id.  Raises InputError as load_evidence does."""
    path = Path(path)
    info = _stat_input(path)
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: not a directory or a regular file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{path}: permission denied")
    real = Path(os.path.realpath(path))
    evidence = _read_layout(real.parent, real.parent, [(real.name, None, "file", info.st_size, "")], vouch=False)
    named = SLURM_OUTPUT.fullmatch(real.name)
    if named:
        evidence.job = replace(evidence.job, job_id=named.group(1))
    return evidence


def _read_layout(path: Path, root: Path, entries: list, vouch: bool) -> Evidence:
    """The evidence of the walked entries of a logs layout rooted at `root`."""
    owner = OwnerCheck(root, enabled=vouch)
    job = JobContext()
    coverage: list[CoverageEntry] = []
    candidates: list[tuple[str, str | None, int]] = []  # rel, node, size
    for rel, node, entry_kind, size, detail in entries:
        if entry_kind == "file":
            if rel == JOB_FILE:
                job, notes = _read_job(path, root / JOB_FILE)
                coverage.extend(notes)
                if owner.vouches(Path(JOB_FILE)):
                    job = replace(job, provenance=Provenance.DAEMON)
                continue
            candidates.append((rel, node, size))
        else:
            status = "unreadable" if entry_kind == "unreadable" else "skipped"
            coverage.append(CoverageEntry(node=node, source=rel, kind=None, status=status, detail=detail))

    files: list[SourceFile] = []
    budget, held = readers.MAX_TOTAL_BYTES, 0
    # Smallest first for the total budget; the output order is by path.
    for rel, node, _size in sorted(candidates, key=lambda c: (c[2], c[0])):
        cap = min(readers.MAX_FILE_BYTES, budget)
        probe = readers.probe_file(root / rel, cap)
        result = probe.result
        if result.status == "skipped" and budget <= 0:
            coverage.append(CoverageEntry(node, rel, None, "skipped",
                                          f"evidence size limit ({readers.MAX_TOTAL_BYTES} bytes) reached"))
            continue
        if result.status in ("unreadable", "skipped", "empty") or not result.data:
            status = result.status if result.status != "ok" else "empty"
            coverage.append(CoverageEntry(node, rel, None, status, result.detail))
            continue
        data = result.data  # the whole content, or head and tail samples of a large file
        budget -= probe.size
        kind = detect_kind(data, rel)
        provenance = _provenance(rel, node, kind, owner)
        source = SourceFile(rel=rel, node=node, kind=kind, provenance=provenance, data=data,
                            line_offset=result.line_offset, compressed=result.compressed,
                            size=probe.size, years=tuple(sample_years(data)))
        if not probe.whole:  # streamed from disk when analysed
            source.data, source.path, source.start = b"", root / rel, probe.start
        elif len(data) > HOLD_BYTES or held + len(data) > HELD_TOTAL:  # read again when analysed
            source.data, source.path, source.start, source.cap = b"", root / rel, -1, cap
        else:
            held += len(data)
        files.append(source)
        detail = result.detail
        if result.status == "truncated" and cap < readers.MAX_FILE_BYTES:
            detail = f"{detail} (evidence size limit of {readers.MAX_TOTAL_BYTES} bytes reached)"
        if _mostly_binary(data):
            detail = "; ".join(filter(None, [detail, "mostly binary content: only its text lines were read"]))
        coverage.append(CoverageEntry(node, rel, kind, result.status, detail))
        del data, probe, result

    files.sort(key=lambda f: f.rel)
    present = {f.node for f in files} | {c.node for c in coverage}
    for node in job.nodes:
        if node not in present:
            coverage.append(CoverageEntry(node, f"{node}/", None, "missing", "no logs for this node", whole_node=True))
    coverage.sort(key=lambda c: (c.source, c.node or ""))
    return Evidence(root=path, job=job, files=files, coverage=coverage)


# Names a job gives its own output (srun's slurm-%j.out, NCCL_DEBUG_FILE, redirected stdout/stderr):
# such a file copied into a node folder is still the job's, whatever its lines look like.
JOB_OUTPUT_NAMES = re.compile(r"(?i).*(?:nccl|slurm-\d|stdout|stderr|\.out$|\.err$)")


# Files an operator may copy into a node folder whose name says who wrote them, whatever kind
# their lines read as: a root service's own log (Fabric Manager's `[Jul 23 2024 07:53:55] [ERROR]
# [tid 841] ...`), and the output of a root-run probe (the InfiniBand and Ethernet port tools,
# DCGM's dcgmi, lspci), whose `State: Down` or `rev ff` lines are the hardware's own state.
NAMED_PROVENANCE = (
    (re.compile(r"(?i)(?:nv-)?fabricmanager(?:[._-]\w+)*$"), Provenance.DAEMON),
    (re.compile(r"(?i)(?:ibstat|ibstatus|ibv_devinfo|mlxlink|perfquery|ethtool|dcgmi|lspci)(?:[._-]\w+)*$"),
     Provenance.PROBE),
)


def _provenance(rel: str, node: str | None, kind: str, owner: OwnerCheck) -> Provenance:
    """A node folder's file is what its name says it is (`dmesg`, `syslog`, `journal`, a root
    daemon's own log or a probe's output, ...; else what its content is) when the operator vouches
    for it (owns it) and its name is no job output's; everything else is a user's.  The name
    first: a user's lines in a copied syslog may make its content look like another kind's."""
    name = rel.rsplit("/", 1)[-1]
    if node is None or JOB_OUTPUT_NAMES.match(name) or not owner.vouches(Path(rel)):
        return Provenance.USER
    for names, provenance in NAMED_PROVENANCE:
        if names.match(name):
            return provenance
    return vouched(name_hint(name) or kind)


# Files that describe a case rather than log it (a case's expected.yaml, a site's notes).
METADATA_SUFFIXES = (".yaml", ".yml")


_NOT_TEXT = {c: None for c in [*range(0, 9), 11, 12, *range(14, 32), 0xFFFD]}  # controls, U+FFFD


def _mostly_binary(data: bytes, sample: int = 4096) -> bool:
    """More than a third of the first characters are invalid UTF-8 or control characters."""
    text = data[:sample].decode("utf-8", errors="replace")
    bad = len(text) - len(text.translate(_NOT_TEXT))
    return bad * 3 > len(text)


def _walk(root: Path) -> list[tuple[str, str | None, str, int, str]]:
    """(rel, node, what, size, detail) for every non-hidden entry; what is file|skipped|unreadable.
    Folders are walked with a stack, not recursion: any depth of folders is read."""
    found: list[tuple[str, str | None, str, int, str]] = []
    root_text = str(root)
    pending: list[tuple[str, str, str | None]] = [(root_text, "", None)]  # directory, prefix, node
    while pending:
        directory, prefix, node = pending.pop()
        top = directory == root_text
        try:
            with os.scandir(directory) as iterator:
                entries = list(iterator)
        except OSError as error:
            if top:
                raise
            found.append((prefix.rstrip("/") + "/", node, "unreadable", 0, readers._describe(error)))
            continue
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                continue
            rel = prefix + name
            try:
                if entry.is_symlink():
                    found.append((rel, node, "skipped", 0, _symlink_detail(entry.path, root_text)))
                elif entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, rel + "/", node if not top else name))
                else:
                    found.append(_walked_entry(entry, rel, node))
            except OSError as error:
                found.append((rel, node, "unreadable", 0, readers._describe(error)))
    found.sort(key=lambda item: item[0])
    return found


def _walked_entry(entry: os.DirEntry, rel: str, node: str | None) -> tuple[str, str | None, str, int, str]:
    if entry.is_file(follow_symlinks=False):
        if entry.name.lower().endswith(METADATA_SUFFIXES):
            return rel, node, "skipped", 0, "metadata (YAML), not a log"
        return rel, node, "file", entry.stat(follow_symlinks=False).st_size, ""
    mode = entry.stat(follow_symlinks=False).st_mode
    return rel, node, "skipped", 0, f"not a regular file ({readers._file_type(mode)})"


def _symlink_detail(link: str, root: str) -> str:
    try:
        target = os.readlink(link)
    except OSError:
        return "symbolic link (not followed)"
    resolved = os.path.realpath(link)
    if not os.path.exists(resolved):
        return f"dangling symbolic link to {target} (not followed)"
    if resolved != root and not resolved.startswith(root.rstrip("/") + "/"):
        return "symbolic link pointing outside PATH (not followed)"
    rel = os.path.relpath(resolved, root).replace(os.sep, "/")
    return f"symbolic link to {rel} (not followed)"


# --------------------------------------------------------------------------------------- job.json

_STATE = re.compile(r"[A-Z_]+")


def _read_job(shown: Path, actual: Path) -> tuple[JobContext, list[CoverageEntry]]:
    """The job context and coverage notes for what was ignored in it (a time out of range)."""
    name = shown / JOB_FILE
    result = readers.read_file(actual, MAX_JOB_FILE)
    if result.status in ("unreadable", "skipped"):
        raise InputError(f"{name}: {_one_line(result.detail or result.status)}")
    if result.status == "truncated" and not result.compressed:
        raise InputError(f"{name}: larger than {MAX_JOB_FILE} bytes")
    try:
        raw = json.loads(result.data)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise InputError(f"{name}: not valid JSON ({_one_line(error)})") from None
    if not isinstance(raw, dict):
        raise InputError(f"{name}: not a JSON object")
    ignored: list[str] = []
    job = JobContext(
        job_id=_text(name, raw, "job_id"),
        user=_text(name, raw, "user"),
        state=_state(name, raw),
        exit_code=_text(name, raw, "exit_code"),
        start=_time(name, raw, "start", ignored),
        end=_time(name, raw, "end", ignored),
        nodes=_nodes(name, raw, ignored),
        source=JOB_FILE,
    )
    return job, [CoverageEntry(None, JOB_FILE, "job", "ok", detail) for detail in ignored]


def _text(name: Path, raw: dict[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(f"{name}: key '{key}' must be a string, not {type(value).__name__}")
    text = str(value).strip()
    return text or None


def _state(name: Path, raw: dict[str, Any]) -> str | None:
    text = _text(name, raw, "state")
    if text is None:
        return None
    found = _STATE.match(text.upper())  # "CANCELLED by 1234", "CANCELLED+" -> CANCELLED
    return found.group(0) if found else text.upper()


_NO_TIME = {"", "unknown", "none", "n/a", "null"}
_YEAR_FIRST = re.compile(r"([+-]?\d{4,})-")


class TimeOutOfRange(ValueError):
    """A well-formed time that is no sane instant (NaN, 1e20, year 0 or 9999): ignored."""


def parse_job_time(value: Any) -> float | None:
    """ISO 8601 (no zone = UTC) or UNIX seconds; raises TimeOutOfRange for a time outside
    timebounds' range and ValueError when unparsable."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, (int, float)):
        return _in_range(value)
    if not isinstance(value, str):
        raise ValueError(value)
    text = value.strip()
    if text.lower() in _NO_TIME:
        return None
    if re.fullmatch(r"\d{9,30}(?:\.\d{1,30})?", text):
        return _in_range(float(text))
    if text.endswith(("z", "Z")):
        text = text[:-1] + "+00:00"
    try:
        stamp = datetime.fromisoformat(text)
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=timezone.utc)
        return _in_range(stamp.timestamp())
    except OverflowError:
        raise TimeOutOfRange(value) from None
    except ValueError:
        year = _YEAR_FIRST.match(text)
        if year is not None and not sane_year(int(year.group(1))):  # year 0, year 10000
            raise TimeOutOfRange(value) from None
        raise


def _in_range(value: float) -> float:
    seconds = sane_time(value)
    if seconds is None:
        raise TimeOutOfRange(value)
    return seconds


def _time(name: Path, raw: dict[str, Any], key: str, ignored: list[str]) -> float | None:
    shown = _one_line(repr(raw.get(key)))[:80]
    try:
        return parse_job_time(raw.get(key))
    except TimeOutOfRange:
        ignored.append(f"key '{key}' ignored: {shown} is not {describe_range()}")
        return None
    except (ValueError, TypeError, OverflowError):
        raise InputError(f"{name}: key '{key}' is not an ISO 8601 time: {shown}") from None


def _nodes(name: Path, raw: dict[str, Any], ignored: list[str]) -> tuple[str, ...]:
    value = raw.get("nodes")
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{name}: key 'nodes' must be a list of hostnames")
    out: dict[str, None] = {}
    named = 0  # hosts named so far, duplicates included: bounds the work on a hostile list
    too_many = f"key 'nodes' ignored: it names more than {hostlist.MAX_HOSTS} hosts"
    for item in value:
        try:
            hosts = expand_hostlist(item)
        except hostlist.HostlistTooLarge:
            ignored.append(too_many)
            return ()
        named += len(hosts)
        if named > hostlist.MAX_HOSTS:
            ignored.append(too_many)
            return ()
        out.update(dict.fromkeys(hosts))
    return tuple(out)


def expand_hostlist(text: str) -> list[str]:
    """A Slurm hostlist expression ("gpu[01-03,7],login1") as host names; a malformed one is kept
    as written (job.json is input to read, not to reject for a typo).  Raises HostlistTooLarge
    for one naming more than hostlist.MAX_HOSTS hosts."""
    try:
        return hostlist.expand(text)
    except hostlist.HostlistTooLarge:
        raise
    except ValueError:
        return [text.strip()] if text.strip() else []
