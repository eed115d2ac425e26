"""Attribution on small hand-written jobs: each case fails if the judgement it pins were wrong."""

import json
from pathlib import Path

import pytest

from slurm_attrib.engine.pipeline import analyze_path

NODES = ["gpu01", "gpu02", "gpu03", "gpu04"]
START, END = "2026-12-02T13:00:00Z", "2026-12-02T13:30:00Z"


def write_job(root: Path, files: dict[str, str], state="FAILED", nodes=NODES, exit_code="1:0") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "job.json").write_text(
        json.dumps({"job_id": "77", "state": state, "exit_code": exit_code, "start": START, "end": END, "nodes": nodes})
    )
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def nccl_init(ranks_per_node=2) -> str:
    lines = []
    for index, node in enumerate(NODES):
        for local in range(ranks_per_node):
            rank = index * ranks_per_node + local
            lines.append(
                f"{node}:1{rank}00:1{rank}01 [{local}] NCCL INFO comm 0x55d0c8a0 rank {rank} nranks 8 cudaDev {local} "
                f"nvmlDev {local} busId {local + 1}b000 commId 0x5f2c1a - Init COMPLETE"
            )
    return "\n".join(lines) + "\n"


def watchdog(rank: int, clock="13:14:06") -> str:
    return (
        f"[rank{rank}]:[E1202 {clock}.123456789 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum=881, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        f"ran for 600112 milliseconds before timing out.\n"
    )


XID79 = "2026-12-02T13:04:06,123456+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=4121, name=python, GPU has fallen off the bus.\n"


def test_xid79_explains_peer_timeouts_and_drains_its_node(tmp_path):
    output = nccl_init() + "".join(watchdog(r) for r in (0, 1, 2, 3, 6, 7))
    job = write_job(tmp_path, {"slurm-77.out": output, "gpu03/dmesg.txt": XID79})
    diagnosis = analyze_path(job)
    assert (diagnosis.domain, diagnosis.category) == ("gpu", "gpu_fell_off_bus")
    assert diagnosis.culprit_nodes == ["gpu03"]
    assert diagnosis.quality == "confirmed"
    assert [d.node for d in diagnosis.drain] == ["gpu03"]
    assert diagnosis.drain[0].reason.startswith("sattrib: Xid79 GPU 3b:00")
    timeouts = [s for s in diagnosis.symptoms if s.type == "collective_timeout"]
    assert timeouts and timeouts[0].explained_by == "gpu.xid"
    assert {"gpu01", "gpu02", "gpu04"} <= set(timeouts[0].nodes)
    cause_lines = [e for e in diagnosis.evidence if e.role == "cause"]
    assert cause_lines[0].source == "gpu03/dmesg.txt" and cause_lines[0].line == 1


def test_xid_before_the_job_window_is_context(tmp_path):
    stale = XID79.replace("2026-12-02T13:04", "2026-12-01T09:04")
    job = write_job(tmp_path, {"slurm-77.out": nccl_init() + watchdog(0), "gpu03/dmesg.txt": stale})
    diagnosis = analyze_path(job)
    assert diagnosis.domain != "gpu"
    assert diagnosis.drain == []
    assert any(e.role == "context" and e.source == "gpu03/dmesg.txt" for e in diagnosis.evidence)


def test_forged_xid_in_job_output_never_drains(tmp_path):
    forged = "[rank5]: NVRM: Xid (PCI:0000:3b:00): 79, pid=4121, name=python, GPU has fallen off the bus.\n"
    job = write_job(tmp_path, {"slurm-77.out": nccl_init() + forged})
    diagnosis = analyze_path(job)
    assert diagnosis.drain == []
    assert diagnosis.quality != "confirmed"
    # rank 5 runs on gpu03 (NCCL init lines): the host is named, as `likely` and without a drain
    assert diagnosis.culprit_nodes == ["gpu03"]
    assert diagnosis.quality == "likely"
    assert any("only in lines a user could have written on gpu03" in note for note in diagnosis.notes)
    admin = [a.text for a in diagnosis.actions if a.who == "admin"]
    assert any(t.startswith("Not drained automatically: only lines a user could have written") for t in admin), admin


def test_a_contained_gpu_fault_the_kernel_records_names_why_it_is_not_drained(tmp_path):
    """AMD's poison consumption is confined to the consuming process (strength 2): confirmed, its
    node named, no drain, and the admin is told that this, not the source, is why."""
    dmesg = "2026-12-02T13:10:00,000101+00:00 amdgpu 0000:c1:00.0: amdgpu: {3}poison is consumed by client 12, kick off gpu reset flow\n"
    diagnosis = analyze_path(write_job(tmp_path, {"gpu02/dmesg": dmesg, "slurm-77.out": "srun: error: gpu02: task 1: Aborted\n"}))
    assert (diagnosis.category, diagnosis.quality, diagnosis.culprit_nodes, diagnosis.drain) == (
        "gpu_uncorrectable_ecc", "confirmed", ["gpu02"], [])
    admin = [a.text for a in diagnosis.actions if a.who == "admin"]
    assert any(t.startswith("Not drained automatically: the recorded error does not by itself") for t in admin), admin


@pytest.mark.parametrize("line, tool", [
    ("amdgpu 0000:dd:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!", "ROCm Validation Suite"),
    ("i915 0000:6c:00.0: [Hardware Error]: GT0 detected EU GRF FATAL error", "xpu-smi diag"),
    ("habanalabs 0000:b3:00.0: 0000:b3:00.0 Failed to reset! Device is NOT usable", "hl_qual"),
    ("NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=i-0592464924bd45322 nd-id=0 nc-id=0 action=TERMINATE_INSTANCE",
     "neuron-ls"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.", "dcgmi diag"),
])
def test_the_admin_is_told_the_gpu_makers_own_diagnostics(tmp_path, line, tool):
    """A GPU rule's event.vendor picks the maker's diagnostics: DCGM only reads NVIDIA's GPUs."""
    dmesg = f"2026-12-02T13:10:00,000101+00:00 {line}\n"
    diagnosis = analyze_path(write_job(tmp_path, {"gpu02/dmesg": dmesg, "slurm-77.out": "srun: error: gpu02: task 1: Aborted\n"}))
    assert diagnosis.domain == "gpu" and diagnosis.culprit_nodes == ["gpu02"]
    admin = " ".join(a.text for a in diagnosis.actions if a.who == "admin")
    assert tool in admin and (tool == "dcgmi diag" or "dcgmi" not in admin), admin


def test_an_object_store_that_throttled_the_job_is_no_shared_filesystem(tmp_path):
    """S3's SlowDown is the store's refusal of the job's request rate: the admin checks the store,
    the user lowers the rate; neither is told about filesystem servers and clients."""
    output = ("[rank3]: botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the PutObject "
              "operation (reached max retries: 4): Please reduce your request rate.\n"
              "srun: error: gpu02: task 3: Exited with exit code 1\n")
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": output}))
    assert (diagnosis.domain, diagnosis.category, diagnosis.drain) == ("storage", "filesystem_error", [])
    texts = {a.who: a.text for a in diagnosis.actions}
    assert "object store" in texts["admin"] and "filesystem" not in texts["admin"], texts
    assert "request rate" in texts["user"], texts


def test_the_peer_two_nodes_lost_is_blamed_though_it_printed_nothing(tmp_path):
    """gpu01 and gpu02 both lost their connections to 10.0.0.3 (gpu03 by the hosts file); gpu03's
    own log holds no line a rule reads (it died silently): it is the culprit all the same."""
    warn = ("[2026-12-02 13:10:0{s}] gpu0{n}:1234:1240 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
            "from peer 10.0.0.3<49152> with status=12 opcode=0 len=0 vendor err 129 (Send) hca mlx5_0\n")
    job = write_job(tmp_path, {
        "slurm-77.out": warn.format(s=0, n=1) + warn.format(s=1, n=2) + "srun: error: gpu01: task 0: Exited with exit code 1\n",
        "hosts.txt": "10.0.0.1 gpu01\n10.0.0.2 gpu02\n10.0.0.3 gpu03\n",
        "gpu03/dmesg.txt": "[    1.000000] Linux version 6.1.0\n",
    }, nodes=["gpu01", "gpu02", "gpu03"])
    diagnosis = analyze_path(job)
    assert (diagnosis.category, diagnosis.culprit_nodes) == ("transport_error", ["gpu03"])


def test_a_report_on_the_jobs_nodes_is_not_the_node_that_stored_it(tmp_path):
    """The head node's cloud resume log says the job's nodes could not be created: a report on the
    job (event.reports_on `job`), never on the head node whose folder holds the file."""
    line = ('resume.py ERROR: ... "Quota \'C2_CPUS\' exceeded. Limit: 300.0 in region europe-west4.". '
            "Details: \"[{'domain': 'usageLimits', 'reason': 'quotaExceeded'}]\">\n")
    job = write_job(tmp_path, {"head/resume.log": line, "slurm-77.out": "srun: PrologSlurmctld failed, job killed\n"},
                    nodes=["gpu01", "gpu02"])
    diagnosis = analyze_path(job)
    assert (diagnosis.domain, diagnosis.category, diagnosis.culprit_nodes, diagnosis.drain) == ("host", "node_failure", [], [])


RAY_NODE_DEAD = ("2026-12-02 13:04:06,096\tWARNING worker.py:1866 -- The node with node id: 5ad7fa5dd64fc1fec7a82cceecabed8e5eb2"
                 "47ec97064bb50a1c2a11 and address: 10.20.4.17 and node name: 10.20.4.17 has been marked dead because the "
                 "detector has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly "
                 "(OOM, preempted node, etc.) \n"
                 "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n")


@pytest.mark.parametrize("hosts, culprits", [("10.20.4.11 gpu01\n10.20.4.17 gpu02\n", ["gpu02"]), ("", [])])
def test_a_ray_node_named_by_its_address_is_not_the_head_node(tmp_path, hosts, culprits):
    """The driver on the head node (gpu01, whose folder holds the job's output) prints that the GCS
    marked the node at 10.20.4.17 dead: that node is the culprit when an IP map names it, else no
    node is; never the head node that printed the line (event.reports_on `named_node`, by `ip`)."""
    files = {"gpu01/slurm-77.out": RAY_NODE_DEAD, "gpu02/dmesg.txt": "[    1.000000] Linux version 6.1.0\n"}
    if hosts:
        files["gpu01/hosts.txt"] = hosts
    diagnosis = analyze_path(write_job(tmp_path, files, nodes=["gpu01", "gpu02"]))
    assert (diagnosis.domain, diagnosis.category, diagnosis.culprit_nodes) == ("host", "node_failure", culprits)


def test_a_workflow_tasks_node_failure_is_not_the_head_jobs_node(tmp_path):
    """Snakemake's head job on login01 relays that a rule's own Slurm job ended NODE_FAIL: the node
    Slurm lost ran that other job, never login01, whose folder holds the head job's output."""
    output = ("Error in rule train:\n"
              "    message: SLURM-job '52005' failed due to a node failure, SLURM status is: 'NODE_FAIL'. "
              "Failed nodes will be excluded from future job submissions.\n"
              "Exiting because a job execution failed. Look above for error message\n")
    diagnosis = analyze_path(write_job(tmp_path, {"login01/slurm-77.out": output}, nodes=["login01"]))
    assert (diagnosis.domain, diagnosis.category, diagnosis.culprit_nodes, diagnosis.drain) == ("host", "node_failure", [], [])


def test_every_gpu_vendor_has_its_diagnostics():
    from slurm_attrib.engine.explain import VENDOR_GPU_ACTIONS
    from slurm_attrib.vocab import GPU_VENDORS

    assert set(VENDOR_GPU_ACTIONS) == set(GPU_VENDORS)


def test_unorderable_faults_on_two_nodes_are_ambiguous(tmp_path):
    other = XID79.replace(",123456", ",900000").replace("3b:00", "5e:00")
    job = write_job(tmp_path, {"gpu01/dmesg.txt": XID79, "gpu02/dmesg.txt": other})
    diagnosis = analyze_path(job)
    assert diagnosis.quality == "ambiguous"
    assert diagnosis.culprit_nodes == ["gpu01", "gpu02"]
    # Each GPU really fell off the bus (kernel evidence): both nodes are drained, each on its own Xid.
    assert [(d.node, d.reason[:22]) for d in diagnosis.drain] == [
        ("gpu01", "sattrib: Xid79 GPU 3b:"),
        ("gpu02", "sattrib: Xid79 GPU 5e:"),
    ]


def test_hang_points_at_the_only_silent_node(tmp_path):
    output = nccl_init() + "".join(watchdog(r) for r in range(6))  # ranks 6, 7 (gpu04) silent
    job = write_job(tmp_path, {"slurm-77.out": output})
    diagnosis = analyze_path(job)
    assert (diagnosis.domain, diagnosis.category) == ("unknown", "hang_unattributed")
    assert diagnosis.culprit_nodes == ["gpu04"]
    assert diagnosis.quality == "likely"
    assert diagnosis.drain == []


def test_only_timeouts_everywhere_is_unknown(tmp_path):
    output = nccl_init() + "".join(watchdog(r) for r in range(8))
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": output}))
    assert (diagnosis.domain, diagnosis.culprit_nodes) == ("unknown", [])
    assert diagnosis.quality == "insufficient"


def test_same_filesystem_error_on_every_node_is_systemic(tmp_path):
    files = {
        f"{node}/syslog": f"Dec  2 13:05:0{i} {node} kernel: LustreError: 11-0: scratch-OST0003-osc: operation ost_write to node 10.0.0.9@o2ib failed: rc = -107\n"
        for i, node in enumerate(NODES)
    }
    diagnosis = analyze_path(write_job(tmp_path, files))
    assert diagnosis.domain == "storage" and diagnosis.culprit_nodes == [] and diagnosis.drain == []


def test_completed_job_without_errors_is_success(tmp_path):
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": "step 100 loss 1.23\n"}, state="COMPLETED"))
    assert (diagnosis.domain, diagnosis.category, diagnosis.quality) == ("none", "success", "confirmed")


def test_time_limit_state_is_the_cause(tmp_path):
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": "step 100\n"}, state="TIMEOUT"))
    assert (diagnosis.domain, diagnosis.category) == ("scheduler", "time_limit")
    assert diagnosis.evidence[0].source == "job.json"


def test_application_xid_alone_names_no_gpu_culprit(tmp_path):
    xid13 = XID79.replace("79, pid=4121, name=python, GPU has fallen off the bus.", "13, pid=4121, name=python, Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0)")
    diagnosis = analyze_path(write_job(tmp_path, {"gpu03/dmesg.txt": xid13}))
    assert (diagnosis.domain, diagnosis.category) == ("application", "cuda_error")
    assert diagnosis.culprit_nodes == [] and diagnosis.drain == []


def test_srun_label_tasks_map_to_nodes(tmp_path):
    # srun --label: task 5's NCCL line names its host; its later traceback has only the label.
    output = (
        "5: gpu03:4100:4100 [1] NCCL INFO comm 0x1 rank 5 nranks 8 cudaDev 1 nvmlDev 1 busId 3b000 commId 0x2 - Init COMPLETE\n"
        "5: Traceback (most recent call last):\n"
        "5:   File \"train.py\", line 3, in <module>\n"
        "5: ValueError: bad batch shape\n"
    )
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": output}))
    assert (diagnosis.domain, diagnosis.category) == ("application", "app_exception")
    assert diagnosis.culprit_nodes == ["gpu03"]


def test_a_fault_after_the_hang_does_not_explain_it(tmp_path):
    # Every rank but gpu03's timed out at 13:14 (stalled since 13:04); the Xid comes at 13:20.
    late = XID79.replace("13:04:06", "13:20:06")
    output = nccl_init() + "".join(watchdog(r) for r in (0, 1, 2, 3, 6, 7))
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": output, "gpu03/dmesg.txt": late}))
    assert (diagnosis.domain, diagnosis.category) == ("unknown", "hang_unattributed")
    assert diagnosis.drain == []
    assert [c.rule for c in diagnosis.alternatives] == ["gpu.xid"]


def test_job_output_lines_belong_to_the_node_they_name(tmp_path):
    # Job output captured on the batch host gpu01; srun names the node that failed.
    output = "step 5 loss 2.1\nsrun: error: Node failure on gpu04\n"
    diagnosis = analyze_path(write_job(tmp_path, {"gpu01/slurm-77.out": output}, state="NODE_FAIL"))
    assert (diagnosis.domain, diagnosis.category) == ("host", "node_failure")
    assert diagnosis.culprit_nodes == ["gpu04"]


def test_node_failure_names_the_node_that_left_no_logs(tmp_path):
    files = {f"{node}/dmesg.txt": "2026-12-02T13:01:00,000000+00:00 systemd[1]: Started Session 3.\n" for node in NODES[:3]}
    diagnosis = analyze_path(write_job(tmp_path, files, state="NODE_FAIL"))
    assert (diagnosis.domain, diagnosis.category) == ("host", "node_failure")
    assert diagnosis.culprit_nodes == ["gpu04"]


def test_the_same_link_fault_on_three_nodes_of_a_large_job_is_systemic(tmp_path):
    nodes = [f"gpu{i:02d}" for i in range(1, 33)]
    files = {
        f"gpu0{i}/syslog": f"2026-12-02T13:05:0{i}.000000+00:00 gpu0{i} kernel: mlx5_core 0000:3b:00.0 ibp59s0: Link down\n"
        for i in (1, 2, 3)
    }
    diagnosis = analyze_path(write_job(tmp_path, files, nodes=nodes))
    assert diagnosis.domain == "network" and diagnosis.systemic
    assert diagnosis.culprit_nodes == [] and diagnosis.drain == []


def test_the_rank_that_completed_fewest_collectives_is_the_suspect(tmp_path):
    def status(rank, completed):
        return (
            f"[rank{rank}]:[E1202 13:14:06.1 ProcessGroupNCCL.cpp:1709] [PG 0 Rank {rank}] Timeout at NCCL work: 7753, "
            f"last enqueued NCCL work: 7755, last completed NCCL work: {completed}.\n"
        )
    output = nccl_init() + "".join(status(r, 7750 if r in (2, 3) else 7752) for r in range(8))
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": output}))
    assert (diagnosis.domain, diagnosis.category) == ("unknown", "hang_unattributed")
    assert diagnosis.culprit_nodes == ["gpu02"] and diagnosis.quality == "likely"


def test_torch_1x_failure_wording_alone_is_a_hang(tmp_path):
    line = "[E ProcessGroupNCCL.cpp:488] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.\n"
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": line * 3}))
    assert (diagnosis.domain, diagnosis.category) == ("unknown", "hang_unattributed")


def test_a_filesystem_failing_on_two_nodes_is_the_filesystems_fault(tmp_path):
    files = {
        f"{node}/syslog": f"Dec  2 13:05:0{i} {node} kernel: LustreError: 167-0: scratch-OST0003-osc: This client was evicted by scratch-OST0003; in progress operations using this service will fail.\n"
        for i, node in enumerate(NODES[:2])
    }
    diagnosis = analyze_path(write_job(tmp_path, files, nodes=NODES[:2]))
    assert diagnosis.domain == "storage" and diagnosis.systemic and diagnosis.culprit_nodes == []


def test_a_filesystem_failing_on_one_node_names_it(tmp_path):
    files = {"gpu03/syslog": "Dec  2 13:05:00 gpu03 kernel: LustreError: 167-0: scratch-OST0003-osc: This client was evicted by scratch-OST0003; in progress operations using this service will fail.\n"}
    diagnosis = analyze_path(write_job(tmp_path, files))
    assert diagnosis.domain == "storage" and diagnosis.culprit_nodes == ["gpu03"] and diagnosis.drain == []


def test_a_recovered_nfs_outage_does_not_explain_a_later_exception(tmp_path):
    files = {
        f"{node}/syslog": (
            f"Dec  2 13:02:00 {node} kernel: nfs: server home01 not responding, still trying\n"
            f"Dec  2 13:02:30 {node} kernel: nfs: server home01 OK\n"
        )
        for node in NODES
    }
    files["slurm-77.out"] = nccl_init() + "[rank5]:[E1202 13:25:00.000000000 train.py:9] step 9\n5: Traceback (most recent call last):\n5: KeyError: 'labels'\n"
    diagnosis = analyze_path(write_job(tmp_path, files))
    assert (diagnosis.domain, diagnosis.category) == ("application", "app_exception")


def lustre(clock: str, ost: int, event: str) -> str:
    target, nid = f"scratch-OST{ost:04x}", f"10.0.0.{ost}@o2ib"
    said = {"lost": f"Connection to {target} (at {nid}) was lost; in progress operations using this service will wait for recovery to complete",
            "restored": f"Connection restored to {target} (at {nid})",
            "restored_nid": f"Connection restored to {nid} (at {nid})"}[event]  # Lustre 2.8+ names the NID
    return f"Dec  2 {clock} gpu03 kernel: Lustre: {target}-osc-ffff9a0011223344: {said}\n"


KEY_ERROR_AT_13_10 = "[rank5]:[E1202 13:10:00.000000000 train.py:9] step 9\n5: Traceback (most recent call last):\n5: KeyError: 'labels'\n"


def test_a_lustre_loss_ends_at_its_own_targets_restoration(tmp_path):
    """gpu03 loses OST0003 and gets it back in 30 s, long before the job fails; it loses and regains
    other targets all through the job: the last of those restorations does not stretch the first loss."""
    syslog = (lustre("13:02:00", 3, "lost") + lustre("13:02:30", 3, "restored_nid")
              + lustre("13:20:00", 7, "lost") + lustre("13:21:00", 7, "restored"))
    diagnosis = analyze_path(write_job(tmp_path, {"gpu03/syslog": syslog, "slurm-77.out": nccl_init() + KEY_ERROR_AT_13_10}))
    assert (diagnosis.domain, diagnosis.category) == ("application", "app_exception")


def test_a_lustre_loss_is_not_ended_by_another_targets_restoration(tmp_path):
    syslog = lustre("13:02:00", 3, "lost") + lustre("13:02:30", 4, "restored")
    diagnosis = analyze_path(write_job(tmp_path, {"gpu03/syslog": syslog, "slurm-77.out": nccl_init() + KEY_ERROR_AT_13_10}))
    assert (diagnosis.domain, diagnosis.category) == ("storage", "filesystem_error")


def test_an_nfs_outage_is_not_ended_by_another_servers_recovery(tmp_path):
    syslog = ("Dec  2 13:02:00 gpu03 kernel: nfs: server home01 not responding, still trying\n"
              "Dec  2 13:02:30 gpu03 kernel: nfs: server scratch02 OK\n")
    diagnosis = analyze_path(write_job(tmp_path, {"gpu03/syslog": syslog, "slurm-77.out": nccl_init() + KEY_ERROR_AT_13_10}))
    assert (diagnosis.domain, diagnosis.category) == ("storage", "filesystem_error")


LINK_DOWN_GPU01_13_20_30 = "Dec  2 13:20:30 gpu01 kernel: mlx5_core 0000:3b:00.0 ibp59s0: Link down\n"


def test_an_outage_on_a_node_whose_filesystem_drops_all_day_does_not_outrank_a_fault_elsewhere(tmp_path):
    """gpu03's Lustre dropped and came back harmlessly three times during the job; a fourth loss,
    still open when gpu01's link goes down, is routine there: the link is the origin.  Without the
    harmless history the earlier loss stays the origin."""
    routine = "".join(lustre(f"13:0{m}:00", m, "lost") + lustre(f"13:0{m}:40", m, "restored") for m in (2, 4, 6))
    open_loss = lustre("13:20:00", 9, "lost")
    files = {"gpu03/syslog": routine + open_loss, "gpu01/syslog": LINK_DOWN_GPU01_13_20_30}
    diagnosis = analyze_path(write_job(tmp_path / "routine", files))
    assert (diagnosis.domain, diagnosis.category, diagnosis.culprit_nodes) == ("network", "link_down", ["gpu01"])
    files["gpu03/syslog"] = open_loss
    diagnosis = analyze_path(write_job(tmp_path / "once", files))
    assert (diagnosis.domain, diagnosis.category) == ("storage", "filesystem_error")


def test_oom_kills_on_two_nodes_within_a_second_are_ambiguous(tmp_path):
    oom = "2026-12-02T13:05:0{s},100000+00:00 Out of memory: Killed process 4411 (python) total-vm:200000000kB, anon-rss:190000000kB, file-rss:0kB, shmem-rss:0kB, UID:1001 pgtables:300000kB oom_score_adj:0\n"
    diagnosis = analyze_path(write_job(tmp_path, {"gpu01/dmesg.txt": oom.format(s=0), "gpu02/dmesg.txt": oom.format(s=1)}))
    assert (diagnosis.category, diagnosis.quality) == ("host_oom", "ambiguous")
    assert diagnosis.culprit_nodes == ["gpu01", "gpu02"] and diagnosis.drain == []


def xid31(pid: int, pci: str = "0000:db:00", minute: int = 5) -> str:
    return (f"2026-12-02T13:{minute:02d}:00,000000+00:00 NVRM: Xid (PCI:{pci}): 31, pid={pid}, Ch 00000008, intr 00000000. "
            "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_10 faulted @ 0x7fd7_90743000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n")


def test_xid31_recurring_on_one_gpu_across_processes_suspects_the_gpu(tmp_path):
    dmesg = "".join(xid31(pid, minute=m) for m, pid in ((5, 100), (8, 200), (11, 300)))
    diagnosis = analyze_path(write_job(tmp_path, {"gpu02/dmesg.txt": dmesg}))
    # the recurrence makes the GPU suspect, and the Xid is still what the application usually did: both readings stand
    assert (diagnosis.domain, diagnosis.category, diagnosis.quality) == ("gpu", "gpu_hardware_other", "ambiguous")
    assert diagnosis.culprit_nodes == ["gpu02"] and diagnosis.drain == []
    assert any("3 different processes" in note for note in diagnosis.notes)
    application = [a for a in diagnosis.alternatives if (a.domain, a.category) == ("application", "cuda_error")]
    assert application and application[0].gpus[0].xid == 31 and application[0].nodes == ["gpu02"]


def test_xid31_from_one_process_or_on_every_gpu_stays_the_application(tmp_path):
    same_process = "".join(xid31(100, minute=m) for m in (5, 8, 11))
    diagnosis = analyze_path(write_job(tmp_path / "a", {"gpu02/dmesg.txt": same_process}))
    assert (diagnosis.domain, diagnosis.category) == ("application", "cuda_error")
    every_gpu = "".join(xid31(pid, pci, m) for pci in ("0000:3b:00", "0000:db:00") for m, pid in ((5, 100), (8, 200), (11, 300)))
    diagnosis = analyze_path(write_job(tmp_path / "b", {"gpu02/dmesg.txt": every_gpu}))
    assert (diagnosis.domain, diagnosis.category) == ("application", "cuda_error")


IB_FLUSH = ("{node}:7038:7053 [0] transport/net_ib.cc:1007 NCCL WARN NET/IB : Got completion from peer 10.1.32.3<42519> "
            "with error 5, opcode 0, len 0, vendor err 249\n")


def test_only_flushed_ib_completions_are_a_likely_transport_error(tmp_path):
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": IB_FLUSH.format(node="gpu03")}))
    assert (diagnosis.domain, diagnosis.category, diagnosis.quality) == ("network", "transport_error", "likely")
    assert diagnosis.drain == []


def test_a_flush_after_a_real_cause_stays_its_symptom(tmp_path):
    files = {"gpu01/dmesg.txt": XID79, "slurm-77.out": IB_FLUSH.format(node="gpu03")}
    diagnosis = analyze_path(write_job(tmp_path, files))
    assert (diagnosis.domain, diagnosis.category) == ("gpu", "gpu_fell_off_bus")


def test_an_oom_without_a_host_names_the_only_node_of_the_job(tmp_path):
    out = "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=77.0. Some of your processes may have been killed by the cgroup out-of-memory handler.\n"
    diagnosis = analyze_path(write_job(tmp_path / "one", {"slurm-77.out": out}, nodes=["gpu03"]))
    assert (diagnosis.category, diagnosis.culprit_nodes) == ("host_oom", ["gpu03"])
    diagnosis = analyze_path(write_job(tmp_path / "many", {"slurm-77.out": out}))
    assert (diagnosis.category, diagnosis.culprit_nodes) == ("host_oom", [])
    srun = out + "srun: error: gpu02: task 3: Out Of Memory\n"
    diagnosis = analyze_path(write_job(tmp_path / "srun", {"slurm-77.out": srun}))
    assert (diagnosis.category, diagnosis.culprit_nodes) == ("host_oom", ["gpu02"])


def test_a_nameless_cancel_next_to_the_memory_limit_is_the_memory_kill(tmp_path):
    out = ("slurmstepd: *** JOB 77 CANCELLED AT 2026-12-02T13:07:23 *** on gpu01\n"
           "slurmstepd: Exceeded job memory limit at some point. oom-killer likely killed a process.\n")
    diagnosis = analyze_path(write_job(tmp_path / "memory", {"slurm-77.out": out}, state="CANCELLED"))
    assert (diagnosis.domain, diagnosis.category) == ("application", "host_oom")
    by_user = out.replace("13:07:23 *** on gpu01", "13:07:23 BY alice *** on gpu01")
    diagnosis = analyze_path(write_job(tmp_path / "user", {"slurm-77.out": by_user}, state="CANCELLED"))
    assert (diagnosis.domain, diagnosis.category) == ("scheduler", "cancelled")


KILL_ON_BAD_EXIT = (
    "srun: error: gpu02: task 1: Exited with exit code 1\n"
    "srun: launch/slurm: _step_signal: Terminating StepId=77.0\n"
    "slurmstepd-gpu01: error: *** STEP 77.0 ON gpu01 CANCELLED AT 2026-12-02T13:07:23 ***\n"
    "srun: error: gpu01: task 0: Terminated\n"
)


def test_a_step_cancelled_right_after_a_task_failed_was_not_cancelled_by_a_user(tmp_path):
    # no job state (a bare log): the banner alone must not read as an scancel
    diagnosis = analyze_path(write_job(tmp_path / "bare", {"slurm-77.out": KILL_ON_BAD_EXIT}, state=None))
    assert diagnosis.domain != "scheduler", diagnosis.summary
    alone = KILL_ON_BAD_EXIT.split("\n", 2)[2]  # the same banner with no failed task before it
    diagnosis = analyze_path(write_job(tmp_path / "alone", {"slurm-77.out": alone}, state="CANCELLED"))
    assert (diagnosis.domain, diagnosis.category) == ("scheduler", "cancelled")


def test_an_unlabelled_traceback_belongs_to_the_task_srun_reports_failing_next_to_it(tmp_path):
    traceback = ("Traceback (most recent call last):\n  File \"/home/u/train.py\", line 3, in <module>\n"
                 "ZeroDivisionError: division by zero\n")
    diagnosis = analyze_path(write_job(tmp_path / "job", {"gpu01/slurm-77.out": traceback + KILL_ON_BAD_EXIT}))
    assert (diagnosis.category, diagnosis.culprit_nodes) == ("app_exception", ["gpu02"]), diagnosis.summary
    report, rest = KILL_ON_BAD_EXIT.split("\n", 1)  # srun's failed-task report, then the teardown
    diagnosis = analyze_path(write_job(tmp_path / "lagged", {"gpu01/slurm-77.out": report + "\n" + traceback + rest}))
    assert (diagnosis.category, diagnosis.culprit_nodes) == ("app_exception", ["gpu02"]), diagnosis.summary
    # the report ahead of the other tasks' lines and a longer traceback (seen on the test cluster)
    others = "".join(f"gpu0{n}:{n}:{n} [0] NCCL INFO comm 0x7a7f rank {n} nranks 4 - Init COMPLETE\n" for n in (1, 3, 4))
    frames = "".join(f"  File \"/home/u/train.py\", line {n}, in f{n}\n    f{n + 1}()\n" for n in range(3))
    longer = traceback.replace("Traceback (most recent call last):\n", "Traceback (most recent call last):\n" + frames)
    lagged = report + "\n" + others + longer + rest
    diagnosis = analyze_path(write_job(tmp_path / "lagged_more", {"gpu01/slurm-77.out": lagged}))
    assert (diagnosis.category, diagnosis.culprit_nodes) == ("app_exception", ["gpu02"]), diagnosis.summary
    diagnosis = analyze_path(write_job(tmp_path / "unreported", {"gpu01/slurm-77.out": traceback}))
    assert diagnosis.culprit_nodes == ["gpu01"], diagnosis.summary  # no failed task: the node that holds the file


def setup_timeouts(progress: bool) -> str:
    bar = "Running tokenizer on dataset:   9%|███▊      | 280000/2969526 [29:55<4:48:08, 155.57 examples/s]\n"
    lines = "".join(
        f"[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800572 milliseconds before timing out.\n"
        for r in (1, 2, 3)
    )
    return (bar if progress else "") + lines


def test_first_collectives_timing_out_while_rank0_still_prepares_data_is_a_setup_timeout(tmp_path):
    diagnosis = analyze_path(write_job(tmp_path / "busy", {"slurm-77.out": setup_timeouts(progress=True)}))
    assert (diagnosis.domain, diagnosis.category, diagnosis.quality) == ("application", "nccl_usage", "likely")
    assert any("rank 0 was still busy" in note for note in diagnosis.notes)
    diagnosis = analyze_path(write_job(tmp_path / "hang", {"slurm-77.out": setup_timeouts(progress=False)}))
    assert diagnosis.category == "hang_unattributed"


def test_repeated_corrected_memory_errors_on_one_node_are_a_failing_dimm(tmp_path):
    ce = "2026-12-02T13:0{m}:00,000000+00:00 EDAC MC0: 2 CE error on CPU#0Channel#2_DIMM#0 (channel:2 slot:0 page:0x0 offset:0x0 grain:8 syndrome:0x0)\n"
    diagnosis = analyze_path(write_job(tmp_path / "many", {"gpu02/dmesg.txt": "".join(ce.format(m=m) for m in range(6))}, state="COMPLETED"))
    assert diagnosis.category == "success"  # the job completed: corrected errors did not end it
    diagnosis = analyze_path(write_job(tmp_path / "failed", {"gpu02/dmesg.txt": "".join(ce.format(m=m) for m in range(6))}))
    assert (diagnosis.domain, diagnosis.category, diagnosis.culprit_nodes) == ("host", "host_hardware_other", ["gpu02"])
    diagnosis = analyze_path(write_job(tmp_path / "few", {"gpu02/dmesg.txt": ce.format(m=1)}))
    assert diagnosis.category != "host_hardware_other"


def test_two_processes_joining_as_one_rank_is_a_launch_mismatch(tmp_path):
    joins = "".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4\n" for r in (1, 1, 0, 0))
    diagnosis = analyze_path(write_job(tmp_path / "bad", {"slurm-77.out": joins}))
    assert (diagnosis.domain, diagnosis.category, diagnosis.quality) == ("application", "nccl_usage", "likely")
    every_rank_twice = "".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4\n" for r in (0, 1, 2, 3) * 2)
    diagnosis = analyze_path(write_job(tmp_path / "restart", {"slurm-77.out": every_rank_twice}))
    assert diagnosis.category != "nccl_usage"  # a restart repeats every rank
    diagnosis = analyze_path(write_job(tmp_path / "done", {"slurm-77.out": joins}, state="COMPLETED"))
    assert diagnosis.category == "success"


# Second look (rules/fallback.yaml): wordings no rule proper knows still give a lead to the domain.
# A GPU driver's failure in a wording no rule proper knows (Habana's driver here; amdgpu's own
# wordings are rules since rules/gpu_amd.yaml).
UNKNOWN_GPU_DRIVER_FAILURE = (
    "[Tue Dec  2 13:05:01 2026] habanalabs hl0: Device CPU is not responding, device is not usable\n"
)


def test_an_unknown_gpu_driver_failure_is_a_gpu_lead_never_drained(tmp_path):
    diagnosis = analyze_path(write_job(tmp_path, {"gpu03/dmesg.txt": UNKNOWN_GPU_DRIVER_FAILURE,
                                                  "slurm-77.out": "ERROR: rank 5 could not start\n"}))
    assert (diagnosis.domain, diagnosis.category, diagnosis.quality) == ("gpu", "gpu_hardware_other", "insufficient")
    assert diagnosis.culprit_nodes == ["gpu03"] and diagnosis.drain == []
    assert "no rule knows" in diagnosis.summary


def test_a_lead_is_read_only_when_no_rule_proper_found_the_origin(tmp_path):
    oom = "slurmstepd: error: Detected 1 oom_kill event in StepId=77.0. Some of the step tasks have been OOM Killed.\n"
    diagnosis = analyze_path(write_job(tmp_path, {"gpu03/dmesg.txt": UNKNOWN_GPU_DRIVER_FAILURE, "slurm-77.out": oom}))
    assert (diagnosis.domain, diagnosis.category) == ("application", "host_oom")
    assert diagnosis.quality != "insufficient" and "fallback." not in " ".join(diagnosis.rules_fired)


def test_a_line_a_rule_proper_reads_is_no_lead(tmp_path):
    # srun's banner is a known symptom; its "error:" must not become an application lead
    banner = "slurmstepd: error: *** STEP 77.0 ON gpu01 CANCELLED AT 2026-12-02T13:07:23 DUE TO TASK FAILURE ***\n"
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": banner}))
    assert diagnosis.category != "app_exception", diagnosis.summary


def test_errors_the_program_outlived_are_no_failure(tmp_path):
    # UCX stamps its lines with the UNIX time: 2026-12-02T13:10:00Z, inside the job's window
    log = ("[1796217000.473099] [ampere:1188443:0] ib_log.c:246  UCX  ERROR mlx5_0: some new failure wording\n"
           "# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20\n"
           "           8             2     float     sum      -1    45.82    0.00    0.00      0    38.17    0.00    0.00      0\n")
    diagnosis = analyze_path(write_job(tmp_path / "ok", {"log.txt": log}, state=None))
    assert (diagnosis.domain, diagnosis.category, diagnosis.quality) == ("none", "success", "likely"), diagnosis.summary
    cut = log.split("# nThread")[0]  # the same error with nothing after it is a lead
    diagnosis = analyze_path(write_job(tmp_path / "cut", {"log.txt": cut}, state=None))
    assert (diagnosis.domain, diagnosis.quality) == ("network", "insufficient"), diagnosis.summary


def test_a_line_several_fallback_rules_read_is_one_lead(tmp_path):
    diagnosis = analyze_path(write_job(tmp_path, {"gpu03/dmesg.txt": UNKNOWN_GPU_DRIVER_FAILURE}))
    assert diagnosis.category == "gpu_hardware_other"
    assert not [g for g in diagnosis.symptoms if g.type == "app_error_lead"]  # the same *ERROR* lines, read twice


def test_nccl_error_frames_are_no_sign_of_success(tmp_path):
    # `file:line -> 2`: an NCCL call returned ncclSystemError; with nothing else, no success
    frames = ("gpu01:1050:1316 [0] NCCL INFO include/net.h:25 -> 2\n"
              "gpu01:1050:1316 [0] NCCL INFO transport/net.cc:515 -> 2\n")
    diagnosis = analyze_path(write_job(tmp_path, {"log.txt": frames}, state=None))
    assert diagnosis.domain != "none", diagnosis.summary
    warn = "gpu01:1050:1316 [0] graph/search.cc:703 NCCL WARN XML Import Channel : dev 1 not found.\n"
    diagnosis = analyze_path(write_job(tmp_path / "warn", {"log.txt": warn + frames}, state=None))
    assert (diagnosis.domain, diagnosis.category, diagnosis.quality) == ("application", "nccl_usage", "insufficient")


def test_a_failed_health_check_is_read_by_what_it_tested_and_never_drains(tmp_path):
    checks = {
        "ERROR:  nhc:  Health check failed:  check_hw_ib:  No IB port mlx5_0:1 is ACTIVE (LinkUp 100 Gb/sec).": ("network", "link_down"),
        "ERROR:  nhc:  Health check failed:  check_hw_ib:  No IB port is ACTIVE (LinkUp 100 Gb/sec).": ("network", "link_down"),
        "ERROR:  nhc:  Health check failed:  check_fs_mount:  /scratch not mounted": ("storage", "filesystem_error"),
        "ERROR:  nhc:  Health check failed:  check_hw_physmem:  Actual RAM size 250 GB less than minimum 500 GB": ("host", "host_hardware_other"),
        "ERROR:  nhc:  Health check failed:  Check check_xid_errors returned 1": ("gpu", "gpu_hardware_other"),
        "Node Health Check failed.  Check check_hw_ib returned 1": ("network", "fabric_other"),
    }
    for i, (line, reading) in enumerate(checks.items()):
        diagnosis = analyze_path(write_job(tmp_path / str(i), {"gpu07/syslog.txt": line + "\n"}, state="FAILED"))
        assert (diagnosis.domain, diagnosis.category) == reading, (line, diagnosis.summary)
        assert diagnosis.quality == "likely" and diagnosis.drain == [], diagnosis.summary


def test_an_informational_xid_that_a_health_check_failed_the_node_for_is_a_lead_not_a_confirmation(tmp_path):
    lines = "Found XID errors: 63\nNode Health Check failed.  Check check_xid_errors returned 1\n"
    diagnosis = analyze_path(write_job(tmp_path / "nhc", {"gpu07/syslog.txt": lines}, state="FAILED"))
    assert (diagnosis.category, diagnosis.culprit_nodes, diagnosis.quality) == ("gpu_uncorrectable_ecc", ["gpu07"], "likely")
    assert diagnosis.drain == []


def test_results_with_no_error_line_read_as_likely_success_without_a_job_state(tmp_path):
    rows = ("#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
            "           8             2     float     sum      -1    45.46    0.00    0.00    N/A\n"
            "          32             8     float     sum      -1    41.74    0.00    0.00    N/A\n")
    diagnosis = analyze_path(write_job(tmp_path / "rows", {"slurm-77.out": rows}, state=None))
    assert (diagnosis.domain, diagnosis.category, diagnosis.quality) == ("none", "success", "likely")
    nothing = "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
    diagnosis = analyze_path(write_job(tmp_path / "header", {"slurm-77.out": nothing}, state=None))
    assert diagnosis.category == "no_evidence"  # no result, no error: nothing to go by


XID13 = "NVRM: Xid (PCI:0000:3b:00): 13, pid=4121, name=python, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address\n"
XID109 = "NVRM: Xid (PCI:0000:3b:00): 109, pid=4121, name=python, Ch 00000010, errorString CTX SWITCH TIMEOUT, Info 0x2c004\n"


def test_an_xid_109_after_an_xid_13_of_the_same_gpu_is_its_consequence_timed_or_not(tmp_path):
    timed = "2026-12-02T13:04:06,123456+00:00 " + XID13 + "2026-12-02T13:04:16,123456+00:00 " + XID109
    since_boot = "[ 5000.100000] " + XID13 + "[ 5010.100000] " + XID109  # no anchor: seconds since boot only
    for name, dmesg in (("timed", timed), ("since_boot", since_boot)):
        diagnosis = analyze_path(write_job(tmp_path / name, {"slurm-77.out": nccl_init() + watchdog(0), "gpu03/dmesg.txt": dmesg}))
        assert (diagnosis.domain, diagnosis.cause.gpus[0].xid) == ("application", 13), name
        assert diagnosis.drain == [], name
        assert any(e.role == "symptom" and "): 109," in e.text for e in diagnosis.evidence), name


def test_an_untimed_fault_loses_to_an_equally_strong_timed_one(tmp_path):
    untimed = XID79.split(" ", 1)[1].replace("3b:00", "5e:00")
    diagnosis = analyze_path(write_job(tmp_path, {"gpu01/dmesg.txt": "[ 5010.100000] " + untimed, "gpu03/dmesg.txt": XID79}))
    assert diagnosis.culprit_nodes == ["gpu03"] and diagnosis.quality == "confirmed"


def test_a_gpu_fault_named_by_the_jobs_own_output_keeps_its_meaning_without_a_drain(tmp_path):
    traceback = '[rank5]: Traceback (most recent call last):\n[rank5]:   File "train.py", line 10, in <module>\n[rank5]:     loss.backward()\n'
    for name, line in (("exception", "[rank5]: RuntimeError: GPU has fallen off the bus\n"),
                       ("xid", "[rank5]: Xid 79: GPU reset required\n")):
        diagnosis = analyze_path(write_job(tmp_path / name, {"slurm-77.out": nccl_init() + traceback + line}))
        assert (diagnosis.domain, diagnosis.category) == ("gpu", "gpu_fell_off_bus"), name
        assert diagnosis.quality == "likely" and diagnosis.drain == [], name
        assert diagnosis.culprit_nodes == ["gpu03"], name  # rank 5 runs on gpu03 (NCCL init lines)


def test_ib_protection_and_access_errors_point_at_the_rdma_setup_not_a_cable(tmp_path):
    nccl = "gpu02:1200:1300 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.0.0.3<44206> with status={} opcode=0 len=0 vendor err 138 (Send)\n"
    ucx = "[gpu02:3117:0:3117] ib_mlx5_log.c:143  {} on mlx5_0:1/IB (synd 0x4 vend 0x56 hw_synd 0/0)\n"
    lines = {"status4": nccl.format(4), "status9": nccl.format(9), "status10": nccl.format(10),
             "ucx_protection": ucx.format("Local protection"), "ucx_retry": ucx.format("Transport retry count exceeded")}
    for name, line in lines.items():
        diagnosis = analyze_path(write_job(tmp_path / name, {"slurm-77.out": nccl_init() + line}))
        assert (diagnosis.domain, diagnosis.category, diagnosis.drain) == ("network", "transport_error", []), name
        admin = " ".join(a.text for a in diagnosis.actions if a.who == "admin")
        assert ("cable and switch port" in admin) == (name == "ucx_retry"), name


def test_a_host_is_named_as_the_log_spells_it(tmp_path):
    # a reporter's redacted prefix stays: the node is `...-48`, not `48`
    port_error = "".join(f"...-48:3405{i}:34121 [{i}] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error\n" for i in range(2))
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": port_error}, nodes=[]))
    assert diagnosis.culprit_nodes == ["...-48"]


def test_an_errno_is_read_with_the_call_that_returned_it(tmp_path):
    traceback = 'Traceback (most recent call last):\n  File "/usr/lib/python3.10/shutil.py", line 680, in _rmtree_safe_fd\n    os.unlink(entry.name, dir_fd=topfd)\n'
    # EBUSY on an NFS silly-rename file: a cleanup that met a file still open elsewhere, harmless
    ebusy = "OSError: [Errno 16] Device or resource busy: '/home/u/run/tmp/.nfs000000000123abcd00000042'\n"
    diagnosis = analyze_path(write_job(tmp_path / "ebusy", {"slurm-77.out": traceback + ebusy}))
    assert diagnosis.category != "app_exception"
    assert [e.role for e in diagnosis.evidence if "Errno 16" in e.text] in ([], ["context"])
    # EREMOTEIO from a call on a path: the filesystem serving it failed
    eremoteio = "OSError: [Errno 121] Remote I/O error: '/mnt/nfs/data/shard_0001'\n"
    diagnosis = analyze_path(write_job(tmp_path / "eremoteio", {"slurm-77.out": traceback + eremoteio}))
    assert (diagnosis.domain, diagnosis.category) == ("storage", "filesystem_error")
    # without a path (an I2C/SMBus transfer no device answered) it stays the program's exception
    smbus = "OSError: [Errno 121] Remote I/O error\n"
    diagnosis = analyze_path(write_job(tmp_path / "smbus", {"slurm-77.out": traceback + smbus}))
    assert diagnosis.category == "app_exception"


def test_without_the_jobs_record_a_program_failure_in_lines_of_one_host_names_it(tmp_path):
    """No job.json: when every line that names a host names the same one, the program's failure
    ran there; with two hosts in the lines the lines name no culprit so."""
    def init(*hosts: str) -> str:
        return "".join(f"{host}:1{r}00:1{r}01 [{r}] NCCL INFO Bootstrap : Using eth0:10.0.0.{r}<0>\n" for r, host in enumerate(hosts))

    oom = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.10 GiB\n"
    for name, hosts, culprits in (("one", ("vm-a", "vm-a"), ["vm-a"]), ("two", ("vm-a", "vm-b"), [])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train.log").write_text(init(*hosts) + oom)
        assert analyze_path(tmp_path / name).culprit_nodes == culprits, name


def test_a_busy_gpu_is_read_both_ways_and_the_owner_told_to_give_each_process_its_own(tmp_path):
    # CUDA error 46: the job's own ranks sharing a GPU in exclusive-process mode, or the node's
    # GPU taken by something else (rules/_codes.yaml other_reading and action)
    out = "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n"
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": out}))
    assert (diagnosis.domain, diagnosis.category, diagnosis.quality) == ("application", "cuda_error", "ambiguous")
    assert [a.category for a in diagnosis.alternatives] == ["gpu_hardware_other"]
    assert diagnosis.drain == []
    user = [a.text for a in diagnosis.actions if a.who == "user"]
    assert user and user[0].startswith("Give each process its own GPU")


def test_a_node_failure_reported_later_is_dated_when_its_node_went_silent():
    """srun prints `Node failure on gpu04` once slurmctld gave up on the node (SlurmdTimeout); the
    rule's `onset: node_last_seen` dates the failure by gpu04's last log line, recorded on the
    real test cluster (slurmd of gpu04 killed mid-job)."""
    from datetime import datetime, timezone

    from slurm_attrib.engine.pipeline import judge_path

    case = Path(__file__).parent / "data" / "termination" / "17-node-failure"
    _, events = judge_path(case)
    srun = next(e for e in events if e.rule_id == "slurm.srun_node_failure")
    last_line_of_gpu04 = datetime(2026, 12, 5, 16, 59, 50, 316000, tzinfo=timezone.utc).timestamp()
    assert srun.node == "gpu04"
    assert srun.time == last_line_of_gpu04
    assert "last seen" in srun.notes["time_from"]


def _cause(name, time, strength=2, trusted=True, line=1):
    from slurm_attrib.engine.events import Event, EventHead, FileHead
    from slurm_attrib.provenance import Provenance

    return Event(rule_id=name, head=EventHead(name, "t", kernel_side=True), domain="gpu", category="gpu_hardware_other",
                 role="cause", severity="error", strength=strength, file=FileHead("dmesg.txt", "kernel", Provenance.KERNEL, 0),
                 line=line, line_text=name, trusted=trusted, time=time)


def test_the_roots_rank_by_one_key_moment_strength_time_trust_then_order():
    from slurm_attrib.engine.diagnose import _choose_primary, rank_key

    first = _cause("first", 100.0, strength=2)
    stronger_a_second_later = _cause("stronger", 101.0, strength=3)  # within clock skew: the same moment
    much_later_and_strongest = _cause("late", 400.0, strength=3)
    assert _choose_primary([first, much_later_and_strongest])[0] is first  # time before strength
    assert _choose_primary([first, stronger_a_second_later])[0] is stronger_a_second_later
    untimed_stronger = _cause("untimed", None, strength=3, line=9)
    untimed_equal = _cause("untimed", None, strength=2, line=9)
    assert _choose_primary([first, untimed_stronger])[0] is untimed_stronger  # cannot be shown later
    assert _choose_primary([first, untimed_equal])[0] is first  # timed before untimed
    claimed = _cause("claimed", 100.0, trusted=False)
    recorded = _cause("recorded", 100.5, line=5)
    assert _choose_primary([claimed, recorded])[0] is recorded  # trusted before untrusted
    key = rank_key([first, much_later_and_strongest])
    assert sorted([much_later_and_strongest, first], key=key) == [first, much_later_and_strongest]


def _corrected_errors(days_before_end: list[float]) -> dict[str, str]:
    """gpu03's raw dmesg (seconds since boot) and its journal (wall clock) holding the same
    corrected memory errors, each `days_before_end` days before the job's end."""
    from datetime import datetime, timedelta, timezone

    end = datetime(2026, 12, 2, 13, 30, tzinfo=timezone.utc)
    boot = end - timedelta(days=20)
    dmesg, journal = [], []
    for index, days in enumerate(days_before_end):
        moment = end - timedelta(days=days)
        message = (f"EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 "
                   f"(channel:1 slot:0 page:0x12{index} offset:0x0 grain:32 syndrome:0x0)")
        dmesg.append(f"[{(moment - boot).total_seconds():12.6f}] {message}")
        journal.append(f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}+0000 gpu03 kernel: {message}")
    return {"gpu03/dmesg.txt": "\n".join(dmesg) + "\n", "gpu03/journal.txt": "\n".join(journal) + "\n"}


def test_raw_dmesg_is_placed_by_the_journals_copy_of_its_noise(tmp_path):
    """Corrected memory errors of the ten days before a job, in gpu03's raw dmesg and (collapsed to
    one event) its journal: the dmesg lines are placed on the wall clock through the journal's
    first line, so they are outside the job's window and no DIMM is blamed; the same errors during
    the job still are."""
    old = analyze_path(write_job(tmp_path / "old", _corrected_errors([1.5 + day for day in range(10)]), nodes=["gpu03"]))
    assert (old.domain, old.category) == ("unknown", "no_evidence")
    during = analyze_path(write_job(tmp_path / "during", _corrected_errors([0.001 * (n + 1) for n in range(6)]), nodes=["gpu03"]))
    assert (during.domain, during.category, during.culprit_nodes) == ("host", "host_hardware_other", ["gpu03"])


def test_a_completed_job_whose_link_flapped_and_came_back_succeeded_and_drains_nothing(tmp_path):
    root = write_job(tmp_path / "flap", {
        "slurm-88.out": "[rank0]: step 100/100 loss 0.12\nTraining completed.\n",
        "gpu01/journal.txt": "2026-12-02T13:10:00+0000 gpu01 kernel: mlx5_core 0000:17:00.0 ibp23s0: Link down\n"
                             "2026-12-02T13:10:05+0000 gpu01 kernel: mlx5_core 0000:17:00.0 ibp23s0: Link up\n",
    }, state="COMPLETED", exit_code="0:0")
    flapped = analyze_path(root)
    assert (flapped.domain, flapped.category, flapped.drain) == ("none", "success", [])
    write_job(root, {}, state="FAILED", exit_code="0:0")
    assert analyze_path(root).category == "no_evidence"  # Slurm says it failed: not of the link that came back
    (root / "gpu01" / "journal.txt").write_text("2026-12-02T13:10:00+0000 gpu01 kernel: mlx5_core 0000:17:00.0 ibp23s0: Link down\n")
    assert analyze_path(root).category == "link_down"  # in a FAILED job, a link that never came back still stands


def test_a_completed_job_is_not_failed_by_what_its_nodes_logged_or_its_teardown(tmp_path):
    """Slurm's COMPLETED is a positive end: a node's Xid of some process while it ran is
    background, and an NCCL error printed after the program said it completed is teardown; the same
    lines in a job Slurm recorded FAILED are read as usual."""
    files = {
        "slurm-88.out": "[rank0]: step 100/100 loss 0.12\nTraining completed.\n"
                        "gpu02:2234:2240 [0] NCCL WARN Call to ibv_modify_qp failed with error Connection timed out, destroying communicator\n",
        "gpu01/journal.txt": "2026-12-02T13:10:00+0000 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=4121, name=python, "
                             "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address\n",
    }
    completed = write_job(tmp_path / "completed", files, state="COMPLETED", exit_code="0:0")
    assert (analyze_path(completed).category, analyze_path(completed).drain) == ("success", [])
    failed = analyze_path(write_job(tmp_path / "failed", files, state="FAILED"))
    assert failed.category != "success"


def test_a_job_that_requeued_itself_at_the_time_limit_warning_ended_by_the_time_limit(tmp_path):
    """Lightning's auto-requeue (SIGUSR1 before the limit, `scontrol requeue`): Slurm records the
    run REQUEUED, which must not set the time-limit notice aside as step teardown."""
    output = ("Epoch 3: 100%|##########| 782/782\nhandling SIGUSR1\nrequeing job 77...\nrequeued exp 77\n"
              "bypassing sigterm\nslurmstepd: error: *** JOB 77 ON gpu01 CANCELLED AT 2026-12-02T13:29:30 DUE TO JOB REQUEUE ***\n")
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": output}, state="REQUEUED", exit_code="0:15"))
    assert (diagnosis.domain, diagnosis.category) == ("scheduler", "time_limit"), diagnosis.summary


def test_events_share_their_notes_and_decisions_without_seeing_each_others_changes():
    """Notes and decided_by are shared sets (a many-node job's events repeat a few): a write on
    one event makes it a new set and leaves every other event's as it was."""
    import pickle

    import pytest

    from slurm_attrib.engine.events import NO_NOTES

    first, second = _cause("first", 100.0), _cause("second", 101.0)
    assert first.notes is NO_NOTES and first.decided_by == ()
    with pytest.raises(TypeError):
        first.notes["outside_window"] = "before the job started"  # a shared set is never written in place
    for event in (first, second):
        event.note("outside_window", "before the job started")
        event.decide("window.outside_job")
    assert first.notes is second.notes and first.decided_by is second.decided_by  # one copy each
    first.note("time_from", "boot time from the same line in another log")
    first.decide("window.teardown")
    assert second.notes == {"outside_window": "before the job started"}
    assert second.decided_by == ("window.outside_job",)
    assert first.decided_by == ("window.outside_job", "window.teardown")
    first.drop_note("outside_window")
    assert first.notes == {"time_from": "boot time from the same line in another log"}
    assert second.notes == {"outside_window": "before the job started"}
    assert pickle.loads(pickle.dumps(second)).notes == second.notes  # worker processes send events back
    assert pickle.loads(pickle.dumps(NO_NOTES)) is NO_NOTES
