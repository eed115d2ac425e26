"""Helpers: run the real epilog/prolog wrapper scripts with a Slurm-like environment."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EPILOG = REPO / "epilog" / "sattrib-epilog"
PROLOG = REPO / "epilog" / "sattrib-prolog"


class Node:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.spool = tmp / "spool"
        self.local = tmp / "local"
        self.spool.mkdir()
        self.config: dict = {
            "spool": str(self.spool),
            "local_spool": str(self.local),
            "epilog_timeout": 4,
            "sources": [],
        }
        self.env = {
            "SLURM_JOB_ID": "4242",
            "SLURMD_NODENAME": "gpu01",
            "SLURM_JOB_NODELIST": "gpu[01-02]",
            "SLURM_JOB_USER": "alice",
            "SLURM_JOB_UID": str(os.getuid()),
            "SLURM_JOB_EXIT_CODE2": "1:0",
            "SLURM_SCRIPT_CONTEXT": "epilog_slurmd",
            "SATTRIB_PYTHON": sys.executable,
            "SATTRIB_SYSFS_ROOT": str(tmp / "sys"),
            "SATTRIB_PROC_ROOT": str(tmp / "proc"),
        }
        # by default nothing from the real machine: every built-in source is turned off
        for name in ("kernel", "syslog", "job_stdout", "job_stderr", "nccl_debug", "flight_recorder", "nvidia_smi", "ib_counters",
                     "fabricmanager"):
            self.config["sources"].append({"name": name, "kind": "kernel", "enabled": False})

    def source(self, **src) -> None:
        self.config["sources"] = [s for s in self.config["sources"] if s["name"] != src["name"] or s.get("enabled", True)]
        self.config["sources"].append(src)

    def write_config(self) -> Path:
        import yaml

        path = self.tmp / "config.yaml"
        path.write_text(yaml.safe_dump(self.config))
        return path

    def run(self, script: Path = EPILOG, extra_env: dict | None = None, timeout: float = 30) -> tuple[int, float]:
        env = {"SATTRIB_CONFIG": str(self.write_config()), **self.env, **(extra_env or {})}
        t0 = time.monotonic()
        done = subprocess.run([str(script)], env=env, timeout=timeout, capture_output=True)
        return done.returncode, time.monotonic() - t0

    def bundle_path(self, local: bool = False, node: str = "gpu01") -> Path:
        root = self.local if local else self.spool
        return root / self.env["SLURM_JOB_ID"] / "nodes" / f"{node}.json.gz"

    def bundle(self, local: bool = False, node: str = "gpu01") -> dict:
        with gzip.open(self.bundle_path(local, node)) as f:
            return json.load(f)


def source_of(bundle: dict, name: str) -> dict:
    for src in bundle["sources"]:
        if src["name"] == name:
            return src
    raise KeyError(name)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)
