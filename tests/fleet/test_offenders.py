"""Repeat offenders: a node or GPU named as the hardware origin of >= 2 jobs in the window."""

from __future__ import annotations

from slurm_attrib.fleet.offenders import acknowledge, fleet_drains, read_acks, repeat_offenders
from slurm_attrib.store import Row

DAY = 86400.0
NOW = 1_780_000_000.0


def row(job_id, node, *, days_ago, domain="gpu", category="gpu_fell_off_bus", quality="likely", gpu=None, xid=None,
        systemic=False, uuid=None, trusted=True) -> Row:
    when = NOW - days_ago * DAY
    gpus = [{"node": node, "pci_bus_id": gpu, "xid": xid, "uuid": uuid}] if gpu else []
    return Row(job_id=job_id, user="u", uid=1, state="FAILED", domain=domain, category=category, quality=quality,
               culprit_nodes=[node], drains=[], drain_note="", summary="", analysed_at=when, owner_ok=True,
               path="/x", cause_time=when, gpus=gpus, systemic=systemic, trusted=trusted)


def test_two_likely_jobs_in_the_window_make_a_repeat_offender():
    rows = [row("1", "gpu07", days_ago=10), row("2", "gpu07", days_ago=1), row("3", "gpu08", days_ago=2)]
    [offender] = repeat_offenders(rows, NOW)
    assert offender.node == "gpu07" and offender.jobs == ["1", "2"] and offender.recommendation == "drain"
    [entry] = fleet_drains([offender], 14, set())
    assert entry["node"] == "gpu07" and entry["reason"].startswith("sattrib: repeat node fault in 2 jobs/14d")
    assert entry["status"] == "recommended" and entry["jobs"] == ["1", "2"]


def test_causes_resting_on_user_writable_lines_never_strike():
    """Jobs printing `srun: error: Node failure on gpu09` named gpu09 `likely` from their own
    output: untrusted, so however many there are, the fleet names no offender and drains nothing."""
    rows = [row(str(n), "gpu09", days_ago=n, domain="host", category="node_failure", trusted=False) for n in range(1, 6)]
    rows += [row("9", "gpu07", days_ago=1, gpu="0000:3b:00", xid=79, trusted=False), row("10", "gpu07", days_ago=2)]
    assert repeat_offenders(rows, NOW) == []


def test_outside_the_window_systemic_ambiguous_and_software_causes_do_not_count():
    rows = [
        row("1", "gpu07", days_ago=20),  # before the window
        row("2", "gpu07", days_ago=1),
        row("3", "gpu07", days_ago=2, systemic=True),
        row("4", "gpu07", days_ago=3, quality="ambiguous"),
        row("5", "gpu07", days_ago=4, domain="application", category="app_exception"),
    ]
    assert repeat_offenders(rows, NOW) == []
    assert [o.jobs for o in repeat_offenders(rows, NOW, window_days=30)] == [["1", "2"]]


def test_a_gpu_with_repeated_memory_faults_is_an_rma_candidate(tmp_path):
    rows = [row("1", "gpu03", days_ago=5, category="gpu_uncorrectable_ecc", gpu="0000:3b:00.0", xid=48),
            row("2", "gpu03", days_ago=1, category="gpu_row_remap_failure", gpu="0000:3b:00.0", xid=64)]
    offenders = repeat_offenders(rows, NOW)
    # one fault is one offender: the node, with the GPU named inside (not the node and the GPU)
    assert [(o.node, o.pci_bus_id, o.recommendation, o.jobs) for o in offenders] == [("gpu03", "0000:3b:00.0", "rma", ["1", "2"])]
    [entry] = fleet_drains(offenders, 14, set())
    assert "GPU 0000:3b:00.0" in entry["reason"] and "in 2 jobs" in entry["reason"] and entry["recommendation"] == "rma"


def test_one_strike_per_job_per_node_and_the_gpu_named_only_when_it_repeats():
    rows = [row("1", "gpu04", days_ago=5, gpu="0000:18:00", xid=79),
            row("2", "gpu04", days_ago=3, category="gpu_uncorrectable_ecc", gpu="0000:2a:00", xid=48),
            row("3", "gpu04", days_ago=1, domain="host", category="node_failure")]
    [offender] = repeat_offenders(rows, NOW)
    assert (offender.node, offender.pci_bus_id, offender.jobs, offender.recommendation) == ("gpu04", None, ["1", "2", "3"], "drain")
    rows.append(row("4", "gpu04", days_ago=0.5, gpu="0000:2a:00", xid=79))
    [offender] = repeat_offenders(rows, NOW)
    # GPU 2a:00 repeats: named; one of its faults is no memory fault, so a drain, not an RMA
    assert (offender.pci_bus_id, len(offender.strikes), offender.recommendation) == ("0000:2a:00", 4, "drain")


def test_switch_side_fabric_patterns_keep_network_offenders_from_being_drained():
    rows = [row("1", "gpu05", days_ago=3, domain="network", category="link_down"),
            row("2", "gpu05", days_ago=1, domain="network", category="link_down")]
    offenders = repeat_offenders(rows, NOW)
    assert fleet_drains(offenders, 14, {"gpu05"}) == []
    assert [e["node"] for e in fleet_drains(offenders, 14, set())] == ["gpu05"]


def test_a_drain_or_resume_settles_the_earlier_jobs(tmp_path):
    rows = [row("1", "gpu07", days_ago=5), row("2", "gpu07", days_ago=3), row("3", "gpu07", days_ago=1)]
    acknowledge(tmp_path, ["gpu07"], NOW - 2 * DAY)
    assert read_acks(tmp_path) == {"gpu07": NOW - 2 * DAY}
    assert repeat_offenders(rows, NOW, acks=read_acks(tmp_path)) == []  # only job 3 is after the ack
    rows.append(row("4", "gpu07", days_ago=0.5))
    assert [o.jobs for o in repeat_offenders(rows, NOW, acks=read_acks(tmp_path))] == [["3", "4"]]


def test_a_gpu_is_followed_by_its_uuid_when_it_moves():
    uuid = "GPU-5d5b6c1e-8a3f-2c4b-9d7e-1f2a3b4c5d6e"
    rows = [row("1", "gpu03", days_ago=5, gpu="0000:3b:00", xid=79, uuid=uuid),
            row("2", "gpu09", days_ago=1, gpu="0000:5d:00", xid=79, uuid=uuid)]
    [offender] = repeat_offenders(rows, NOW)  # neither node has two strikes; the GPU has
    assert (offender.node, offender.pci_bus_id, offender.uuid, offender.jobs) == ("gpu09", "0000:5d:00", uuid, ["1", "2"])
    [entry] = fleet_drains([offender], 14, set())
    assert entry["node"] == "gpu09" and uuid in entry["reason"]


def test_the_report_counts_a_moved_gpu_once_and_names_where_it_is_now():
    from slurm_attrib.fleet.report import build_report, render_csv
    from slurm_attrib.store.index import counts_of

    uuid = "GPU-5d5b6c1e-8a3f-2c4b-9d7e-1f2a3b4c5d6e"
    rows = [row("1", "gpu03", days_ago=5, gpu="0000:3b:00", xid=79, uuid=uuid),
            row("2", "gpu09", days_ago=1, gpu="0000:5d:00", xid=48, uuid=uuid),
            row("3", "gpu04", days_ago=2, gpu="0000:3b:00", xid=79)]
    data = build_report(counts_of(rows), rows, now=NOW, since_days=7, window_days=14, gpus_per_node=8,
                        offenders=[], patterns=[], fleet_drains=[], cause_lines={})
    assert data["top_gpus"] == {f"gpu09 0000:5d:00 {uuid}": 2, "gpu04 0000:3b:00": 1}
    assert data["xid_histogram"][f"gpu09 0000:5d:00 {uuid}"] == {"48": 1, "79": 1}
    assert data["xid_histogram_by_node"] == {"gpu03": {"79": 1}, "gpu04": {"79": 1}, "gpu09": {"48": 1}}
    [top] = [line for line in render_csv(data).splitlines() if line.startswith("top_gpu") and uuid in line]
    assert top.startswith(f"top_gpu,{uuid},gpu09,0000:5d:00,2,")
