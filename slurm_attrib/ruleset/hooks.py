"""Python refinements for rules whose meaning depends on captured values.

A hook takes the Hit a YAML rule produced and returns it refined (role, category, strength and
notes such as NVIDIA's recommended action).  Hooks are pure: no I/O beyond reading the bundled
catalog once.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

import yaml

from slurm_attrib.paths import bundled_dir

if TYPE_CHECKING:
    from slurm_attrib.ruleset.scanner import Hit

XID_ROLES = {
    # points_at -> (role, strength, severity)
    "hardware": ("cause", 3, "critical"),
    "application": ("cause", 1, "warning"),  # a fault of the application, seen by the GPU
    "follow_on": ("symptom", 1, "warning"),
    "informational": ("context", 1, "info"),
}


@cache
def xid_catalog() -> dict[int, dict[str, Any]]:
    """The NVIDIA Xid catalog shipped as rules/_xid_catalog.yaml, keyed by Xid number."""
    path = bundled_dir("rules") / "_xid_catalog.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {int(number): entry for number, entry in data["xids"].items()}


def refine_xid(hit: "Hit") -> "Hit":
    """Role and category of an Xid from the catalog: only hardware Xids can be a cause."""
    xid = hit.fields.get("xid")
    entry = xid_catalog().get(xid)
    if entry is None:
        hit.role, hit.strength, hit.severity = "context", 1, "warning"
        hit.notes["xid_action"] = "CONTACT_SUPPORT"
        hit.notes["xid_meaning"] = f"Xid {xid} is not in the bundled catalog"
        return hit
    hit.role, hit.strength, hit.severity = XID_ROLES[entry["points_at"]]
    hit.category = entry.get("category", "gpu_hardware_other") if hit.role == "cause" else None
    if entry["points_at"] == "application":
        # NVIDIA: restart the application.  Never a GPU culprit, never a drain; a contained ECC
        # error (94) keeps its memory-error category, other application Xids are CUDA errors.
        hit.domain, hit.category = ("gpu", entry["category"]) if "category" in entry else ("application", "cuda_error")
        hit.notes["no_culprit"] = True
    hit.notes["xid_action"] = entry["action"]
    hit.notes["xid_meaning"] = entry["description"]
    hit.notes["xid_points_at"] = entry["points_at"]
    _xid_details(hit, xid)
    return hit


# Xid 154 states the recovery action itself (domain-facts §1.3, [S1][S25]).
_RECOVERY_ACTION = re.compile(r"GPU recovery action changed from 0x[0-9a-fA-F]+ \(([^)]*)\) to 0x[0-9a-fA-F]+ \(([^)]*)\)")
# NVLink5 Xids 144-150 print `<UNIT> Fatal|Nonfatal XC0|XC1 i<n> Link <nn> (...)` ([S6]).
_NVLINK5 = re.compile(r"\b(Fatal|Nonfatal)\s+XC[01]\s+i\d+\s+Link\s+(\d+)")


def _xid_details(hit: "Hit", xid: int | None) -> None:
    """Details the message itself carries: Xid 154's new recovery action, NVLink5 fatality."""
    if xid == 154:
        found = _RECOVERY_ACTION.search(hit.text)
        if found:
            hit.notes["recovery_action"] = found.group(2)
    elif xid is not None and 144 <= xid <= 150:
        found = _NVLINK5.search(hit.text)
        if found:
            hit.notes["nvlink_fatal"] = found.group(1) == "Fatal"
            hit.notes["nvlink_link"] = int(found.group(2))
            if found.group(1) == "Nonfatal":
                # The catalog: severity is not implied by the number; a Nonfatal NVLink5 event
                # does not end the job by itself: a weak cause, never a drain.
                hit.strength, hit.severity = 1, "warning"
    prev = hit.fields.get("prev_xid")
    entry = xid_catalog().get(prev) if prev is not None else None
    if hit.role == "symptom" and entry is not None and entry["points_at"] == "hardware":
        # "Xid 45 ... caused by previous Xid 149": the earlier Xid may be missing from the log.
        hit.role, hit.strength, hit.category = "cause", 2, entry["category"]
        hit.notes["caused_by_xid"] = prev


# ibv_wc_status numbering from NCCL's bundled verbs header (domain-facts §2.3, [S10]).
IBV_WC_STATUS = {
    0: "IBV_WC_SUCCESS",
    1: "IBV_WC_LOC_LEN_ERR",
    2: "IBV_WC_LOC_QP_OP_ERR",
    3: "IBV_WC_LOC_EEC_OP_ERR",
    4: "IBV_WC_LOC_PROT_ERR",
    5: "IBV_WC_WR_FLUSH_ERR",
    6: "IBV_WC_MW_BIND_ERR",
    7: "IBV_WC_BAD_RESP_ERR",
    8: "IBV_WC_LOC_ACCESS_ERR",
    9: "IBV_WC_REM_INV_REQ_ERR",
    10: "IBV_WC_REM_ACCESS_ERR",
    11: "IBV_WC_REM_OP_ERR",
    12: "IBV_WC_RETRY_EXC_ERR",
    13: "IBV_WC_RNR_RETRY_EXC_ERR",
    14: "IBV_WC_LOC_RDD_VIOL_ERR",
    15: "IBV_WC_REM_INV_RD_REQ_ERR",
    16: "IBV_WC_REM_ABORT_ERR",
    17: "IBV_WC_INV_EECN_ERR",
    18: "IBV_WC_INV_EEC_STATE_ERR",
    19: "IBV_WC_FATAL_ERR",
    20: "IBV_WC_RESP_TIMEOUT_ERR",
    21: "IBV_WC_GENERAL_ERR",
}


def refine_ib_status(hit: "Hit") -> "Hit":
    """Name the ibv_wc_status of an NCCL IB completion error; a flush (5) is secondary."""
    status = hit.fields.get("status")
    hit.notes["ib_status_name"] = IBV_WC_STATUS.get(status, f"unknown ibv_wc_status {status}")
    if status == 5:
        # WR_FLUSH_ERR: work requests flushed because the QP already went to error state —
        # follows another failure ([S10][S21a]).
        hit.role, hit.strength, hit.severity = "symptom", 1, "warning"
    elif status == 12:
        hit.notes["hint"] = "transport retry counter exceeded: the peer NIC/link stopped answering"
    return hit


def refine_sxid(hit: "Hit") -> "Hit":
    """NVSwitch SXid: the line itself says Fatal or Non-fatal ([S6][S5t])."""
    fatality = (hit.fields.get("fatal") or "").lower()
    hit.notes["sxid_fatal"] = fatality == "fatal"
    if fatality != "fatal":
        hit.role, hit.strength, hit.severity, hit.category = "context", 1, "warning", None
    return hit


def refine_nccl_busid(hit: "Hit") -> "Hit":
    """NCCL's `busId 3b000` (hex of the PCI id without separators) -> '0000:3b:00' ([S10])."""
    busid = str(hit.fields.get("busid", ""))
    try:
        digits = f"{int(busid, 16):09x}"
    except ValueError:
        return hit
    hit.notes["pci"] = f"{digits[-9:-5]}:{digits[-5:-3]}:{digits[-3:-1]}"
    return hit


MCE_STATUS_UC = 1 << 61  # IA32_MCi_STATUS: uncorrected error (Intel SDM vol. 3B, 16.3.2.2)


def refine_mce_status(hit: "Hit") -> "Hit":
    """A machine-check bank whose status has UC set is a hardware fault; corrected ones are context."""
    status = int(hit.fields.get("status", "0"), 16)
    if not status & MCE_STATUS_UC:
        hit.role, hit.strength, hit.severity, hit.category = "context", 1, "warning", None
        hit.notes["mce"] = "corrected"
    else:
        hit.notes["mce"] = "uncorrected"
    return hit


# Signals that kill a process by its own fault (a cause) versus signals sent to it by others
# (teardown: torchrun's SIGTERM, the watchdog's SIGABRT).  SIGKILL is often the OOM killer or a
# teardown too, so it is only a weak cause.  Numbers: signal(7) on Linux x86_64/arm64.
FAULT_SIGNALS = {4: "SIGILL", 7: "SIGBUS", 8: "SIGFPE", 11: "SIGSEGV"}
TEARDOWN_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 15: "SIGTERM"}


def refine_exit_signal(hit: "Hit") -> "Hit":
    """A process that died by a signal: its own fault (SIGSEGV...) or teardown (SIGTERM, SIGABRT)."""
    signal = hit.fields.get("signal")
    exitcode = hit.fields.get("exitcode")
    if not isinstance(signal, int):
        signal = -exitcode if isinstance(exitcode, int) and exitcode < 0 else None
    if signal is None:
        return hit
    hit.notes["signal"] = FAULT_SIGNALS.get(signal) or TEARDOWN_SIGNALS.get(signal) or f"signal {signal}"
    if signal in FAULT_SIGNALS:
        hit.role, hit.domain, hit.category, hit.strength = "cause", "application", "app_killed_signal", 2
    elif signal == 9:
        hit.role, hit.domain, hit.category, hit.strength = "cause", "application", "app_killed_signal", 1
    else:
        hit.role, hit.category = "symptom", None
    return hit


HOOKS: dict[str, Callable[["Hit"], "Hit"]] = {
    "xid": refine_xid,
    "mce_status": refine_mce_status,
    "exit_signal": refine_exit_signal,
    "ib_status": refine_ib_status,
    "sxid": refine_sxid,
    "nccl_busid": refine_nccl_busid,
}
