"""Whose the stored diagnosis is: the worker's job_owner, from Slurm's record, the EpilogSlurmctld
environment, or the password database (a diagnosis left to root is unreadable by its job's user)."""

import pwd

from slurm_attrib.slurm import JobInfo
from slurm_attrib.worker import job_owner

NOBODY = pwd.getpwnam("nobody")


def test_slurm_record_first():
    info = JobInfo(job_id="7", user="alice", uid=1234, source="scontrol")
    assert job_owner(info, {"SLURM_JOB_UID": "99"}) == (1234, "alice", "scontrol")


def test_environment_when_the_record_has_no_uid():
    info = JobInfo(job_id="7", user="(null)(1234)", uid=None, source="scontrol")
    assert job_owner(info, {"SLURM_JOB_UID": "1234"}) == (1234, "(null)(1234)", "SLURM_JOB_UID")
    assert job_owner(None, {"SLURM_JOB_UID": "1234", "SLURM_JOB_USER": "alice"}) == (1234, "alice", "SLURM_JOB_UID")


def test_password_database_by_name_last():
    info = JobInfo(job_id="7", user="nobody", uid=None, source="sacct")
    assert job_owner(info, {}) == (NOBODY.pw_uid, "nobody", "passwd")
    assert job_owner(None, {"SLURM_JOB_USER": "nobody", "SLURM_JOB_UID": "x1"}) == (NOBODY.pw_uid, "nobody", "passwd")


def test_unknown_owner_is_said():
    assert job_owner(None, {}) == (None, None, "unknown")
    assert job_owner(None, {"SLURM_JOB_USER": "no-such-user-here"}) == (None, "no-such-user-here", "unknown")


def test_scontrol_owner_without_a_name_keeps_its_uid():
    from slurm_attrib.slurm import cli

    assert cli._owner("alice(1001)") == ("alice", 1001)
    assert cli._owner("(null)(1001)") == (None, 1001)
    assert cli._owner("root(0)\n") == ("root(0)\n", None)
