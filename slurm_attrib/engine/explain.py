"""Words for a verdict: the one-sentence summary, recommended actions and drain reasons."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurm_attrib.engine.correlate import HANG_TYPES
from slurm_attrib.engine.timefmt import iso
from slurm_attrib.model import Action, Drain, SymptomGroup

if TYPE_CHECKING:
    from slurm_attrib.engine.verdict import Verdict
    from slurm_attrib.engine.events import Event
    from slurm_attrib.ingest.types import JobContext

MAX_REASON_BYTES = 255

CATEGORY_WORDS = {
    "gpu_fell_off_bus": "a GPU fell off the bus",
    "gpu_uncorrectable_ecc": "an uncorrectable GPU memory (ECC) error",
    "gpu_row_remap_failure": "a GPU row-remapping failure",
    "gpu_nvlink": "an NVLink error",
    "gpu_firmware": "a GPU firmware (GSP) error",
    "gpu_hardware_other": "a GPU hardware error",
    "link_down": "a network link going down",
    "transport_error": "a network transport error",
    "fabric_other": "a network fabric error",
    "node_failure": "a node failure",
    "pcie_error": "a PCIe error",
    "kernel_fault": "a kernel fault",
    "host_hardware_other": "a host hardware error",
    "filesystem_error": "a filesystem error",
    "app_exception": "an exception in the application",
    "cuda_error": "a CUDA error in the application",
    "gpu_oom": "GPU memory exhaustion in the application (CUDA out of memory)",
    "host_oom": "host memory exhaustion (out-of-memory kill)",
    "nccl_usage": "a setup or usage error of the distributed communication (NCCL, MPI, rendezvous)",
    "app_killed_signal": "a process of the job killed by a signal",
    "time_limit": "the job's time limit",
    "cancelled": "a cancellation (scancel or an administrator)",
    "preempted": "preemption by the scheduler",
}

QUALITY_WORDS = {"confirmed": "caused by", "likely": "most likely caused by", "ambiguous": "possibly caused by"}

ADMIN_ACTIONS = {
    "gpu": "Drain {nodes}, run the GPU diagnostics (dcgmi diag) and reset or replace the GPU before returning it to service",
    "network": "Check the link, cable and switch port of {nodes} (ibstat, port counters) before returning it to service",
    "host": "Check {nodes} (console, BMC event log, kernel log) before returning it to service",
    "storage": "Check the shared filesystem's servers and clients; no compute node is at fault",
}
# The GPU's maker's own diagnostics (a GPU rule's event.vendor; the entry above is NVIDIA's DCGM):
# the ROCm Validation Suite and amd-smi, Intel's XPU Manager, Intel Gaudi's hl_qual and hl-smi,
# AWS's Neuron tools (which replace the instance of a device with uncorrectable errors).
VENDOR_GPU_ACTIONS = {
    "amd": "Drain {nodes}, run AMD's GPU diagnostics (the ROCm Validation Suite, rvs; amd-smi for the RAS "
           "error counts) and reset or replace the GPU before returning it to service",
    "intel": "Drain {nodes}, run Intel's GPU diagnostics (xpu-smi diag, xpu-smi health) and reset or replace "
             "the GPU before returning it to service",
    "habana": "Drain {nodes}, run the Gaudi qualification tests (hl_qual; hl-smi -q for the device's state) "
              "and reset or replace the device before returning it to service",
    "aws_neuron": "Drain {nodes}, check its Neuron devices (neuron-ls, neuron-monitor's hardware error counts) "
                  "and replace the instance before returning it to service",
}

# An object store (S3, GCS, Azure Blob) that refused or could not be reached is no shared
# filesystem: its owner checks the service and the bucket's request-rate limits, and the job's own
# request rate is the usual trigger (S3's SlowDown is per prefix: many ranks writing one at once).
TYPE_ACTIONS = {
    "object_store_error": (
        "Check the object store's health and the request-rate limits of the job's bucket or container; no compute node is at fault",
        "Lower the job's request rate to the object store (fewer ranks writing at once, larger parts, "
        "several prefixes, retries with back-off), then resubmit"),
    "object_store_unreachable": (
        "Check that the object store's endpoint resolves and answers from the job's nodes (DNS, proxy, "
        "routes); no compute node is at fault",
        "Check the endpoint the job names (endpoint_url, region, proxy settings), then resubmit"),
}

# A failed RDMA work completion whose status points at how the transfer was set up (protection,
# access, invalid request: rules/_codes.yaml points_at) is not a cable's fault.
RDMA_SETUP_ACTION = ("Check the RDMA setup of {nodes} (PCIe ACS / IOMMU, the GPUDirect peer-memory module, "
                     "memory registration limits) and the communication library's configuration; "
                     "the error code does not point at the link or cable")
RDMA_SETUP_POINTS_AT = ("configuration", "application")

USER_ACTIONS = {
    "app_exception": "Fix the exception shown in the evidence, then resubmit",
    "cuda_error": "Debug the CUDA error (CUDA_LAUNCH_BLOCKING=1 gives the failing kernel), then resubmit",
    "gpu_oom": "Reduce the per-GPU memory use (batch size, activation checkpointing), then resubmit",
    "host_oom": "Request more memory (--mem) or reduce host memory use, then resubmit",
    "nccl_usage": "Fix the NCCL/MPI environment or usage shown in the evidence (e.g. /dev/shm size, interface, binding), then resubmit",
    "app_killed_signal": "Find why the process was killed (signal in the evidence), then resubmit",
    "time_limit": "Request a longer time limit or checkpoint more often",
    "cancelled": "The job was cancelled; resubmit if that was not intended",
    "preempted": "The job was preempted; resubmit or requeue it",
}


def _event_words(event: "Event", culprits: list[str] | None = None) -> str:
    xid = event.fields.get("xid")
    where = f" on {event.node}" if event.node else ""
    if culprits and event.node not in culprits:
        where = f" at {', '.join(culprits)}" + (f" (reported by {event.node})" if event.node else "")
    if xid is not None:
        gpu = f" GPU {event.fields['pci']}" if event.fields.get("pci") else ""
        meaning = event.notes.get("xid_meaning", "")
        return f"Xid {xid} ({meaning}){where}{gpu}".replace(" ()", "")
    return f"{CATEGORY_WORDS.get(event.category or '', event.title)}{where}"


def summary_for(verdict: "Verdict", symptoms: list[SymptomGroup], job: "JobContext") -> str:
    job_words = f"Job {job.job_id}" if job.job_id else "The job"
    if verdict.primary is None:
        if verdict.hang is not None:
            return _hang_dump_summary(job_words, verdict)
        if verdict.category == "success":
            return f"{job_words} shows no failure."
        if verdict.category == "hang_unattributed" and verdict.culprits:
            return f"{job_words} hung in a collective; {verdict.culprits[0]} is the suspect: it is the only node that did not report the timeout."
        if verdict.category == "hang_unattributed" and not any(s.type in HANG_TYPES for s in symptoms):
            return f"{job_words} stopped short of its end, and no line says where or why."
        if verdict.category == "hang_unattributed":
            return f"{job_words} hung in a collective; the evidence does not show where it began."
        if job.state:
            return f"{job_words} ended {job.state}, but the evidence holds no recognised cause."
        return f"{job_words}: the evidence holds no recognised failure, and no sign that the job completed."
    primary = verdict.primary
    at = f" at {iso(primary.time)}" if primary.time is not None else ""
    if verdict.systemic:
        return f"{job_words} failed with {CATEGORY_WORDS.get(primary.category, primary.title)} on many nodes at once{at}: a systemic problem, no single node is at fault."
    if verdict.rivals:
        nodes = ", ".join(verdict.culprits)
        return f"{job_words} failed; independent faults on {nodes} cannot be ordered in time: {_event_words(primary)}{at} is one of them."
    if primary.fallback:
        return f"{job_words} failed; no rule knows its wording, and the nearest lead is {_event_words(primary, verdict.culprits)}{at}."
    if primary.domain == "scheduler":
        return f"{job_words} was ended by {CATEGORY_WORDS[primary.category]}{at}."
    followers = sum(group.count for group in symptoms if group.explained_by)
    tail = f"; {followers} later error line(s) follow from it" if followers else ""
    return f"{job_words} failed, {QUALITY_WORDS.get(verdict.quality, 'caused by')} {_event_words(primary, verdict.culprits)}{at}{tail}."


def _hang_dump_summary(job_words: str, verdict: "Verdict") -> str:
    ranks = verdict.hang.ranks
    who = (f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks)))
    where = f" on {', '.join(verdict.culprits)}" if verdict.culprits else ""
    if verdict.hang.kind == "mismatch":
        return f"{job_words} hung because its ranks called different collectives; {who}{where} diverged from the others. {verdict.hang.reason}"
    return f"{job_words} hung in a collective; {who}{where} is the likely origin. {verdict.hang.reason}"


def actions_for(verdict: "Verdict", drains: list[Drain]) -> list[Action]:
    actions: list[Action] = []
    primary = verdict.primary
    if primary is None and verdict.hang is not None:
        if verdict.hang.kind == "mismatch":
            actions.append(Action(who="user", text="Make every rank call the same collectives in the same order with the same sizes (a rank-dependent branch, uneven data or a skipped step); the dumps show where they diverged"))
        else:
            actions.append(Action(who="user", text="Look at what the suspect rank was doing (its stack, its data loader, its node's health) before resubmitting; resubmit excluding its node if it hangs again"))
        return actions
    if primary is None:
        if verdict.category == "hang_unattributed":
            actions.append(Action(who="user", text="Enable the PyTorch flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE) and NCCL_DEBUG=WARN to locate the hang next time"))
        return actions
    if primary.fallback:
        who = "admin" if primary.domain in ADMIN_ACTIONS else "user"
        actions.append(Action(who=who, text="Read the lead line and its neighbours in the evidence: no rule knows this wording, so the cause is a guess (report the wording so a rule can read it)"))
        return actions
    nodes = ", ".join(verdict.culprits) or "the nodes named in the evidence"
    if primary.notes.get("xid_action"):
        actions.append(Action(who="admin", text=f"NVIDIA's recommended action for Xid {primary.fields.get('xid')}: {primary.notes['xid_action']}"))
    if primary.domain in ADMIN_ACTIONS and not verdict.systemic:
        actions.append(Action(who="admin", text=_admin_action(primary).format(nodes=nodes)))
    if verdict.systemic:
        actions.append(Action(who="admin", text="Investigate the shared service (filesystem, fabric) used by all nodes; do not drain nodes one by one"))
    # a code's own advice (rules/_codes.yaml `action`) before its type's or category's general one
    user_action = primary.notes.get("code_action") or _user_action(primary)
    if user_action:
        actions.append(Action(who="user", text=user_action))
    elif primary.domain in ("gpu", "network", "host"):
        actions.append(Action(who="user", text="Resubmit the job excluding the culprit node(s) (--exclude)" if verdict.culprits else "Resubmit the job"))
    if primary.domain in ("gpu", "network", "host") and not drains and verdict.culprits:
        actions.append(Action(who="admin", text=f"Not drained automatically: {_why_not_drained(verdict)}"))
    return actions


def _admin_action(primary: "Event") -> str:
    """The admin's next step for a cause in an admin's domain: the most specific table's."""
    if primary.notes.get("ib_status_points_at") in RDMA_SETUP_POINTS_AT:
        return RDMA_SETUP_ACTION
    if primary.type in TYPE_ACTIONS:
        return TYPE_ACTIONS[primary.type][0]
    return VENDOR_GPU_ACTIONS.get(primary.vendor, ADMIN_ACTIONS[primary.domain])


def _user_action(primary: "Event") -> str | None:
    if primary.type in TYPE_ACTIONS:
        return TYPE_ACTIONS[primary.type][1]
    return USER_ACTIONS.get(primary.category)


def _why_not_drained(verdict: "Verdict") -> str:
    """The first of pol.drain's conditions the verdict missed, in the admin's words."""
    faults = [verdict.primary, *verdict.rivals]
    if not all(f.trusted for f in faults):
        return "only lines a user could have written report the fault (no kernel, Slurm daemon or root-run probe recorded it)"
    if verdict.quality not in ("confirmed", "ambiguous"):
        return f"the diagnosis is not sure of its cause ({verdict.quality})"
    if any(f.strength < 3 for f in faults):
        return "the recorded error does not by itself say the hardware must leave service (contained, recoverable or unspecific)"
    if verdict.primary.node not in verdict.culprits:
        return "the culprit is inferred from other nodes' records, none of its own (Slurm marks a node it lost DOWN itself)"
    return "the drain policy (pol.drain) holds for no row that drains"


def drain_reason(primary: "Event", job: "JobContext") -> str:
    """The essential first: `sinfo -R` shows only 20 characters."""
    job_part = f" job {job.job_id}" if job.job_id else ""
    xid = primary.fields.get("xid")
    if xid is not None:
        pci = primary.fields.get("pci", "")
        gpu = f" GPU {pci.split(':', 1)[-1]}" if pci else ""
        head = f"sattrib: Xid{xid}{gpu}"
    else:
        device = primary.fields.get("device") or primary.fields.get("pci") or ""
        head = f"sattrib: {primary.category}" + (f" {device}" if device else "")
    reason = f"{head}{job_part}"
    return reason.encode()[:MAX_REASON_BYTES].decode(errors="ignore")
