"""Repeat offenders: nodes named as the hardware culprit of several independent jobs.

One job's `likely` is not enough to drain a node; the same node named as the hardware origin of
two or more jobs within a window (default 14 days) is.  One fault is one strike: a job that named
a GPU strikes its node once, and the offender names the GPU that two or more of its jobs named.
Only a job whose cause rests on evidence no user could have written counts (its row's `trusted`,
set from the cause event's provenance): a job's output, however it looks, never strikes a node.  A GPU whose repeated faults are
memory faults (uncorrectable ECC, row-remap failures) is also an RMA candidate.

Acknowledgements: once a repeat offender is drained through `sattrib drain --apply`, or resumed
with `sattrib undrain`, its earlier jobs are settled: only jobs that end after that moment count
again.  They are kept in `<results>/fleet-acks.json` ({node: UNIX time}).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from slurm_attrib import atomic
from slurm_attrib.store import RECOMMENDED, Row
from slurm_attrib.store.index import HARDWARE_DOMAINS, job_time

MEMORY_CATEGORIES = ("gpu_uncorrectable_ecc", "gpu_row_remap_failure")
MEMORY_XIDS = (48, 63, 64, 92, 94, 95)  # NVIDIA Xid catalog: DBE, remap events and failures, contained/uncontained ECC
DEFAULT_WINDOW_DAYS = 14.0
MIN_JOBS = 2
ACKS = "fleet-acks.json"


@dataclass(frozen=True)
class Strike:
    """One job that named the node as its hardware origin (and the GPU, when it named one there)."""

    job_id: str
    time: float
    domain: str
    category: str
    quality: str
    xid: int | None = None
    pci_bus_id: str | None = None
    uuid: str | None = None

    @property
    def gpu(self) -> tuple | None:
        """The GPU's identity: its UUID when captured (it follows a moved board), else its slot."""
        if not self.pci_bus_id:
            return None
        return ("uuid", self.uuid) if self.uuid else ("slot", self.pci_bus_id)


@dataclass
class Offender:
    """A node named as the hardware origin of several jobs; one strike per job.  `pci_bus_id`
    names the GPU inside it that two or more of those jobs named (None: the node as a whole)."""

    node: str
    pci_bus_id: str | None
    strikes: list[Strike] = field(default_factory=list)
    uuid: str | None = None

    @property
    def jobs(self) -> list[str]:
        return [s.job_id for s in self.strikes]

    @property
    def memory_faults(self) -> bool:
        """Every fault of the named GPU is a memory fault."""
        gpu = ("uuid", self.uuid) if self.uuid else ("slot", self.pci_bus_id)
        mine = [s for s in self.strikes if s.gpu == gpu]
        return bool(mine) and all(s.category in MEMORY_CATEGORIES or s.xid in MEMORY_XIDS for s in mine)

    @property
    def recommendation(self) -> str:
        if self.pci_bus_id and self.memory_faults:
            return "rma"
        return "drain"

    def reason(self, window_days: float) -> str:
        what = f"GPU {self.pci_bus_id}" if self.pci_bus_id else "node"
        if self.uuid:
            what += f" {self.uuid}"
        kinds = sorted({f"{s.domain}/{s.category}" for s in self.strikes})
        jobs = ",".join(self.jobs[:6]) + ("..." if len(self.jobs) > 6 else "")
        return f"sattrib: repeat {what} fault in {len(self.strikes)} jobs/{window_days:g}d ({' '.join(kinds)}) jobs {jobs}"


def repeat_offenders(
    rows: list[Row], now: float, window_days: float = DEFAULT_WINDOW_DAYS, acks: dict[str, float] | None = None,
) -> list[Offender]:
    """Nodes named as the hardware culprit in >= 2 jobs in the window, worst first: one fault is
    one strike, of one offender.  A GPU with a known UUID is followed when it moves: its earlier
    faults go with it to the node where it was last seen."""
    strikes = _strikes(rows, now, window_days, acks or {})
    where = {s.gpu: node for node, s in strikes if s.uuid}  # in time order: the last node wins
    by_node: dict[str, list[Strike]] = {}
    for node, strike in strikes:
        by_node.setdefault(where.get(strike.gpu, node) if strike.uuid else node, []).append(strike)
    found = [_offender(node, found) for node, found in by_node.items() if len({s.job_id for s in found}) >= MIN_JOBS]
    return sorted(found, key=lambda o: (-len(o.strikes), o.node))


def _strikes(rows: list[Row], now: float, window_days: float, acks: dict[str, float]) -> list[tuple[str, Strike]]:
    """(node, strike) for each trusted hardware job of the window and each of its culprit nodes, in time order."""
    start = now - window_days * 86400
    out = []
    for row in sorted(rows, key=lambda r: (job_time(r), r.job_id)):
        when = job_time(row)
        if not row.trusted or row.domain not in HARDWARE_DOMAINS or row.systemic or row.quality not in ("confirmed", "likely"):
            continue
        if not start <= when <= now:
            continue
        for node in row.culprit_nodes:
            if when <= acks.get(node, float("-inf")):
                continue
            gpu = next((g for g in row.gpus if g.get("node") == node and g.get("pci_bus_id")), {})
            out.append((node, Strike(row.job_id, when, row.domain, row.category or "", row.quality, gpu.get("xid"),
                                     gpu.get("pci_bus_id"), gpu.get("uuid"))))
    return out


def _offender(node: str, strikes: list[Strike]) -> Offender:
    """The node's offender, naming the GPU that two or more of its jobs named (the most, first seen)."""
    strikes = sorted(strikes, key=lambda s: (s.time, s.job_id))
    counts = Counter(s.gpu for s in strikes if s.gpu)
    repeated = [gpu for gpu, count in counts.items() if count >= MIN_JOBS]
    if not repeated:
        return Offender(node, None, strikes)
    gpu = max(repeated, key=lambda g: counts[g])
    last = [s for s in strikes if s.gpu == gpu][-1]  # where it sits now
    return Offender(node, last.pci_bus_id, strikes, uuid=last.uuid)


def read_acks(results: str | Path) -> dict[str, float]:
    try:
        data = json.loads((Path(results) / ACKS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}


def acknowledge(results: str | Path, nodes: list[str], when: float) -> None:
    """Settle these nodes' earlier strikes (after a drain or a resume); atomic replace."""
    if not nodes:
        return
    acks = read_acks(results)
    for node in nodes:
        acks[node] = max(acks.get(node, 0.0), when)
    atomic.write_file(Path(results) / ACKS, (json.dumps(acks, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def fleet_drains(offenders: list[Offender], window_days: float, switch_side_nodes: set[str]) -> list[dict]:
    """One drain recommendation per repeat-offender node (its repeated GPU named in the reason); a
    node whose strikes are all network faults that a switch-side pattern explains is left alone."""
    from slurm_attrib.drain import clean_reason

    chosen = {o.node: o for o in offenders
              if not (o.node in switch_side_nodes and all(s.domain == "network" for s in o.strikes))}
    return [
        {"node": node, "reason": clean_reason(chosen[node].reason(window_days)), "status": RECOMMENDED,
         "detail": "", "jobs": chosen[node].jobs, "recommendation": chosen[node].recommendation, "source": "fleet",
         "gpu": chosen[node].pci_bus_id}
        for node in sorted(chosen)
    ]
