"""Python refinements for rules whose meaning depends on captured values.

A hook takes the Hit a YAML rule produced and returns it refined (role, category, strength and
notes such as NVIDIA's recommended action).  Hooks are pure: no I/O beyond reading the bundled
catalog once.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_attrib.paths import bundled_dir
from slurm_attrib.ruleset.cache import cached, code_digest
from slurm_attrib.ruleset.loader import load_yaml_file
from slurm_attrib.ruleset.spec import Decode, compiled
from slurm_attrib.vocab import OTHER_READING


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
    return cached("xids", [path], lambda: _build_xid_catalog(path), lambda value: isinstance(value, dict), code=_CODE)


def _build_xid_catalog(path: Path) -> dict[int, dict[str, Any]]:
    return {int(number): entry for number, entry in load_yaml_file(path)["xids"].items()}


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


# Like the rules' regexes, these read log text: RE2, linear in the line.
# Xid 154 states the recovery action itself (domain-facts §1.3, [S1][S25]).
_RECOVERY_ACTION = compiled(r"GPU recovery action changed from 0x[0-9a-fA-F]+ \(([^)]*)\) to 0x[0-9a-fA-F]+ \(([^)]*)\)")
# NVLink5 Xids 144-150 print `<UNIT> Fatal|Nonfatal XC0|XC1 i<n> Link <nn> (...)` ([S6]).
_NVLINK5 = compiled(r"\b(Fatal|Nonfatal)\s+XC[01]\s+i\d+\s+Link\s+(\d+)")


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


# --- code tables (rules/_codes.yaml) -----------------------------------------------------------

# Every family's codes are keyed by number and by every printed spelling (name, name without its
# prefix, message, aliases), normalised: lower case, single spaces, no trailing period or quotes.
_NAME_IN_TEXT = compiled(
    r"\b(?:cudaError\w+|CUDA_ERROR_\w+|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|IBV_WC_\w+|nccl[A-Z]\w+|SIG[A-Z0-9]+)\b"
)
_NUMBER = compiled(r"[-+]?[0-9]+")


def _norm(text: str) -> str:
    return " ".join(str(text).strip().strip("'\"`").rstrip(".").split()).lower()


@cache
def code_tables() -> dict[str, dict[str, Any]]:
    """The code families of rules/_codes.yaml, each with `by_number` and `by_key` indexes (built
    once per version of the file: kept in the user's cache)."""
    path = bundled_dir("rules") / "_codes.yaml"
    return cached("codes", [path], lambda: _build_code_tables(path), lambda value: isinstance(value, dict), code=_CODE)


def _build_code_tables(path: Path) -> dict[str, dict[str, Any]]:
    families = load_yaml_file(path)["families"]
    tables: dict[str, dict[str, Any]] = {}
    for family, data in families.items():
        by_number: dict[int, dict[str, Any]] = {}
        by_key: dict[str, dict[str, Any]] = {}
        prefix = data.get("prefix", "")
        for number, entry in data["codes"].items():
            entry = {**entry, "number": int(number), "family": family}
            by_number[int(number)] = entry
            name = entry["name"]
            keys = [name, *(entry.get("aliases") or [])]
            if prefix and name.startswith(prefix) and len(name) > len(prefix):
                keys.append(name[len(prefix):])
            if entry.get("message"):
                keys.append(entry["message"])
            for key in keys:
                by_key.setdefault(_norm(key), entry)
        tables[family] = {**data, "by_number": by_number, "by_key": by_key}
    return tables


def decode_code(families: tuple[str, ...] | str, value: Any) -> dict[str, Any] | None:
    """The table entry a captured value names: a number, a name, a message, or text holding a name.

    Safe on any input: returns None for what no table knows (None, '', floats, unknown text)."""
    if isinstance(families, str):
        families = (families,)
    tables = code_tables()
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, str) and _NUMBER.fullmatch(value.strip())):
        number = int(value)
        for family in families:
            entry = tables[family]["by_number"].get(number)
            if entry is not None:
                return entry
        return None
    if not isinstance(value, str) or not value.strip():
        return None
    key = _norm(value)
    for family in families:
        entry = tables[family]["by_key"].get(key)
        if entry is not None:
            return entry
    # A name inside longer text ("status=IBV_WC_RETRY_EXC_ERR(12)", "CUDA_ERROR_ECC_UNCORRECTABLE: ...").
    for found in _NAME_IN_TEXT.finditer(value):
        for family in families:
            entry = tables[family]["by_key"].get(found.group().lower())
            if entry is not None:
                return entry
    # A message inside longer text ("CUDA error: unknown error" / "... (run with NCCL_DEBUG=INFO ...)").
    # The longest known message wins ("unspecified launch failure in prior launch" over
    # "unspecified launch failure"); short keys (< 12 characters) never match inside text.
    for family in families:
        found = [k for k in tables[family]["by_key"] if len(k) >= 12 and k in key]
        if found:
            return tables[family]["by_key"][max(found, key=len)]
    return None


def _apply_code(hit: "Hit", entry: dict[str, Any], note: str) -> "Hit":
    """Domain, category, role and strength of the table entry; notes name the code."""
    hit.notes[f"{note}_name"] = entry["name"]
    hit.notes[f"{note}_number"] = entry["number"]
    if entry.get("message"):
        hit.notes[f"{note}_message"] = entry["message"]
    hit.notes[f"{note}_points_at"] = entry["points_at"]
    role = entry["role"]
    if entry["domain"] == "none" or role == "context":
        hit.role, hit.strength, hit.category = "context", 1, None
        hit.severity = "info" if entry["domain"] == "none" else "warning"
        return hit
    hit.domain, hit.role, hit.strength = entry["domain"], role, entry["strength"]
    hit.category = entry.get("category")
    if entry.get("other_reading"):  # the same code read another way by other sites and threads
        hit.notes[OTHER_READING] = entry["other_reading"]
    if entry.get("action"):  # what the job's owner should do about this code (engine/explain.py)
        hit.notes["code_action"] = entry["action"]
    if role == "cause" and hit.category is None:  # a cause needs a category: keep the rule's
        hit.category = hit.rule.event.category
    if role == "symptom":
        hit.severity = "warning" if hit.severity in ("critical",) else hit.severity
    if entry["domain"] == "gpu" and role == "cause" and entry["strength"] >= 2:
        hit.severity = "critical"
    return hit


@cache
def ibv_wc_status() -> dict[int, str]:
    """ibv_wc_status number -> name, read from rules/_codes.yaml."""
    return {number: entry["name"] for number, entry in code_tables()["ibv_wc_status"]["by_number"].items()}


def refine_ib_status(hit: "Hit") -> "Hit":
    """Name and decode the ibv_wc_status of an IB completion error from the code table.

    12/13 (retry counters exceeded) = the peer stopped answering; 4/8/9/10 point at memory
    registration / GPUDirect configuration or the software's use of verbs; 5 (WR_FLUSH_ERR) is
    secondary.  The status is read as a number, else by name or message (`msg`: UCX's words)."""
    status = hit.fields.get("status")
    entry = None
    for name in ("status", "status_name", "msg", "old_msg"):
        entry = entry or decode_code("ibv_wc_status", hit.fields.get(name))
    if entry is None:
        if status is not None:
            hit.notes["ib_status_name"] = f"unknown ibv_wc_status {status}"
        return hit
    _apply_code(hit, entry, "ib_status")
    if entry["number"] == 5:
        hit.severity = "warning"
    elif entry["number"] == 12:
        hit.notes["hint"] = "transport retry counter exceeded: the peer NIC/link stopped answering"
    return hit


def refine_ib_async_event(hit: "Hit") -> "Hit":
    """An asynchronous event of one queue pair or CQ broke that connection's transfers (a
    transport error); a device-level fatal event (local catastrophic error) is the HCA itself;
    IBV_EVENT_PORT_ERR (Open MPI names the event) is the port going down."""
    message = hit.fields.get("msg") or hit.fields.get("old_msg") or ""
    if hit.fields.get("event") == "IBV_EVENT_PORT_ERR":
        hit.category = "link_down"
    elif hit.fields.get("on") or "work queue" in message or message == "CQ error":
        hit.category = "transport_error"
    return hit


def decode_fields(hit: "Hit", decode: "Decode") -> "Hit":
    """A rule's event.decode: the first of the hit's fields that the code tables know decides the
    domain (_apply_code); unknown values leave the rule as it is."""
    for name in decode.fields:
        value = hit.fields.get(name)
        entry = decode_code(tuple(decode.families), value) if value not in (None, "") else None
        if entry is not None:
            return _apply_code(hit, entry, decode.note)
    return hit


CUDA_FAMILIES = ("cuda_runtime", "cuda_driver")


def refine_hip_code(hit: "Hit") -> "Hit":
    """A hipError name decoded through its CUDA twin: the same name with `cuda` for `hip`, except
    the two that HIP renamed (hipErrorOutOfMemory, hipErrorIllegalAddress)."""
    name = hit.fields.get("name") or ""
    twin = {"OutOfMemory": "cudaErrorMemoryAllocation", "IllegalAddress": "cudaErrorIllegalAddress"}.get(name, f"cudaError{name}")
    entry = decode_code(CUDA_FAMILIES, twin)
    return _apply_code(hit, entry, "cuda_error") if entry is not None else hit


_SWITCH_STOPPED = compiled(r"SOE|Shutting Down")


def refine_sxid(hit: "Hit") -> "Hit":
    """NVSwitch SXid: the line itself says Fatal or Non-fatal ([S6][S5t])."""
    fatality = (hit.fields.get("fatal") or "").lower()
    message = hit.fields.get("msg") or ""
    if not fatality and message:
        # No severity word: the switch firmware (SOE) halting or an OVERT thermal shutdown stops the
        # switch; temperature / slowdown reports do not.
        fatality = "fatal" if _SWITCH_STOPPED.search(message) else ""
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
# teardown too, so it is only a weak cause.  Table: rules/_codes.yaml family `signal`.
def _signal_names(roles: tuple[str, ...], strength: int | None = None) -> dict[int, str]:
    return {
        number: entry["name"]
        for number, entry in code_tables()["signal"]["by_number"].items()
        if entry["role"] in roles and (strength is None or entry["strength"] == strength)
    }


@cache
def fault_signals() -> dict[int, str]:
    return _signal_names(("cause",), 2)


@cache
def teardown_signals() -> dict[int, str]:
    return _signal_names(("symptom",))


def decode_signal(signal: Any = None, exitcode: Any = None) -> tuple[int, str] | None:
    """(signal number, how it was read) from a signal field (number or name) or an exit code:
    -N (Python subprocess, torchrun) or a shell status 128+N."""
    if isinstance(signal, str) and signal.strip():
        entry = decode_code("signal", signal)
        if entry is not None:
            return entry["number"], "signal"
    if isinstance(signal, int) and not isinstance(signal, bool):
        return signal, "signal"
    if isinstance(exitcode, int) and not isinstance(exitcode, bool):
        if exitcode < 0:
            return -exitcode, "negative exit code"
        if 128 < exitcode <= 128 + 64:
            return exitcode - 128, "shell status 128+N"
    return None


def refine_exit_signal(hit: "Hit") -> "Hit":
    """A process that died by a signal: its own fault (SIGSEGV...) or teardown (SIGTERM, SIGABRT)."""
    decoded = decode_signal(hit.fields.get("signal"), hit.fields.get("exitcode"))
    if decoded is None:
        return hit
    signal, source = decoded
    entry = code_tables()["signal"]["by_number"].get(signal)
    hit.notes["signal"] = entry["name"] if entry else f"signal {signal}"
    if source != "signal":
        hit.notes["signal_from"] = source
    if entry is not None and entry["role"] == "cause":
        hit.role, hit.domain, hit.category, hit.strength = "cause", entry["domain"], entry["category"], entry["strength"]
        if entry["name"] == "SIGKILL":
            hit.notes["inferred"] = "SIGKILL with no sender in the evidence: most often the kernel's or the cgroup's OOM killer"
    else:
        hit.role, hit.category = "symptom", None
    return hit


def refine_reported_xid(hit: "Hit") -> "Hit":
    """An Xid that a health check (NHC, a site's GPU check) reports having found: the catalog
    decides what it points at, but the report is second hand (it may be an Xid from before the
    job), so it never confirms a hardware fault by itself."""
    refine_xid(hit)
    entry = xid_catalog().get(hit.fields.get("xid"))
    if entry is not None and entry["points_at"] == "informational":
        # The check failed the node for it (the site's policy): a memory-retirement event means
        # memory errors happened, any other reported Xid is a GPU fault of no known kind.
        memory = "DRAM" in entry["name"] or "ECC" in entry["name"]
        hit.role, hit.strength, hit.severity = "cause", 2, "error"
        hit.category = "gpu_uncorrectable_ecc" if memory else "gpu_hardware_other"
    if hit.role == "cause":
        hit.notes["inferred"] = f"a health check reported Xid {hit.fields.get('xid')}: the driver's own line is not in the evidence"
    return hit


# NHC check names (check_<area>_...) and message words -> what the failing check tested.
_HEALTH_CHECK_AREAS = (
    # a check that could not run its test: its MPI/NCCL dependencies missing (AzNHC's
    # check_all_reduce_dependencies `HPCX_DIR is not set`): the launch's set-up, not the node
    (compiled(r"(?i)\bdependenc\w*\b.*\b(?:is not set|not installed|not found)\b|\b(?:hpcx|mpi|nccl)\w*\b.*\bis not set\b"),
     "application", "nccl_usage"),
    # the host's own memory (NHC's check_hw_edac, check_hw_physmem), before the GPUs' `ecc`
    (compiled(r"(?i)\bedac\b|check_hw_edac|\bdimm\b|check_hw_physmem|\bcsrow"), "host", "host_hardware_other"),
    # unreclaimable slab above the limit (NHC's check_hw_slab_unreclaimable): the kernel leaking memory
    (compiled(r"(?i)\bslab\b|slab_unreclaimable"), "host", "kernel_fault"),
    # what AzNHC's GPU checks name (csc_nvidia_smi, azure_gpu_nvlink, azure_gpu_ecc), before the
    # GPU area at large: a GPU gone from the bus, inactive NVLinks, row remaps
    (compiled(r"(?i)fallen off the bus|gpu is lost"), "gpu", "gpu_fell_off_bus"),
    (compiled(r"(?i)nvlinks? (?:\w+ )?(?:inactive|down)\b|\bp2p test\b"), "gpu", "gpu_nvlink"),
    (compiled(r"(?i)row.?remap"), "gpu", "gpu_row_remap_failure"),
    # a GPU's (or its SRAM's, HBM's, DRAM's) uncorrectable ECC errors: AzNHC's check_gpu_ecc
    (compiled(r"(?i)(?:gpu|sram|hbm)\b.*\b(?:uncorrectable ecc|double.bit|dbe|dram uncorrectable)\b"), "gpu", "gpu_uncorrectable_ecc"),
    # a collective's bandwidth below the node's norm (AzNHC's check_nccl_allreduce): its links
    (compiled(r"(?i)nccl.{0,40}\bbus bw\b|\bnccl_allreduce\b"), "network", "fabric_other"),
    # the host-to-device copy bandwidth (AzNHC's check_gpu_bw H2D/D2H; its P2P test is the NVLinks'): the PCIe link
    (compiled(r"(?i)host.to.device|\bh2d\b|\bd2h\b"), "host", "pcie_error"),
    (compiled(r"(?i)xid|gpu|nvidia|nvsmi|nvml|dcgm|nvlink|cuda|ecc"), "gpu", "gpu_hardware_other"),
    # NHC's check_hw_ib `No IB port is ACTIVE`, a port or link it found down
    (compiled(r"(?i)no (?:ib |infiniband |opa )?port(?: \S+)? is active|\bport\b[^\n]*\b(?:not active|is down)\b|\blink (?:is )?down\b"),
     "network", "link_down"),
    (compiled(r"(?i)\bib\b|_ib\b|infiniband|mlx\d|hca|\blink\b|ethernet|_net|_eth|rdma|\bopa\b|hfi"), "network", "fabric_other"),
    (compiled(r"(?i)_fs_|mount|disk|lustre|gpfs|nfs|beegfs|filesystem|file system|inode|quota"), "storage", "filesystem_error"),
    (compiled(r"(?i)mem|dimm|swap|cpu|mce|edac|thermal|temp|fan|power|psu|bmc|ipmi"), "host", "host_hardware_other"),
)


def refine_health_check(hit: "Hit") -> "Hit":
    """A failed node health check: what the check tested (its name, its message) decides the domain;
    a check of no known area is a node failure."""
    text = " ".join(str(hit.fields.get(name) or "") for name in ("check", "check2", "msg"))
    for pattern, domain, category in _HEALTH_CHECK_AREAS:
        if pattern.search(text):
            hit.domain, hit.category = domain, category
            break
    hit.notes["inferred"] = "a node health check failed: its own message names the problem, not the component's log"
    return hit


def refine_k8s_eviction(hit: "Hit") -> "Hit":
    """What the kubelet evicted the pod for: memory (the rule's host_oom; a memory-backed /dev/shm
    emptyDir too), disk (node filesystem, image filesystem, ephemeral storage, any other emptyDir:
    a storage fault), or unnamed (a pod listed as Evicted: a weak cause)."""
    pressure = f"{hit.fields.get('resource') or ''} {hit.fields.get('condition') or ''}".lower()
    if hit.fields.get("storage") or hit.fields.get("emptydir_volume") or any(word in pressure for word in ("disk", "storage", "nodefs", "imagefs")):
        hit.domain, hit.category = "storage", "filesystem_error"
    elif hit.fields.get("listed"):
        hit.strength = 1
        hit.notes["inferred"] = "the pod is listed as Evicted without the reason: node-pressure evictions are mostly for memory"
    return hit


def progress_done(hit: "Hit") -> "Hit | None":
    """A progress bar at 100% is a finished run only when its count is complete (tqdm rounds
    741/742 up to 100%): no hit otherwise."""
    return hit if hit.fields.get("done") == hit.fields.get("total") else None


HOOKS: dict[str, Callable[["Hit"], "Hit | None"]] = {
    "xid": refine_xid,
    "reported_xid": refine_reported_xid,
    "health_check": refine_health_check,
    "k8s_eviction": refine_k8s_eviction,
    "hip_code": refine_hip_code,
    "mce_status": refine_mce_status,
    "exit_signal": refine_exit_signal,
    "ib_status": refine_ib_status,
    "ib_async_event": refine_ib_async_event,
    "sxid": refine_sxid,
    "nccl_busid": refine_nccl_busid,
    "progress_done": progress_done,
}


# The code the cached Xid catalog and code tables are built with (this module), taken when imported.
_CODE = code_digest([Path(__file__)])
