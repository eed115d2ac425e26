"""Cascades (`event.cascade`): what every rank prints when a collective stalls is one event per
node with its ranks, never one event per rank, and the judgement still reads which ranks and
nodes, how many lines and when."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from pydantic import ValidationError

from slurm_attrib.engine.events import ranks_of, resolve_nodes, scan_evidence
from slurm_attrib.engine.pipeline import _scanner, analyze_path
from slurm_attrib.ingest.layout import load_evidence
from slurm_attrib.ruleset.loader import load_rules
from slurm_attrib.ruleset.schema import RuleModel
from tests.test_engine import NODES, nccl_init, watchdog, write_job


def _timeouts(root, resolved=True):
    evidence = load_evidence(root)
    events = scan_evidence(evidence, _scanner(())).events
    if resolved:
        resolve_nodes(events, evidence.job)
    return sorted((e for e in events if e.rule_id == "torch.watchdog_timeout"), key=lambda e: e.order)


def _labelled(task: int, line: str) -> str:
    return f"{task}: {line}"


def test_the_ranks_of_one_srun_task_are_one_event(tmp_path):
    # srun --label, one torchrun per node: task 0 runs ranks 0-3, task 1 ranks 4-7
    lines = [_labelled(r // 4, watchdog(r, clock=f"13:14:0{r}")) for r in range(8)]
    root = write_job(tmp_path, {"slurm-77.out": "".join(lines)})
    events = _timeouts(root, resolved=False)
    assert [(e.task, ranks_of(e), e.repeats) for e in events] == [(0, [0, 1, 2, 3], 4), (1, [4, 5, 6, 7], 4)]
    first, second = events
    assert first.line == 1 and second.line == 5
    assert first.last_time - first.time == 3.0  # 13:14:00 to 13:14:03


def test_unlabelled_ranks_split_by_the_node_each_rank_ran_on(tmp_path):
    # No srun label: the ranks' lines name only their rank; NCCL's init lines map ranks to nodes.
    order = (7, 0, 1, 6, 2)  # printed a second apart, in this order
    output = nccl_init() + "".join(watchdog(r, clock=f"13:14:0{n}") for n, r in enumerate(order))
    root = write_job(tmp_path, {"slurm-77.out": output})
    unresolved = _timeouts(root, resolved=False)
    assert len(unresolved) == 1 and ranks_of(unresolved[0]) == [0, 1, 2, 6, 7]
    parts = _timeouts(root)
    by_node = {e.node: e for e in parts}
    assert set(by_node) == {NODES[0], NODES[1], NODES[3]}  # ranks 0-1, 2, 6-7 (two ranks per node)
    gpu04 = by_node[NODES[3]]
    assert ranks_of(gpu04) == [6, 7] and gpu04.repeats == 2
    assert gpu04.rank == 7 and "[Rank 7]" in gpu04.text  # its own first line, not the cascade's
    assert gpu04.fields["rank"] == 7
    assert gpu04.time == min(e.time for e in parts)  # rank 7 printed first (13:14:00)
    assert by_node[NODES[1]].time - gpu04.time == 4.0  # rank 2 printed last
    assert ranks_of(by_node[NODES[1]]) == [2] and "[Rank 2]" in by_node[NODES[1]].text


def test_ranks_in_different_collectives_stay_apart(tmp_path):
    # The fields of event.cascade (process group, sequence number, operation) must agree: ranks
    # that timed out in different collectives are the evidence of a desynchronised program.
    allreduce = "".join(watchdog(r) for r in (0, 1, 2))
    broadcast = watchdog(3).replace("OpType=ALLREDUCE", "OpType=BROADCAST")
    root = write_job(tmp_path, {"slurm-77.out": nccl_init() + allreduce + broadcast})
    events = _timeouts(root, resolved=False)
    assert [(e.fields["op"], ranks_of(e)) for e in events] == [("ALLREDUCE", [0, 1, 2]), ("BROADCAST", [3])]
    diagnosis = analyze_path(root)
    assert any("ALLREDUCE on rank(s) 0, 1, 2; BROADCAST on rank(s) 3" in note for note in diagnosis.notes), diagnosis.notes


def test_the_diagnosis_counts_every_rank_and_line_of_a_cascade(tmp_path):
    output = nccl_init() + "".join(watchdog(r) for r in (0, 1, 2, 3, 6, 7))
    xid = "2026-12-02T13:04:06,123456+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=4121, name=python, GPU has fallen off the bus.\n"
    diagnosis = analyze_path(write_job(tmp_path, {"slurm-77.out": output, "gpu03/dmesg.txt": xid}))
    (timeouts,) = [s for s in diagnosis.symptoms if s.type == "collective_timeout"]
    assert (timeouts.count, timeouts.ranks, timeouts.nodes) == (6, [0, 1, 2, 3, 6, 7], ["gpu01", "gpu02", "gpu04"])
    assert timeouts.explained_by == "gpu.xid"


def test_a_cascade_of_lines_that_name_their_host_keys_on_it():
    # The ranks of one event are placed by its host: a rule that reads a host keys its cascade on it.
    rule = next(r for r in load_rules() if r.id == "marker.nccl_rank")
    data = dataclasses.asdict(rule)
    data["event"]["cascade"] = ["nranks"]
    with pytest.raises(ValidationError, match=r"must name \['host'\]"):
        RuleModel.model_validate(data)
