"""Drain policy: what to do with a diagnosis' drain recommendations.

Policies (site config `drain_policy`):
  off        nothing is drained or recommended (entries are kept in the index as `skipped`)
  recommend  entries wait in the index for `sattrib drain --apply` (default)
  auto       entries are applied at once

The diagnosis' `drain` list already holds only confirmed, trusted gpu/network/host causes.  On
top of that: a job with more suspect nodes than `systemic_threshold` drains nothing (a systemic
problem: fabric, filesystem, scheduler), and a job with more drain entries than
`drain_max_nodes` drains nothing either; the note says why.

Applying: all pending recommendations in one run, one drain per node with the most specific
reason (a GPU, then one job's fault, then a node's repeated faults); a node we drained already
keeps its reason unless the new one is more specific; a node that is already drained or down
with a reason that does not start with `sattrib:` keeps that reason (never overwrite someone
else's drain); `undrain` resumes only nodes
whose reason starts with `sattrib:` (the LBNL NHC convention, with our own prefix).
"""

from __future__ import annotations

import time

from slurm_attrib.errors import SattribError
from slurm_attrib.slurm import Backend, SlurmError
from slurm_attrib.store import APPLIED, FAILED, KEPT, RECOMMENDED, SKIPPED

PREFIX = "sattrib:"
MAX_REASON_BYTES = 255


def clean_reason(reason: str) -> str:
    """One line, starting with `sattrib:`, at most 255 bytes (slurmdbd tinytext)."""
    text = " ".join(str(reason).split())
    if not text.startswith(PREFIX):
        text = f"{PREFIX} {text}"
    return text.encode("utf-8")[:MAX_REASON_BYTES].decode("utf-8", errors="ignore")


def plan(diagnosis, config) -> tuple[list[dict], str]:
    """The index's drain entries for a fresh diagnosis (nothing applied yet) and a note."""
    entries = [{"node": d.node, "reason": clean_reason(d.reason), "status": RECOMMENDED, "detail": ""} for d in diagnosis.drain]
    suspects = set(diagnosis.culprit_nodes) | {d.node for d in diagnosis.drain}
    note = ""
    if config.drain_policy == "off":
        note = "drain_policy off: nothing drained"
    elif diagnosis.systemic or len(suspects) > config.systemic_threshold:
        note = (
            f"systemic: {len(suspects)} suspect node(s) (threshold {config.systemic_threshold}); nothing drained"
            if len(suspects) > config.systemic_threshold
            else "systemic failure (many nodes at once): nothing drained"
        )
    elif len(entries) > config.drain_max_nodes:
        note = f"{len(entries)} nodes to drain is over drain_max_nodes={config.drain_max_nodes}: nothing drained"
    if note:
        for e in entries:
            e["status"], e["detail"] = SKIPPED, note
    return entries, note


def specificity(reason: str) -> int:
    """How precisely a reason names what to fix: 2 a GPU, 1 one job's fault, 0 a node's repeated faults."""
    if " GPU " in reason:
        return 2
    return 0 if reason.startswith(f"{PREFIX} repeat ") else 1


def apply_entry(entry: dict, backend: Backend) -> dict:
    """Drain one node for an entry; returns the updated entry (status applied/kept/failed).  A node
    we drained already keeps its reason unless this one is more specific."""
    entry = dict(entry)
    node, reason = entry["node"], clean_reason(entry["reason"])
    entry["at"] = time.time()
    try:
        state = backend.node_state(node)
        if state is None:
            entry["status"], entry["detail"] = FAILED, "node unknown to Slurm"
            return entry
        if state.unavailable and state.reason and not state.reason.startswith(PREFIX):
            entry["status"], entry["detail"] = KEPT, f"already {state.state.lower()} with reason {state.reason!r}"
            return entry
        if state.unavailable and state.reason and specificity(state.reason) >= specificity(reason):
            entry["status"], entry["detail"] = APPLIED, f"already drained by sattrib with reason {state.reason!r}"
            return entry
        backend.drain(node, reason)
        entry["status"], entry["detail"] = APPLIED, ""
    except SlurmError as exc:
        entry["status"], entry["detail"] = FAILED, str(exc)
    return entry


def apply_policy(entries: list[dict], config, backend: Backend | None) -> list[dict]:
    """Under `auto`, apply every entry still `recommended`; others are returned unchanged."""
    if config.drain_policy != "auto" or backend is None:
        return entries
    return [apply_entry(e, backend) if e["status"] == RECOMMENDED else e for e in entries]


def pending(store, nodes: tuple[str, ...] = ()) -> list[tuple[str, dict]]:
    """(job_id, entry) for every recommendation not applied yet, oldest first."""
    out = []
    for row in store.rows():
        for entry in row.drains:
            if entry.get("status") == RECOMMENDED and (not nodes or entry["node"] in nodes):
                out.append((row.job_id, entry))
    return out


def apply_pending(store, backend: Backend, nodes: tuple[str, ...] = (), fleet: list[dict] = ()) -> list[tuple[str, dict]]:
    """Apply every pending recommendation, single jobs' (oldest first) and then the fleet's (`fleet`
    entries, source `fleet:JOBS`), for `nodes` if given, in one run: one drain per node, with the
    most specific reason (the first of equals).  Returns (source, updated entry) for each."""
    rows = [row for row in store.rows() if any(_waiting(e, nodes) for e in row.drains)]
    candidates = [(row.job_id, e) for row in rows for e in row.drains if _waiting(e, nodes)]
    candidates += [(f"fleet:{','.join(e['jobs'])}", e) for e in fleet if _waiting(e, nodes)]
    chosen: dict[str, tuple[str, dict]] = {}
    for source, entry in candidates:
        best = chosen.get(entry["node"])
        if best is None or specificity(clean_reason(entry["reason"])) > specificity(clean_reason(best[1]["reason"])):
            chosen[entry["node"]] = (source, entry)
    applied = {node: apply_entry(entry, backend) for node, (source, entry) in chosen.items()}
    done: list[tuple[str, dict]] = []
    updated: dict[int, dict] = {}
    for source, entry in candidates:
        result = applied[entry["node"]]
        by, first = chosen[entry["node"]]
        if entry is not first:
            with_whom = f"job {by}" if not by.startswith("fleet:") else f"the fleet's ({by[6:]})"
            result = {**entry, "status": result["status"], "at": result["at"], "detail": f"applied with {with_whom} recommendation"}
        updated[id(entry)] = result
        done.append((source, result))
    for row in rows:
        store.set_drains(row.job_id, [updated.get(id(e), e) for e in row.drains])
    return done


def _waiting(entry: dict, nodes: tuple[str, ...]) -> bool:
    return entry.get("status") == RECOMMENDED and (not nodes or entry["node"] in nodes)


class UndrainRefused(SattribError):
    pass


def undrain(node: str, backend: Backend) -> str:
    """Resume a node drained by us; refuse any other reason.  Returns the old reason."""
    state = backend.node_state(node)
    if state is None:
        raise UndrainRefused(f"{node}: unknown node")
    if not state.reason:
        raise UndrainRefused(f"{node}: not drained by sattrib (no reason set, state {state.state.lower()}); left alone")
    if not state.reason.startswith(PREFIX):
        raise UndrainRefused(f"{node}: drained for a non-sattrib reason {state.reason!r}; left alone")
    backend.resume(node)
    return state.reason
