"""Progress lines (rules with `event.ends`): a run's first and last progress line per file, found
without reading each line, and a run whose progress stopped short of its end is a stall, not a
success (issue 20: success needs a positive end)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from slurm_attrib.engine.pipeline import analyze_path
from slurm_attrib.ingest import layout
from slurm_attrib.ingest.readers import WINDOW_BLOCK
from slurm_attrib.ruleset.loader import load_rules
from slurm_attrib.ruleset.scanner import Scanner
from slurm_attrib.ruleset.schema import RuleModel

RULES = load_rules()
MEGATRON = " [2026-12-02 10:{m:02d}:{s:02d}] iteration {k:8d}/    1000 | consumed samples: {c:12d} | lm loss: 3.2E+00 |\n"
STACK = (
    "Thread 0x00007f3c8e1b4740 (most recent call first):\n"
    '  File "/opt/megatron/megatron/core/tensor_parallel/mappings.py", line 23 in _reduce\n'
    '  File "/opt/megatron/megatron/training/training.py", line 1120 in train_step\n'
)


def _megatron(last: int) -> str:
    return "".join(MEGATRON.format(m=k // 60 % 60, s=k % 60, k=k, c=k * 256) for k in range(1, last + 1))


def _analyze(tmp_path, files: dict[str, str], job: dict | None = None) -> dict:
    root = tmp_path / "job"
    root.mkdir()
    if job is not None:
        (root / "job.json").write_text(json.dumps(job))
    for name, text in files.items():
        (root / name).write_text(text)
    from slurm_attrib.cli import render_json

    return json.loads(render_json(analyze_path(root)))


def test_only_the_first_and_last_progress_lines_of_a_file_become_hits():
    scanner = Scanner(RULES)
    data = _megatron(500).encode()
    hits = [h for h in scanner.scan(data, "app") if h.rule.id == "marker.training_steps"]
    assert [(h.lineno, h.fields["done"]) for h in hits] == [(1, 1), (500, 500)]
    # a middle window reads neither end; a window holding one end reads that one
    assert not [h for h in scanner.scan(data, "app", ends="none") if h.rule.event.ends]
    assert [h.fields["done"] for h in scanner.scan(data, "app", ends="last") if h.rule.event.ends] == [500]


def test_the_last_line_is_the_last_that_truly_matches():
    """A later line the multi-line search finds but the rule refuses (`unless`) is passed over."""
    data = (_megatron(3) + "# step 9/10 of the notes\n").encode()
    hits = [h for h in Scanner(RULES).scan(data, "app") if h.rule.id == "marker.training_steps"]
    assert [h.fields["done"] for h in hits] == [1, 3]


def test_a_progress_rule_is_never_a_candidate_line_by_line():
    """Its literals are left out of the literal search: a log of progress lines costs nothing per line."""
    scanner = Scanner(RULES)
    ends_literals = {lit for r in RULES if r.event.ends for lit in r.match.contains}
    line_literals = {lit for r in RULES if not r.event.ends for lit in r.match.contains}
    assert ends_literals and not (ends_literals - line_literals) & set(scanner._literals)


def test_only_a_marker_reads_a_files_ends():
    rule = {"id": "x.y", "title": "t", "match": {"contains": ["boom"], "regex": "boom"},
            "event": {"type": "t", "domain": "application", "category": "app_exception", "role": "cause", "ends": True},
            "references": ["https://example.org"], "examples": {"match": [{"line": "boom"}], "no_match": ["b"]}}
    with pytest.raises(ValidationError, match="only a marker"):
        RuleModel.model_validate(rule)


def test_progress_stopped_short_followed_by_stack_dumps_is_a_stall(tmp_path):
    found = _analyze(tmp_path, {"slurm-5001.out": _megatron(300) + STACK})
    assert (found["domain"], found["category"], found["quality"]) == ("unknown", "hang_unattributed", "insufficient")
    assert any("progress stopped at 300/1000" in note and "slurm-5001.out:300" in note for note in found["notes"])


def test_progress_that_reached_its_end_is_a_success(tmp_path):
    text = "".join(MEGATRON.format(m=k // 60 % 60, s=k % 60, k=k, c=k) for k in (1, 500, 1000))
    found = _analyze(tmp_path, {"slurm-5001.out": text})
    assert (found["domain"], found["category"]) == ("none", "success")


def test_a_stalled_bar_is_read_at_its_last_update(tmp_path):
    bar = "Train:   1%|          | 1/500 [00:02<16:40,  2.00s/it]\rTrain:   8%|▊         | 40/500 [15:18<2:32:54, 19.94s/it]\n"
    found = _analyze(tmp_path, {"train.log": bar + STACK})
    assert found["category"] == "hang_unattributed"
    assert any("40/500" in note for note in found["notes"])


def test_a_bar_ended_by_a_kill_on_its_line_is_no_stall(tmp_path):
    bar = "Loading checkpoint shards:  68%|██████▍   | 19/28 [00:48<00:23,  2.59s/it]Killed\n"
    found = _analyze(tmp_path, {"train.log": bar})
    assert found["category"] != "hang_unattributed"


def test_slurm_saying_completed_outweighs_a_bar_stopped_short(tmp_path):
    job = {"job_id": "5001", "state": "COMPLETED", "exit_code": "0:0", "start": "2026-12-02T09:59:00Z",
           "end": "2026-12-02T10:30:00Z", "nodes": ["gpu01"]}
    found = _analyze(tmp_path, {"slurm-5001.out": _megatron(300)}, job)
    assert (found["category"], found["quality"]) == ("success", "confirmed")


def test_the_last_progress_of_a_streamed_file_is_read_from_its_last_window(tmp_path):
    lines = WINDOW_BLOCK * 3 // len(_megatron(1).encode())
    text = "".join(MEGATRON.format(m=0, s=0, k=k % 999 + 1, c=k) for k in range(lines))
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    found = _analyze(tmp_path, {"slurm-5001.out": text + STACK})
    (source,) = layout.load_evidence(tmp_path / "job").files
    assert source.streamed and len(list(source.windows())) > 2  # read window by window
    done = int(last.split("iteration", 1)[1].split("/", 1)[0])
    assert done < 1000 and found["category"] == "hang_unattributed"
    assert any(f"progress stopped at {done}/1000" in note and f"slurm-5001.out:{lines}" in note for note in found["notes"])


def test_a_streamed_file_with_counted_lines_is_read_at_its_ends_only(tmp_path):
    """A cascade's line in every window (NCCL's per-rank init line, one event for all of them)
    must not make a middle window read as the file's first: two progress events, not one per window."""
    init = ("gpu01:5776:5898 [3] NCCL INFO comm 0x55d4f0a0b2c0 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 3b000"
            " commId 0x8f2a9c1d2e3f4a5b - Init COMPLETE\n")
    lines = WINDOW_BLOCK * 3 // len(_megatron(1).encode())
    text = "".join(MEGATRON.format(m=0, s=0, k=k % 999 + 1, c=k) + (init if k % 500 == 0 else "") for k in range(lines))
    root = tmp_path / "job"
    root.mkdir()
    (root / "slurm-5001.out").write_text(text)
    evidence = layout.load_evidence(root)
    assert len(list(evidence.files[0].windows())) > 2
    from slurm_attrib.engine.events import scan_evidence

    events = scan_evidence(evidence, Scanner(RULES)).events
    assert sum(e.repeats for e in events if e.rule_id == "marker.nccl_rank") == (lines - 1) // 500 + 1
    assert [e.fields["done"] for e in events if e.type == "job_progress"] == [1, (lines - 1) % 999 + 1]


def test_a_time_limit_after_progress_stopped_says_the_run_stalled_first(tmp_path):
    job = {"job_id": "5001", "state": "TIMEOUT", "exit_code": "0:15", "start": "2026-12-02T09:59:00Z",
           "end": "2026-12-02T12:00:00Z", "nodes": ["gpu01"]}
    banner = "slurmstepd: error: *** JOB 5001 ON gpu01 CANCELLED AT 2026-12-02T12:00:00 DUE TO TIME LIMIT ***\n"
    found = _analyze(tmp_path, {"slurm-5001.out": _megatron(300) + STACK + banner}, job)
    assert found["category"] == "time_limit"
    assert any("progress had stopped at 300/1000" in note and "min before the job ended" in note for note in found["notes"])
    # progress until the end: no such note
    (tmp_path / "job").rename(tmp_path / "first")
    steady = "".join(MEGATRON.format(m=59, s=k, k=k, c=k) for k in range(1, 40)).replace("10:59", "11:59")
    found = _analyze(tmp_path, {"slurm-5001.out": steady + banner}, job)
    assert found["category"] == "time_limit" and not any("progress had stopped" in n for n in found["notes"])


def test_why_a_run_reads_as_stalled_is_shown_in_every_format(tmp_path):
    """The note that says where progress stopped is in the text, Markdown and HTML a user reads,
    not only in the JSON; the summary says the run stopped, not that it hung in a collective."""
    from slurm_attrib.render import render_html, render_markdown, render_text

    root = tmp_path / "job"
    root.mkdir()
    (root / "slurm-5001.out").write_text(_megatron(300) + STACK)
    diagnosis = analyze_path(root)
    assert diagnosis.category == "hang_unattributed" and "collective" not in diagnosis.summary
    why = "progress stopped at 300/1000"
    assert any(why in note for note in diagnosis.notes)
    text = render_text(diagnosis)
    assert f"  why      {why}" in text
    assert f"| **why** | {why}" in render_markdown(diagnosis)
    assert f'<dt>why</dt><dd class="notes">{why}' in render_html(diagnosis)
