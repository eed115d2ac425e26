"""PyTorch flight-recorder (FR) dumps: safe loading and a compact text summary (stdlib only).

An FR dump (`TORCH_NCCL_TRACE_BUFFER_SIZE` > 0 with `TORCH_NCCL_DUMP_ON_TIMEOUT`, written to
`TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>`, default `/tmp/nccl_trace_rank_<rank>`) is a pickled
dict (JSON with `TORCH_NCCL_USE_JSON` / `_dump_nccl_trace_json`):

    version, pg_config, pg_status {pg_id: {last_enqueued_collective, last_started_collective,
    last_completed_collective}}, entries [{record_id, pg_id, process_group (name, desc),
    collective_seq_id, p2p_seq_id, op_id, profiling_name, input_sizes, output_sizes, state
    (scheduled | started | completed), time_created_ns, is_p2p, frames, ...}], nccl_comm_state

(field names as in torch/csrc/distributed/c10d/FlightRecorder.hpp).  torch writes it with its
own Pickler without type tags: only builtin types (dict, list, tuple, str, int, float, bool,
None).  Unpickling untrusted data can run code, so `load_dump` uses an Unpickler whose
find_class refuses every global (no class, no function, hence no REDUCE of anything) and whose
persistent_load refuses persistent ids; input is capped at MAX_DUMP_BYTES and at most
MAX_ENTRIES entries are looked at.  Nothing here recurses over the loaded data (sizes are
normalised to a bounded depth and length).  Every function returns None / [] on bad input and
never raises.

`summary_lines(rank, dump)` gives the lines the node epilog keeps in the bundle:

    sattrib-fr rank=3 pg=0 name=default_pg last_enqueued=12 last_started=12 last_completed=11 seq=12 op=nccl:all_reduce state=started sizes=[[1024]]
    sattrib-fr rank=3 pg=0 seq=11 op=nccl:all_reduce state=completed sizes=[[1024]]

(one status line per process group, with its frontier entry: the first collective not
completed, else the last; then up to ENTRY_LINES recent collective entries).  `parse_line`
reads them back.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass, field

MAX_DUMP_BYTES = 64 * 1024 * 1024
MAX_ENTRIES = 200_000
ENTRY_LINES = 4
MAX_SIZES_DEPTH = 4
MAX_SIZES_ITEMS = 16
PREFIX = "sattrib-fr "
PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")

# Names of FR dump files: nccl_trace_rank_3, trace_3, rank_3, fr_dump_3.pkl, ...
FR_NAME = re.compile(
    r"(?:nccl_trace_rank_|trace_rank_?|fr_trace_?|trace_|rank_?|fr_?dump_?|flight_?recorder_?)(\d{1,7})"
    r"(?:\.(?:pkl|pickle|json|bin))?$",
    re.I,
)


class _NoGlobals(pickle.Unpickler):
    """Builtin containers and scalars only: every global (class or callable) is refused."""

    def find_class(self, module, name):  # noqa: D401 - pickle API
        raise pickle.UnpicklingError(f"global {module}.{name} refused")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("persistent id refused")


def looks_like_dump(head: bytes) -> bool:
    """Pickle protocol 2-5 header, or a JSON object."""
    return head[:2] in PICKLE_MAGIC or head.lstrip()[:1] == b"{"


def load_dump(data: bytes) -> dict | None:
    """The dump as a dict, or None (not a dump, truncated, too large, refused content)."""
    try:
        if not data or len(data) > MAX_DUMP_BYTES:
            return None
        if data[:2] in PICKLE_MAGIC:
            loaded = _NoGlobals(io.BytesIO(data)).load()
        elif data.lstrip()[:1] == b"{":
            loaded = json.loads(data)
        else:
            return None
    except Exception:  # noqa: BLE001 - UnpicklingError, EOFError, ValueError, MemoryError, RecursionError ...
        return None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("entries", []), list):
        return None
    if "entries" not in loaded and "pg_status" not in loaded:
        return None
    return loaded


@dataclass
class PgState:
    """One process group as seen by one rank."""

    pg: str
    name: str = ""
    last_enqueued: int | None = None
    last_started: int | None = None
    last_completed: int | None = None
    frontier: int | None = None  # seq of the first collective not completed (else the last)
    entries: dict[int, tuple[str, str, str]] = field(default_factory=dict)  # seq -> (op, sizes, state)


def _int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value.strip()):
        return int(value)
    return None


def _word(value, limit: int = 80) -> str:
    text = value if isinstance(value, str) else ""
    return re.sub(r"\s+", "_", text.strip())[:limit]


def _sizes(value, depth: int = 0) -> str:
    """Compact text of nested size lists, bounded in depth and length ('' when unknown)."""
    if depth > MAX_SIZES_DEPTH:
        return "?"
    if isinstance(value, bool):
        return "?"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        items = [_sizes(v, depth + 1) for v in value[:MAX_SIZES_ITEMS]]
        if len(value) > MAX_SIZES_ITEMS:
            items.append("...")
        return "[" + ",".join(items) + "]"
    return "?"


def _is_p2p(entry: dict) -> bool:
    flag = entry.get("is_p2p")
    if isinstance(flag, bool):
        return flag
    name = entry.get("profiling_name")
    return isinstance(name, str) and bool(re.search(r"(?:^|:)(?:send|recv)\b", name))


def summarise(dump: dict) -> list[PgState]:
    """Per process group: progress counters and the collective entries (bounded)."""
    try:
        return _summarise(dump)
    except Exception:  # noqa: BLE001 - odd shapes give nothing
        return []


def _summarise(dump: dict) -> list[PgState]:
    states: dict[str, PgState] = {}
    entries = dump.get("entries") or []
    if not isinstance(entries, list):
        entries = []
    for entry in entries[-MAX_ENTRIES:]:
        if not isinstance(entry, dict) or _is_p2p(entry):
            continue
        pg = _int(entry.get("pg_id"))
        seq = _int(entry.get("collective_seq_id"))
        if pg is None or seq is None:
            continue
        state = states.setdefault(str(pg), PgState(str(pg)))
        group = entry.get("process_group")
        if isinstance(group, (list, tuple)) and group:
            desc = group[1] if len(group) > 1 and isinstance(group[1], str) and group[1] else group[0]
            state.name = state.name or _word(desc)
        op = _word(entry.get("profiling_name")) or "?"
        st = _word(entry.get("state")) or "?"
        state.entries[seq] = (op, _sizes(entry.get("input_sizes")) or "?", st)
    for state in states.values():
        seqs = sorted(state.entries)
        state.last_enqueued = seqs[-1]
        started = [s for s in seqs if state.entries[s][2] in ("started", "completed")]
        completed = [s for s in seqs if state.entries[s][2] == "completed"]
        state.last_started = started[-1] if started else None
        state.last_completed = completed[-1] if completed else None
    status = dump.get("pg_status")
    if isinstance(status, dict):
        for key, value in list(status.items())[:4096]:
            pg = _int(key) if not isinstance(key, int) else key
            if pg is None or not isinstance(value, dict):
                continue
            state = states.setdefault(str(pg), PgState(str(pg)))
            for attr, name in (("last_enqueued", "last_enqueued_collective"),
                               ("last_started", "last_started_collective"),
                               ("last_completed", "last_completed_collective")):
                number = _int(value.get(name))
                if number is not None:
                    setattr(state, attr, number)
    for state in states.values():
        pending = [s for s in sorted(state.entries) if state.entries[s][2] != "completed"]
        state.frontier = pending[0] if pending else (max(state.entries) if state.entries else None)
    return [states[k] for k in sorted(states, key=lambda k: (len(k), k))]


def _fmt(value: int | None) -> str:
    return "?" if value is None else str(value)


def summary_lines(rank: int, dump: dict) -> list[str]:
    lines = []
    for state in summarise(dump):
        head = (f"{PREFIX}rank={rank} pg={state.pg}" + (f" name={state.name}" if state.name else "")
                + f" last_enqueued={_fmt(state.last_enqueued)} last_started={_fmt(state.last_started)}"
                f" last_completed={_fmt(state.last_completed)}")
        if state.frontier is not None and state.frontier in state.entries:
            op, sizes, st = state.entries[state.frontier]
            head += f" seq={state.frontier} op={op} state={st} sizes={sizes}"
        lines.append(head)
        recent = [s for s in sorted(state.entries)[-ENTRY_LINES:] if s != state.frontier]
        for seq in recent:
            op, sizes, st = state.entries[seq]
            lines.append(f"{PREFIX}rank={rank} pg={state.pg} seq={seq} op={op} state={st} sizes={sizes}")
    return lines


_FIELD = re.compile(r"(\w+)=(\S+)")


def parse_line(text: str) -> tuple[int, PgState, bool] | None:
    """(rank, state, is_status_line) of one summary line, or None."""
    at = text.find(PREFIX)
    if at < 0:
        return None
    fields = dict(_FIELD.findall(text[at + len(PREFIX):]))
    rank = _int(fields.get("rank"))
    pg = fields.get("pg")
    if rank is None or pg is None:
        return None
    state = PgState(pg, name=fields.get("name", ""))
    status = "last_enqueued" in fields
    if status:
        state.last_enqueued = _int(fields.get("last_enqueued"))
        state.last_started = _int(fields.get("last_started"))
        state.last_completed = _int(fields.get("last_completed"))
    seq = _int(fields.get("seq"))
    if seq is not None:
        state.entries[seq] = (fields.get("op", "?"), fields.get("sizes", "?"), fields.get("state", "?"))
        if status:
            state.frontier = seq
    return rank, state, status


def rank_from_name(name: str) -> int | None:
    found = FR_NAME.search(name.rsplit("/", 1)[-1])
    return int(found.group(1)) if found else None
