"""Read a capture spool job directory (<spool>/<jobid>/) into the Evidence interface.

Layout written by the node Epilog (slurm_attrib.capture.epilog):

    <jobid>/nodes/<node>.json.gz     one gzip JSON node bundle per node (format sattrib-node-bundle)
    <jobid>/job.json                 optional job record (e.g. from the controller: state, times)

Every source of every node bundle becomes one `BundleSource` (a SourceFile):

    rel   nodes/<node>.json.gz/<source name>
    node  the bundle's node
    kind  the source's kind
    provenance  as the epilog recorded it (slurm_attrib.provenance), when the operator vouches for
          the bundle file (root or the analysing user owns it and the folders above it, nobody else
          may write them: ingest.ownership); `user` otherwise.  A bundle of before provenance was
          recorded: its kind's, but `user` for syslog (the journal of every uid was read then).
    data  the kept lines joined with "\\n" (the pre-filter kept only some lines of the source)
    line_numbers  line_numbers[i] is the ORIGINAL line number in the node's real source of the
          (i+1)-th line of `data`.  The scanner numbers lines of `data` from 1; map a scanner line
          n through `source.line_numbers[n - 1]` (see `original_line`) to report evidence lines that
          point into the real dmesg / syslog / job output.

Coverage: one entry per node source (status as captured: ok, empty, missing, forbidden, timeout,
truncated, error, skipped), a node of the job without a bundle -> status `missing` (source
"bundle"; the engine reads this for NODE_FAIL), a bad or corrupt bundle -> status `unreadable`
with detail.  Never raises for bad bundle content: a part of the wrong type (a source that is no
object, `lines` that are no list, a time that is no sane instant, `gpus` or `capture` of the
wrong shape) is left out with a coverage note, and the rest of the bundle and the job is read.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurm_attrib.ingest import readers
from slurm_attrib.ingest.gpuids import identity_csv
from slurm_attrib.ingest.types import CoverageEntry, Evidence, JobContext, SourceFile
from slurm_attrib.ingest.layout import parse_job_time
from slurm_attrib.ingest.ownership import OwnerCheck
from slurm_attrib.provenance import Provenance, vouched
from slurm_attrib.timebounds import describe_range, sane_time
from slurm_attrib.vocab import SOURCE_KINDS

BUNDLE_FORMAT = "sattrib-node-bundle"
SUPPORTED_VERSIONS = (1,)
# Decompressed; a bigger bundle is unreadable.  The epilog writes at most bundle_max_bytes
# (16 MiB by default); parsed JSON takes several times its size in memory.
MAX_BUNDLE_BYTES = 64 * 1024 * 1024
MAX_JOB_RECORD = 16 * 1024 * 1024
_NODE_RE = re.compile(r"[A-Za-z0-9._-]{1,255}")


@dataclass
class BundleSource(SourceFile):
    """A SourceFile from a node bundle, which keeps only some lines: `line_numbers[i]` is the
    original line of data line i+1."""

    line_numbers: list[int] = field(default_factory=list)
    status: str = "ok"

    def original_line(self, scanner_line: int) -> int:
        """Original source line for a 1-based line number of `data` (identity when unknown)."""
        if 1 <= scanner_line <= len(self.line_numbers):
            return self.line_numbers[scanner_line - 1]
        return scanner_line


def is_spool_job_dir(path: Path) -> bool:
    """A capture spool job directory: has a nodes/ folder with node bundles (or is empty of them
    but holds a job.json written for this layout)."""
    path = Path(path)
    nodes = path / "nodes"
    if not nodes.is_dir():
        return False
    try:
        return any(p.name.endswith(".json.gz") and not p.name.startswith(".") for p in nodes.iterdir()) or (
            path / "job.json"
        ).is_file()
    except OSError:
        return False


def _read_bundle(path: Path) -> dict:
    with gzip.open(path, "rb") as f:
        raw = f.read(MAX_BUNDLE_BYTES + 1)
    if len(raw) > MAX_BUNDLE_BYTES:
        raise ValueError(f"decompressed size over {MAX_BUNDLE_BYTES} bytes")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("format") != BUNDLE_FORMAT:
        raise ValueError(f"format {data.get('format')!r} is not {BUNDLE_FORMAT}")
    if data.get("version") not in SUPPORTED_VERSIONS:
        raise ValueError(f"unsupported bundle version {data.get('version')!r}")
    if not isinstance(data.get("sources", []), list):
        raise ValueError("sources is not a list")
    return data


def _time(value) -> float | None:
    """A bundle's job time: UNIX seconds (a number, or a number as text) when a sane instant."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    return sane_time(value)


def _record_time(record: dict, key: str, coverage: list[CoverageEntry]) -> float | None:
    """job.json's start or end (UNIX seconds or ISO 8601); None, with a note, when no sane time."""
    try:
        return parse_job_time(record.get(key))
    except (ValueError, TypeError):
        shown = " ".join(repr(record.get(key)).split())[:80]
        coverage.append(CoverageEntry(None, "job.json", "job", "ok", f"key '{key}' ignored: {shown} is not {describe_range()}"))
        return None


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _provenance(src: dict, kind: str, vouched_bundle: bool) -> Provenance:
    if not vouched_bundle:
        return Provenance.USER
    recorded = src.get("provenance")
    if recorded is None:
        return Provenance.USER if kind == "syslog" else vouched(kind)
    try:
        return Provenance(recorded)
    except ValueError:
        return Provenance.USER


def _source_file(node: str, rel_bundle: str, src: dict, vouched_bundle: bool) -> tuple[BundleSource | None, CoverageEntry]:
    name = str(src.get("name") or "?")[:200]
    kind = src.get("kind") if src.get("kind") in SOURCE_KINDS else None
    status = str(src.get("status") or "error")
    detail = str(src.get("detail") or "")
    numbers, texts, malformed = _kept_lines(src.get("lines"))
    extra = []
    if src.get("lines_total") is not None:
        extra.append(f"{src.get('lines_kept', 0)} of {src.get('lines_total')} lines kept")
    if src.get("line_base_known") is False:
        extra.append("line numbers relative to the scanned window")
    if malformed:
        extra.append(f"{malformed} malformed lines left out")
    full_detail = "; ".join(x for x in [detail, *extra] if x)[:1000]
    coverage = CoverageEntry(node=node, source=f"{rel_bundle}/{name}", kind=kind, status=status, detail=full_detail)
    if kind is None or not texts:
        return None, coverage
    data = ("\n".join(texts) + "\n").encode("utf-8", "replace")
    provenance = _provenance(src, kind, vouched_bundle)
    source = BundleSource(
        rel=f"{rel_bundle}/{name}",
        node=node,
        kind=kind,
        provenance=provenance,
        data=data,
        line_numbers=numbers,
        status=status,
        root_senders=provenance is Provenance.DAEMON and kind == "syslog" and src.get("senders") == "root",
    )
    return source, coverage


def _kept_lines(lines) -> tuple[list[int], list[str], int]:
    """(original line numbers, texts, how many entries were malformed) of a source's `lines`:
    a list of [number, text] pairs."""
    if lines is None:
        return [], [], 0
    if not isinstance(lines, list):
        return [], [], 1
    numbers: list[int] = []
    texts: list[str] = []
    for item in lines:
        if isinstance(item, list) and len(item) == 2 and _is_line_number(item[0]) and isinstance(item[1], str):
            numbers.append(item[0])
            texts.append(item[1].replace("\n", " "))
    return numbers, texts, len(lines) - len(texts)


def _is_line_number(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1 << 53


def _gpu_identity_source(node: str, rel_bundle: str, gpus, vouched_bundle: bool) -> BundleSource | None:
    """The GPUs the prolog/epilog found (nvidia-smi's pci.bus_id, uuid, serial; /proc/driver/nvidia
    UUIDs) as `--query-gpu` CSV lines, which ingest.gpuids reads like captured nvidia-smi output."""
    if not isinstance(gpus, dict):
        return None
    rows = []
    for item in [*_list(gpus.get("nvidia_smi")), *_list(gpus.get("proc"))]:
        if not isinstance(item, dict):
            continue
        pci, uuid = str(item.get("pci_bus_id") or item.get("pci") or ""), str(item.get("uuid") or "")
        if pci and uuid.startswith("GPU-"):
            rows.append((pci, uuid, str(item.get("serial") or "")))
    data = identity_csv(rows)
    if not data:
        return None
    count = data.count(b"\n")
    return BundleSource(
        rel=f"{rel_bundle}/gpus", node=node, kind="nvidia_smi",
        provenance=Provenance.PROBE if vouched_bundle else Provenance.USER,
        data=data, line_numbers=list(range(1, count + 1)), status="ok",
    )


def load_spool_job(path: Path, vouch: bool = True) -> Evidence:
    """Node bundles of one job -> Evidence (files, coverage, JobContext).  Never raises for bad
    bundles; an unreadable directory gives an Evidence with only coverage entries.
    vouch=False: nothing in it is the operator's (an upload)."""
    path = Path(path)
    owner = OwnerCheck(Path(os.path.realpath(path)), enabled=vouch)
    files: list[SourceFile] = []
    coverage: list[CoverageEntry] = []
    bundles: list[tuple[str, dict]] = []
    nodes_dir = path / "nodes"
    try:
        candidates = sorted(p for p in nodes_dir.iterdir() if p.name.endswith(".json.gz") and not p.name.startswith("."))
    except OSError as exc:
        candidates = []
        coverage.append(CoverageEntry(None, "nodes", None, "missing", f"cannot list nodes/: {exc.strerror or exc}"))
    for bundle_path in candidates:
        rel = f"nodes/{bundle_path.name}"
        file_node = bundle_path.name[: -len(".json.gz")]
        try:
            if bundle_path.is_symlink() or not bundle_path.is_file():
                raise ValueError("not a regular file")
            data = _read_bundle(bundle_path)
        except (OSError, EOFError, ValueError, zlib.error, UnicodeDecodeError) as exc:
            coverage.append(CoverageEntry(file_node, rel, None, "unreadable", f"{type(exc).__name__}: {exc}"[:300]))
            continue
        node = str(data.get("node") or file_node)
        if node != file_node or not _NODE_RE.fullmatch(node):
            coverage.append(CoverageEntry(file_node, rel, None, "unreadable", f"bundle names node {node!r}"))
            continue
        bundles.append((node, data))
        vouched_bundle = owner.vouches(Path(rel))
        for number, src in enumerate(_list(data.get("sources")), start=1):
            if not isinstance(src, dict):
                coverage.append(CoverageEntry(node, f"{rel}/source {number}", None, "unreadable", "not a JSON object"))
                continue
            source, cov = _source_file(node, rel, src, vouched_bundle)
            coverage.append(cov)
            if source is not None:
                files.append(source)
        identities = _gpu_identity_source(node, rel, data.get("gpus"), vouched_bundle)
        if identities is not None:
            files.append(identities)
        errors = _list(_dict(data.get("capture")).get("errors"))
        if errors:
            coverage.append(
                CoverageEntry(node, f"{rel}/capture", None, "ok", "epilog errors: " + " | ".join(map(str, errors))[:500])
            )

    job = _job_context(path, bundles, coverage)
    if owner.vouches(Path("job.json")) or (not (path / "job.json").exists() and bundles and owner.vouches(Path("nodes"))):
        job = replace(job, provenance=Provenance.DAEMON)
    seen = {node for node, _ in bundles} | {c.node for c in coverage if c.status == "unreadable"}
    for node in job.nodes:
        if node not in seen:
            coverage.append(CoverageEntry(node, f"nodes/{node}.json.gz", None, "missing", "no node bundle", whole_node=True))
    return Evidence(root=path, job=job, files=files, coverage=coverage)


def _job_context(path: Path, bundles: list[tuple[str, dict]], coverage: list[CoverageEntry]) -> JobContext:
    record = _job_record(path / "job.json", coverage)
    job_id = record.get("job_id")
    user = record.get("user")
    exit_code = record.get("exit_code")
    state = record.get("state")
    starts, ends, nodes = [], [], []
    for _, data in bundles:
        ctx = _dict(data.get("job"))
        job_id = job_id or ctx.get("job_id")
        user = user or ctx.get("user")
        exit_code = exit_code or ctx.get("exit_code")
        state = state or ctx.get("state")
        if _time(ctx.get("start")) is not None and ctx.get("start_from") != "boot":
            starts.append(_time(ctx.get("start")))
        if _time(ctx.get("end")) is not None:
            ends.append(_time(ctx.get("end")))
        for n in _list(ctx.get("nodes")):
            if isinstance(n, str) and _NODE_RE.fullmatch(n) and n not in nodes:
                nodes.append(n)
    if isinstance(record.get("nodes"), list):
        nodes = [n for n in record["nodes"] if isinstance(n, str) and _NODE_RE.fullmatch(n)] or nodes
    if not nodes:
        nodes = [node for node, _ in bundles]
    start = _record_time(record, "start", coverage)
    end = _record_time(record, "end", coverage)
    start = start if start is not None else (min(starts) if starts else None)
    end = end if end is not None else (max(ends) if ends else None)
    return JobContext(
        job_id=str(job_id) if job_id is not None else None,
        user=str(user) if user is not None else None,
        state=str(state).upper() if state else None,
        exit_code=str(exit_code) if exit_code is not None else None,
        start=start,
        end=end,
        nodes=tuple(nodes),
        source="job.json" if record else (f"nodes/{bundles[0][0]}.json.gz" if bundles else None),
    )


def _job_record(job_json: Path, coverage: list[CoverageEntry]) -> dict:
    """job.json as a dict; {} with a coverage note when it is missing in part or unreadable."""
    if not job_json.is_file():
        return {}
    result = readers.read_file(job_json, MAX_JOB_RECORD)
    problem = result.detail if result.status in ("unreadable", "skipped", "truncated") else ""
    if not problem:
        try:
            loaded = json.loads(result.data)
            problem = "" if isinstance(loaded, dict) else "not a JSON object"
        except (ValueError, RecursionError) as exc:
            problem = f"not valid JSON ({type(exc).__name__})"
    if problem:
        coverage.append(CoverageEntry(None, "job.json", "job", "unreadable", str(problem)[:300]))
        return {}
    return loaded
