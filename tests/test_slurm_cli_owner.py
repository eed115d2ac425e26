"""The owner of a job that is still COMPLETING is the controller's, even when slurmdbd's record
already holds the final state: a just-ended job's accounting record was seen with UID 0 on the test
cluster (the owner's results were then written for root).  slurmdbd's race is not reproducible on
demand, so Slurm's two commands answer here from scripts that print what they printed then."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from slurm_attrib.slurm.cli import CliBackend


def _command(folder: Path, name: str, output: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\ncat <<'OUT'\n{output}\nOUT\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_a_completing_jobs_owner_is_the_controllers_not_a_lagging_record(tmp_path, monkeypatch):
    _command(tmp_path, "scontrol", "JobId=8 JobName=ok UserId=sattrib-user(1001) GroupId=sattrib-user(1001) "
                                   "JobState=COMPLETING Reason=None ExitCode=0:0 NodeList=node1 "
                                   "StartTime=1796618850 EndTime=1796618855")
    _command(tmp_path, "sacct", "8|COMPLETED|0:0|sattrib-user|0|0|node1|1796618850|1796618855|None")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    info = CliBackend(timeout=10).job_info("8")
    assert (info.state, info.exit_code) == ("COMPLETED", "0:0")  # the record's final state ...
    assert (info.user, info.uid, info.gid) == ("sattrib-user", 1001, 1001)  # ... and the controller's owner
