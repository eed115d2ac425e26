"""Smoke tests of the local Slurm test cluster (contrib/testcluster)."""

import time

import pytest

pytestmark = pytest.mark.slurm


def test_start_is_bounded_and_all_nodes_idle(slurm_cluster):
    assert slurm_cluster.start_seconds < 90, slurm_cluster.start_seconds
    out = slurm_cluster.run("sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %t").stdout
    states = dict(line.split() for line in out.splitlines())
    assert states == {n: "idle" for n in slurm_cluster.nodes}


def test_srun_spans_four_nodes(slurm_cluster):
    out = slurm_cluster.run("srun", "-N4", "--time=2", "bash", "-c", "echo $SLURMD_NODENAME").stdout
    assert sorted(out.split()) == list(slurm_cluster.nodes)


def test_four_node_batch_job_completes(slurm_cluster):
    jobid = slurm_cluster.sbatch("srun bash -c 'echo node=$SLURMD_NODENAME'\n",
                                 nodes=4, job_name="smoke-4n")
    assert slurm_cluster.wait_job(jobid) == "COMPLETED"
    info = slurm_cluster.sacct(jobid, "State", "ExitCode", "NNodes", "NodeList")
    assert info["ExitCode"] == "0:0"
    assert info["NNodes"] == "4"
    names = {line.split("=", 1)[1] for line in slurm_cluster.output(jobid).split()
             if line.startswith("node=")}
    assert names == set(slurm_cluster.nodes)


def test_failing_job_is_failed_with_exit_1(slurm_cluster):
    jobid = slurm_cluster.sbatch("echo about to fail\nexit 1\n", nodes=1, job_name="smoke-fail")
    assert slurm_cluster.wait_job(jobid) == "FAILED"
    assert slurm_cluster.sacct(jobid, "ExitCode")["ExitCode"] == "1:0"


def test_job_as_non_root_user(slurm_cluster):
    user = slurm_cluster.test_user
    jobid = slurm_cluster.sbatch("id -un\n", user=user, nodes=2)
    assert slurm_cluster.wait_job(jobid) == "COMPLETED"
    assert slurm_cluster.sacct(jobid, "User")["User"] == user
    assert slurm_cluster.output(jobid).split() == [user]


def test_drain_and_resume(slurm_cluster):
    reason = "sattrib: test"
    slurm_cluster.run("scontrol", "update", "NodeName=gpu04", "State=DRAIN", f"Reason={reason}")
    try:
        out = slurm_cluster.run("sinfo", "-h", "-R", "-o", "%N|%E").stdout
        assert f"gpu04|{reason}" in out.splitlines()
    finally:
        slurm_cluster.run("scontrol", "update", "NodeName=gpu04", "State=RESUME")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        state = slurm_cluster.run("sinfo", "-h", "-n", "gpu04", "-o", "%t").stdout.strip()
        if state == "idle":
            break
        time.sleep(0.2)
    assert state == "idle"
    assert "gpu04" not in slurm_cluster.run("sinfo", "-h", "-R", "-o", "%N").stdout
