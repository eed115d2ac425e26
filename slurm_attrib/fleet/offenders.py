"""Repeat offenders: nodes and GPUs named as the hardware culprit of several independent jobs.

One job's `likely` is not enough to drain a node; the same node or GPU named as the hardware
origin of two or more jobs within a window (default 14 days) is.  Only a job whose cause rests on
evidence no user could have written counts (its row's `trusted`, set from the cause event's
provenance): a job's output, however it looks, never strikes a node.  A GPU whose repeated faults are
memory faults (uncorrectable ECC, row-remap failures) is also an RMA candidate.

Acknowledgements: once a repeat offender is drained through `sattrib drain --apply`, or resumed
with `sattrib undrain`, its earlier jobs are settled: only jobs that end after that moment count
again.  They are kept in `<results>/fleet-acks.json` ({node: UNIX time}).
"""

from __future__ import annotations

import json
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
    """One job that named the node (and maybe GPU) as its hardware origin."""

    job_id: str
    time: float
    domain: str
    category: str
    quality: str
    xid: int | None = None


@dataclass
class Offender:
    node: str
    pci_bus_id: str | None  # None: the node as a whole
    strikes: list[Strike] = field(default_factory=list)
    uuid: str | None = None

    @property
    def jobs(self) -> list[str]:
        return [s.job_id for s in self.strikes]

    @property
    def memory_faults(self) -> bool:
        return all(s.category in MEMORY_CATEGORIES or s.xid in MEMORY_XIDS for s in self.strikes)

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
    """Nodes and GPUs named as the hardware culprit in >= 2 jobs in the window, worst first."""
    acks = acks or {}
    start = now - window_days * 86400
    nodes: dict[str, Offender] = {}
    gpus: dict[tuple[str, str], Offender] = {}
    for row in sorted(rows, key=lambda r: (job_time(r), r.job_id)):
        when = job_time(row)
        if not row.trusted or row.domain not in HARDWARE_DOMAINS or row.systemic or row.quality not in ("confirmed", "likely"):
            continue
        if not start <= when <= now:
            continue
        for node in row.culprit_nodes:
            if when <= acks.get(node, float("-inf")):
                continue
            strike = Strike(row.job_id, when, row.domain, row.category or "", row.quality)
            nodes.setdefault(node, Offender(node, None)).strikes.append(strike)
            for gpu in row.gpus:
                if gpu.get("node") == node and gpu.get("pci_bus_id"):
                    # a GPU with a known UUID is followed when it moves to another slot or node
                    key = ("uuid", gpu["uuid"]) if gpu.get("uuid") else (node, gpu["pci_bus_id"])
                    offender = gpus.setdefault(key, Offender(node, gpu["pci_bus_id"], uuid=gpu.get("uuid")))
                    offender.node, offender.pci_bus_id = node, gpu["pci_bus_id"]  # where it was last seen
                    offender.strikes.append(Strike(row.job_id, when, row.domain, row.category or "", row.quality, gpu.get("xid")))
    found = [o for o in [*nodes.values(), *gpus.values()] if len({s.job_id for s in o.strikes}) >= MIN_JOBS]
    for offender in found:
        offender.strikes.sort(key=lambda s: (s.time, s.job_id))
    return sorted(found, key=lambda o: (-len(o.strikes), o.node, o.pci_bus_id or ""))


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
    """One drain recommendation per repeat-offender node (GPU offenders named in the reason); a node
    whose strikes are all network faults that a switch-side pattern explains is left alone."""
    from slurm_attrib.drain import clean_reason

    chosen: dict[str, Offender] = {}
    for offender in offenders:
        if offender.node in switch_side_nodes and all(s.domain == "network" for s in offender.strikes):
            continue
        best = chosen.get(offender.node)
        # a GPU offender names the part to replace: it wins over its node's own entry
        if best is None or (offender.pci_bus_id and not best.pci_bus_id):
            chosen[offender.node] = offender
    return [
        {"node": node, "reason": clean_reason(chosen[node].reason(window_days)), "status": RECOMMENDED,
         "detail": "", "jobs": chosen[node].jobs, "recommendation": chosen[node].recommendation, "source": "fleet"}
        for node in sorted(chosen)
    ]

