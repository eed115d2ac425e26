"""hang_finding: the rank a hang started from, from flight-recorder and py-spy dumps (real files)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

from slurm_attrib.capture import frdump
from slurm_attrib.ingest.hangdumps import HangFinding, hang_finding
from slurm_attrib.ingest.layout import load_evidence

TIMEOUT = ("[rank{r}]:[E1202 16:56:50.861592770 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
           "operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
           "Timeout(ms)=600000) ran for 600013 milliseconds before timing out.\n")


def fr_dump(last_seq: int, last_state: str = "started", op: str = "nccl:all_reduce", sizes=None,
            pg_status: bool = True, as_json: bool = False, ops: dict | None = None) -> dict:
    """A flight-recorder dump in the shape torch writes (FlightRecorder.hpp keys)."""
    sizes = sizes if sizes is not None else [[1024]]
    entries = []
    for seq in range(1, last_seq + 1):
        state = "completed" if seq < last_seq else last_state
        entries.append({
            "frames": [{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 2050}],
            "record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"),
            "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
            "profiling_name": (ops or {}).get(seq, op), "time_created_ns": 1733158000000000000 + seq,
            "duration_ms": 1.5, "input_sizes": sizes, "input_dtypes": ["Float"], "output_sizes": sizes,
            "output_dtypes": ["Float"], "state": state,
            "time_discovered_started_ns": 1733158000000000100 + seq,
            "time_discovered_completed_ns": 1733158000000000200 + seq if state == "completed" else None,
            "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False,
        })
    started = last_seq if last_state in ("started", "completed") else last_seq - 1
    completed = last_seq if last_state == "completed" else last_seq - 1
    dump = {
        "version": "2.4",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
        "entries": entries,
        "nccl_comm_state": {},
    }
    if pg_status:
        status = {"last_enqueued_collective": last_seq, "last_started_collective": started,
                  "last_completed_collective": completed}
        dump["pg_status"] = {"0": {k: str(v) for k, v in status.items()} if as_json else status}
    if as_json:
        for e in entries:
            e["process_group"] = list(e["process_group"])
    return dump


def write_pickles(root: Path, dumps: dict[int, dict], per_node: int = 2) -> None:
    for rank, dump in dumps.items():
        node = root / f"gpu{rank // per_node + 1:02d}"
        node.mkdir(parents=True, exist_ok=True)
        (node / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump))


def job_log(root: Path, ranks=range(4)) -> None:
    (root / "slurm-77.out").write_text("".join(TIMEOUT.format(r=r) for r in ranks))


def test_pickled_dumps_name_the_rank_behind(tmp_path):
    write_pickles(tmp_path, {0: fr_dump(12), 1: fr_dump(12), 2: fr_dump(11, "completed"), 3: fr_dump(12)})
    job_log(tmp_path)
    found = hang_finding(load_evidence(tmp_path))
    assert isinstance(found, HangFinding)
    assert found.ranks == [2] and found.nodes == ["gpu02"]
    assert "behind" in found.reason and "11" in found.reason and found.kind == "lagging"
    rels = [rel for rel, _, _ in found.evidence]
    assert "gpu02/nccl_trace_rank_2" in rels
    assert all(line >= 1 for _, line, _ in found.evidence)


def test_dumps_without_pg_status_use_the_entries(tmp_path):
    dumps = {r: fr_dump(20, pg_status=False) for r in range(6)}
    dumps[4] = fr_dump(19, "completed", pg_status=False)
    write_pickles(tmp_path, dumps, per_node=3)
    found = hang_finding(load_evidence(tmp_path))
    assert found is not None and found.ranks == [4] and found.nodes == ["gpu02"]


def test_json_dumps(tmp_path):
    for rank in range(4):
        dump = fr_dump(7, as_json=True) if rank != 1 else fr_dump(7, "scheduled", as_json=True)
        (tmp_path / f"nccl_trace_rank_{rank}.json").write_text(json.dumps(dump))
    found = hang_finding(load_evidence(tmp_path))
    # same last enqueued; rank 1 never started collective 7
    assert found is not None and found.ranks == [1] and found.nodes == []
    assert "started" in found.reason


def test_mismatched_collective_names_the_odd_rank(tmp_path):
    dumps = {r: fr_dump(12) for r in range(4)}
    dumps[3] = fr_dump(12, ops={12: "nccl:all_gather"})
    dumps[0] = fr_dump(12, sizes=[[1024]])
    write_pickles(tmp_path, dumps)
    found = hang_finding(load_evidence(tmp_path))
    assert found is not None and found.ranks == [3] and found.nodes == ["gpu02"]
    assert "nccl:all_gather" in found.reason and "collective 12" in found.reason
    assert found.kind == "mismatch"


def test_size_mismatch(tmp_path):
    dumps = {r: fr_dump(5) for r in range(5)}
    dumps[2] = fr_dump(5, sizes=[[512]])
    write_pickles(tmp_path, dumps, per_node=5)
    found = hang_finding(load_evidence(tmp_path))
    assert found is not None and found.ranks == [2]


def test_dumps_that_single_out_nobody(tmp_path):
    write_pickles(tmp_path, {r: fr_dump(12) for r in range(4)})
    assert hang_finding(load_evidence(tmp_path)) is None
    # two of four behind: nobody singled out
    other = tmp_path / "two"
    write_pickles(other, {0: fr_dump(12), 1: fr_dump(11, "completed"), 2: fr_dump(11, "completed"), 3: fr_dump(12)})
    assert hang_finding(load_evidence(other)) is None


class Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (subprocess.call, (["touch", str(self.marker)],))


def test_malicious_pickle_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps({"version": "2.4", "entries": [Exploit(marker)], "pg_status": {}})
    assert frdump.load_dump(evil) is None
    assert not marker.exists()
    dumps = {0: fr_dump(12), 1: fr_dump(12), 3: fr_dump(12)}
    write_pickles(tmp_path / "job", dumps)
    (tmp_path / "job" / "gpu02" / "nccl_trace_rank_2").write_bytes(evil)
    assert hang_finding(load_evidence(tmp_path / "job")) is None
    assert not marker.exists()
    # a global in any position is refused, even a harmless builtin
    assert frdump.load_dump(pickle.dumps({"entries": [], "x": len})) is None


def test_truncated_and_garbage_dumps(tmp_path):
    good = pickle.dumps(fr_dump(11, "completed"))
    assert frdump.load_dump(good[: len(good) // 2]) is None
    assert frdump.load_dump(b"\x80\x04garbage") is None
    assert frdump.load_dump(b"{not json") is None
    assert frdump.load_dump(pickle.dumps([1, 2, 3])) is None
    write_pickles(tmp_path, {0: fr_dump(12), 1: fr_dump(12), 3: fr_dump(12)})
    (tmp_path / "gpu02" / "nccl_trace_rank_2").write_bytes(good[: len(good) // 2])
    assert hang_finding(load_evidence(tmp_path)) is None
    only = tmp_path / "only"
    only.mkdir()
    (only / "nccl_trace_rank_0").write_bytes(b"\x80\x05\x95" + b"\xff" * 100)
    assert hang_finding(load_evidence(only)) is None


def test_deeply_nested_sizes_are_bounded():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    dump = fr_dump(3, sizes=[[1]])
    dump["entries"][-1]["input_sizes"] = deep
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)
    try:
        data = pickle.dumps(dump)
    finally:
        sys.setrecursionlimit(limit)
    loaded = frdump.load_dump(data)
    lines = frdump.summary_lines(0, loaded)
    assert lines and all(len(line) < 2000 for line in lines)
    # 200,000 nested lists built by hand (EMPTY_LIST ... APPEND ...): loads without recursion
    bomb = b"\x80\x02" + b"]" * 200_000 + b"a" * 199_999 + b"."
    assert frdump.load_dump(bomb) is None


def test_summary_lines_round_trip():
    lines = frdump.summary_lines(3, fr_dump(12))
    assert lines[0].startswith("sattrib-fr rank=3 pg=0 name=default_pg last_enqueued=12 last_started=12 last_completed=11")
    assert "seq=12 op=nccl:all_reduce state=started sizes=[[1024]]" in lines[0]
    rank, state, status = frdump.parse_line(lines[0])
    assert (rank, state.pg, state.last_completed, status) == (3, "0", 11, True)
    assert state.entries[12] == ("nccl:all_reduce", "[[1024]]", "started")


# ------------------------------------------------------------------------------ torchfrtrace


def test_fr_trace_report(tmp_path):
    (tmp_path / "fr_trace.txt").write_text(
        "Not all ranks joining collective 5 at entry 4\n"
        "group info: 0:default_pg\n"
        "collective: nccl:all_reduce\n"
        "missing ranks: {1}\n"
        "input sizes: [[3, 4]]\n"
        "collective state: scheduled\n"
    )
    found = hang_finding(load_evidence(tmp_path))
    assert found is not None and found.ranks == [1]
    assert found.evidence == [("fr_trace.txt", 4, "missing ranks: {1}")]
    assert found.kind == "lagging"


def test_fr_trace_culprit_ranks(tmp_path):
    (tmp_path / "fr.txt").write_text(
        "Collective 39 at entry 38 errors\ncollective: nccl:all_reduce\ninput sizes: [[1025]]\n"
        "error msg: Culprit rank 22; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[1025]]' "
        "does not match found input sizes: '[[262144]]', Culprit rank 110; Error type: SIZE_OR_SYNTAX_MISMATCH\n"
    )
    found = hang_finding(load_evidence(tmp_path))
    assert found is not None and found.ranks == [22, 110] and found.kind == "mismatch"
    assert found.evidence[0][:2] == ("fr.txt", 4)


def test_fr_trace_naming_many_ranks_is_no_finding(tmp_path):
    (tmp_path / "fr.txt").write_text("missing ranks: {1, 5, 9}\n")
    assert hang_finding(load_evidence(tmp_path)) is None


# ------------------------------------------------------------------------------ py-spy


def pyspy(pid: int, cmd: str, frames: list[str], prefix: str = "") -> str:
    body = [f"Process {pid}: {cmd}", "Python v3.10.12 (/usr/bin/python3.10)", "",
            f'Thread {pid} (active): "MainThread"', *[f"    {f}" for f in frames],
            f'Thread {pid + 50} (idle): "Thread-1"', "    wait (threading.py:324)",
            "    _bootstrap (threading.py:973)", ""]
    return "".join(prefix + line + "\n" for line in body)


ALL_REDUCE = ["all_reduce (torch/distributed/distributed_c10d.py:2050)", "wrapper (torch/distributed/c10d_logger.py:83)",
              "train_step (train.py:120)", "<module> (train.py:200)"]
FORWARD = ["forward (model.py:88)", "_call_impl (torch/nn/modules/module.py:1527)", "train_step (train.py:110)",
           "<module> (train.py:200)"]
LOADER = ["_next_data (torch/utils/data/dataloader.py:1328)", "__next__ (torch/utils/data/dataloader.py:631)",
          "<module> (train.py:95)"]


def test_pyspy_one_file_with_rank_in_the_command_line(tmp_path):
    text = "".join(pyspy(1000 + r, f"python -u train.py --local_rank={r}", FORWARD if r == 5 else ALL_REDUCE)
                   for r in range(8))
    (tmp_path / "stacks.txt").write_text(text)
    found = hang_finding(load_evidence(tmp_path))
    assert found is not None and found.ranks == [5]
    assert "forward" in found.reason and "all_reduce" in found.reason and found.kind == "stack"
    lines = (tmp_path / "stacks.txt").read_text().splitlines()
    for rel, n, line in found.evidence:
        assert rel == "stacks.txt" and lines[n - 1].strip() == line
    assert any("--local_rank=5" in line for _, _, line in found.evidence)
    assert any(line.startswith("forward (model.py:88)") for _, _, line in found.evidence)


def test_pyspy_one_file_per_rank_in_node_folders(tmp_path):
    for r in range(4):
        node = tmp_path / f"gpu{r // 2 + 1:02d}"
        node.mkdir(exist_ok=True)
        (node / f"py-spy-rank{r}.txt").write_text(pyspy(2000 + r, "python train.py", LOADER if r == 1 else ALL_REDUCE))
    found = hang_finding(load_evidence(tmp_path))
    assert found is not None and found.ranks == [1] and found.nodes == ["gpu01"]
    assert "data loader" in found.reason


def test_pyspy_host_headers_and_order(tmp_path):
    parts = []
    for h, host in enumerate(("gpu07", "gpu08")):
        parts.append(f"=== {host} ===\n")
        for i in range(2):
            r = 2 * h + i
            parts.append(pyspy(3000 + r, "python train.py", FORWARD if r == 2 else ALL_REDUCE))
    (tmp_path / "hang-dumps.log").write_text("".join(parts))
    found = hang_finding(load_evidence(tmp_path))
    assert found is not None and found.ranks == [2] and found.nodes == ["gpu08"]


def test_pyspy_srun_labels(tmp_path):
    text = "".join(pyspy(4000 + r, "python train.py", FORWARD if r == 3 else ALL_REDUCE, prefix=f"{r}: ")
                   for r in range(4))
    (tmp_path / "slurm-9.out").write_text("step 100 loss 2.1\n" + text)
    found = hang_finding(load_evidence(tmp_path), rank_nodes={3: "gpu04"})
    assert found is not None and found.ranks == [3] and found.nodes == ["gpu04"]


def test_pyspy_all_in_the_same_collective_is_no_finding(tmp_path):
    (tmp_path / "stacks.txt").write_text("".join(pyspy(5000 + r, f"python train.py RANK={r}", ALL_REDUCE) for r in range(4)))
    assert hang_finding(load_evidence(tmp_path)) is None
    (tmp_path / "stacks.txt").write_text("".join(
        pyspy(5000 + r, f"python train.py RANK={r}", FORWARD if r < 2 else ALL_REDUCE) for r in range(4)))
    assert hang_finding(load_evidence(tmp_path)) is None  # two of four elsewhere: nobody singled out


def test_sources_disagreeing_give_none(tmp_path):
    write_pickles(tmp_path, {0: fr_dump(12), 1: fr_dump(12), 2: fr_dump(11, "completed"), 3: fr_dump(12)})
    (tmp_path / "stacks.txt").write_text("".join(
        pyspy(1000 + r, f"python train.py RANK={r}", FORWARD if r == 1 else ALL_REDUCE) for r in range(4)))
    assert hang_finding(load_evidence(tmp_path)) is None


def test_cli_still_diagnoses_with_corrupt_dumps(tmp_path):
    job_log(tmp_path)
    (tmp_path / "nccl_trace_rank_0").write_bytes(b"\x80\x04\x95\x00\x00garbage\x00")
    marker = tmp_path / "pwned"
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps({"entries": [Exploit(marker)]}))
    done = subprocess.run([sys.executable, "-m", "slurm_attrib", "analyze", str(tmp_path), "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout)["category"]
    assert not marker.exists()


def analyze(root: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "slurm_attrib", "analyze", str(root), "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_analyze_names_the_node_of_the_rank_behind(tmp_path):
    write_pickles(tmp_path, {0: fr_dump(12), 1: fr_dump(12), 2: fr_dump(11, "completed"), 3: fr_dump(12)})
    job_log(tmp_path)
    result = analyze(tmp_path)
    assert (result["domain"], result["category"]) == ("unknown", "hang_unattributed")
    assert result["culprit_nodes"] == ["gpu02"] and result["quality"] == "likely"
    assert result["drain"] == []
    assert "rank 2" in result["summary"] and "gpu02" in result["summary"]
    causes = [line for line in result["evidence"] if line["role"] == "cause"]
    assert causes and causes[0]["source"] == "gpu02/nccl_trace_rank_2" and causes[0]["node"] == "gpu02"
    assert result["cause"]["rule"] == "hang.dumps" and result["cause"]["nodes"] == ["gpu02"]


def test_analyze_calls_a_collective_mismatch_a_program_error(tmp_path):
    dumps = {r: fr_dump(12) for r in range(4)}
    dumps[3] = fr_dump(12, ops={12: "nccl:all_gather"})
    write_pickles(tmp_path, dumps)
    job_log(tmp_path)
    result = analyze(tmp_path)
    assert (result["domain"], result["category"]) == ("application", "nccl_usage")
    assert result["culprit_nodes"] == ["gpu02"] and result["drain"] == []
    assert "different collectives" in result["summary"]


def test_analyze_without_dumps_keeps_the_hang_unattributed(tmp_path):
    job_log(tmp_path)
    result = analyze(tmp_path)
    assert result["category"] == "hang_unattributed" and result["culprit_nodes"] == []
    assert result["cause"] is None
