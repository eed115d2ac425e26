"""Drain policy: what to do with a diagnosis' drain recommendations.

Policies (site config `drain_policy`):
  off        nothing is drained or recommended (entries are kept in the index as `skipped`)
  recommend  entries wait in the index for `sattrib drain --apply` (default)
  auto       entries are applied at once

The diagnosis' `drain` list already holds only confirmed, trusted gpu/network/host causes.  On
top of that: a job with more suspect nodes than `systemic_threshold` drains nothing (a systemic
problem: fabric, filesystem, scheduler), and a job with more drain entries than
`drain_max_nodes` drains nothing either; the note says why.

Applying: a node that is already drained or down with a reason that does not start with
`sattrib:` keeps that reason (never overwrite someone else's drain); `undrain` resumes only nodes
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


def apply_entry(entry: dict, backend: Backend) -> dict:
    """Drain one node for an entry; returns the updated entry (status applied/kept/failed)."""
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


def apply_pending(store, backend: Backend, nodes: tuple[str, ...] = ()) -> list[tuple[str, dict]]:
    """Apply pending recommendations (all, or those for `nodes`); one drain per node."""
    done: list[tuple[str, dict]] = []
    drained: dict[str, dict] = {}
    for row in store.rows():
        changed = False
        new = []
        for entry in row.drains:
            if entry.get("status") == RECOMMENDED and (not nodes or entry["node"] in nodes):
                if entry["node"] in drained:
                    entry = {**entry, "status": drained[entry["node"]]["status"], "detail": "applied with another job's recommendation"}
                else:
                    entry = apply_entry(entry, backend)
                    drained[entry["node"]] = entry
                done.append((row.job_id, entry))
                changed = True
            new.append(entry)
        if changed:
            store.set_drains(row.job_id, new)
    return done


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
