"""Closed vocabularies shared by rules, the engine and the diagnosis (see the analyze contract)."""

CATEGORIES_BY_DOMAIN: dict[str, tuple[str, ...]] = {
    "gpu": (
        "gpu_fell_off_bus",
        "gpu_uncorrectable_ecc",
        "gpu_row_remap_failure",
        "gpu_nvlink",
        "gpu_firmware",
        "gpu_hardware_other",
    ),
    "network": ("link_down", "transport_error", "fabric_other"),
    "host": ("node_failure", "pcie_error", "kernel_fault", "host_hardware_other"),
    "storage": ("filesystem_error",),
    "application": (
        "app_exception",
        "cuda_error",
        "gpu_oom",
        "host_oom",
        "nccl_usage",
        "app_killed_signal",
    ),
    "scheduler": ("time_limit", "cancelled", "preempted"),
    "none": ("success",),
    "unknown": ("hang_unattributed", "no_evidence"),
}

DOMAINS = tuple(CATEGORIES_BY_DOMAIN)
DOMAIN_OF_CATEGORY = {c: d for d, cats in CATEGORIES_BY_DOMAIN.items() for c in cats}

# Domains whose culprit may be drained (contract: gpu, network and host only).
DRAINABLE_DOMAINS = ("gpu", "network", "host")

QUALITIES = ("confirmed", "likely", "ambiguous", "insufficient")

# What an event means for attribution:
#   cause    - can start a failure (an Xid 79, a link down, an exception raised first)
#   symptom  - follows from a failure elsewhere (NCCL timeouts, SIGTERM to peers, Xid 45)
#   context  - worth showing, never a cause (corrected PCIe errors, events outside the job)
#   marker   - feeds the engine's maps and lifecycle (NCCL init lines, torchrun rank tables)
ROLES = ("cause", "symptom", "context", "marker")

SEVERITIES = ("info", "warning", "error", "critical")

# Kinds of source file, recognised from content.  A kind says what a source is, not who could
# have written it: that is its provenance (slurm_attrib.provenance).
#   kernel      kernel ring buffer (dmesg, journalctl -k, kern.log)
#   syslog      syslog / journal of system daemons (may carry kernel lines too)
#   app         the job's own output: application, PyTorch, NCCL, srun and slurmstepd lines
#   nvidia_smi  nvidia-smi output
#   sysfs       counters and states read from /sys
#   job         the job record (job.json, Slurm's own accounting)
#   metrics     changes of monitoring series (DCGM, node_exporter) read by the Prometheus connector
SOURCE_KINDS = ("kernel", "syslog", "app", "nvidia_smi", "sysfs", "job", "metrics")

# Makers of accelerators whose lines the rules read besides NVIDIA's (a GPU-domain rule's
# event.vendor; none: NVIDIA's): the admin's next step names the maker's diagnostics.
GPU_VENDORS = ("amd", "intel", "habana", "aws_neuron")

# notes key: another category the same event reads as (a relation's `keeps_reading`, a code
# table's `other_reading`): the diagnosis is ambiguous and lists that reading as an alternative
OTHER_READING = "other_reading"
