"""The node Prolog: record the job's start and a snapshot of cheap counters.

    python -m slurm_attrib.capture.prolog        (run by epilog/sattrib-prolog)

Writes <local_spool>/prolog/<jobid>.json (atomically, never following symlinks):

    {"format": "sattrib-prolog-record", "version": 1, "job_id", "node", "start": <UNIX s>,
     "ib": [{"device", "port", "state", "phys_state", "rate", "counters": {name: int}}],
     "gpus": {"nvidia_smi": [{"index", "minor", "pci_bus_id", "uuid", "serial"}],
              "nvidia_smi_status": "ok" | "missing: ..." | "timeout ..." | "error: ...",
              "proc": [{"pci", "minor", "model", "uuid"}]},
     "duration": <s>, "errors": [...]}

On Slurm 22.05 the node Epilog has no SLURM_JOB_START_TIME: this record is the job window's
start.  (Without PrologFlags=Alloc the Prolog runs at the job's first step on the node, which is
close to the start.)  Always exits 0 within `prolog_timeout` (SATTRIB_PROLOG_TIMEOUT, default 5 s).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from slurm_attrib.capture.common import (
    exit_zero,
    PROLOG_FORMAT,
    PROLOG_VERSION,
    atomic_write,
    log_syslog,
    nvidia_smi_identity,
    read_ib_ports,
    read_proc_gpus,
    valid_job_id,
    valid_node,
)
from slurm_attrib.capture.epilog import node_name

IDENT = "sattrib-prolog"


def run(env: dict) -> dict:
    t0 = time.monotonic()
    start = time.time()
    bound = float(env.get("SATTRIB_PROLOG_TIMEOUT") or 5.0)
    errors: list[str] = []
    from slurm_attrib.config import Config, load_config

    try:
        cfg = load_config()
    except Exception as exc:  # noqa: BLE001
        cfg = Config()
        errors.append(f"config: {exc}; using defaults")
        print(errors[-1], file=sys.stderr)  # the wrapper records it where `sattrib doctor` looks
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    node = node_name(env)
    if not valid_job_id(job_id) or not valid_node(node):
        raise ValueError(f"invalid job id {job_id!r} or node name {node!r}")
    record = {
        "format": PROLOG_FORMAT,
        "version": PROLOG_VERSION,
        "job_id": job_id,
        "node": node,
        "start": start,
        "start_from": "SLURM_JOB_START_TIME" if env.get("SLURM_JOB_START_TIME") else "prolog",
    }
    if env.get("SLURM_JOB_START_TIME"):
        try:
            record["start"] = float(env["SLURM_JOB_START_TIME"])
        except ValueError:
            pass
    deadline = t0 + bound * 0.6
    record["ib"] = read_ib_ports(deadline)
    gpus, status = nvidia_smi_identity(timeout=max(0.2, min(3.0, t0 + bound * 0.7 - time.monotonic())))
    record["gpus"] = {"nvidia_smi": gpus, "nvidia_smi_status": status, "proc": read_proc_gpus()}
    record["duration"] = round(time.monotonic() - t0, 3)
    record["errors"] = errors
    data = json.dumps(record, separators=(",", ":")).encode()
    atomic_write(cfg.local_spool, ["prolog"], f"{job_id}.json", data, create_root=True)
    for e in errors:
        log_syslog(IDENT, f"job {job_id}: {e}")
    return record


def main() -> None:
    bound = float(os.environ.get("SATTRIB_PROLOG_TIMEOUT") or 5.0)
    timer = threading.Timer(bound, lambda: (log_syslog(IDENT, "prolog bound reached; exiting"), os._exit(0)))
    timer.daemon = True
    timer.start()
    try:
        run(dict(os.environ))
    except BaseException as exc:  # noqa: BLE001 - a failing Prolog drains the node
        log_syslog(IDENT, f"job {os.environ.get('SLURM_JOB_ID')}: {type(exc).__name__}: {exc}")
    finally:
        exit_zero()


if __name__ == "__main__":
    main()
