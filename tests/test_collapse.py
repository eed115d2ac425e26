"""Collapsing rules (`event.collapse`): a node's all-day noise is one event with a count and a
last time per side of the job's window, never one event per line, and never mixed with claims."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from pydantic import ValidationError

from slurm_attrib.engine.events import scan_evidence
from slurm_attrib.engine.pipeline import _scanner, analyze_path, judge_path
from slurm_attrib.ingest.layout import load_evidence
from slurm_attrib.ruleset.loader import load_rules
from slurm_attrib.ruleset.scanner import Regex
from slurm_attrib.ruleset.schema import RuleModel
from tests.test_engine import write_job

AER = "2026-12-02T13:{m:02d}:{s:02d}+0000 gpu02 kernel: pcieport 0000:27:01.0: AER: Corrected error received: 0000:27:01.0\n"
CE = "2026-12-02T{h:02d}:{m:02d}:00+0000 gpu02 kernel: EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 page:0x{m:x})\n"


def _events(root, rule_id):
    evidence = load_evidence(root)
    events = scan_evidence(evidence, _scanner(())).events
    return sorted((e for e in events if e.rule_id == rule_id), key=lambda e: e.order)


def test_repeated_noise_is_one_event_with_a_count_and_a_last_time(tmp_path):
    lines = "".join(AER.format(m=5 + n // 60, s=n % 60) for n in range(40))
    root = write_job(tmp_path, {"gpu02/journal.txt": lines})
    (event,) = _events(root, "host.pcie_aer_corrected")
    assert event.repeats == 40
    assert event.line == 1
    assert (event.last_time - event.time) == 39.0


def test_noise_before_the_job_is_counted_apart_from_noise_inside_it(tmp_path):
    before = "".join(CE.format(h=11, m=m) for m in range(3))  # the job starts at 13:00
    inside = "".join(CE.format(h=13, m=m) for m in range(1, 4))
    root = write_job(tmp_path, {"gpu02/journal.txt": before + inside})
    events = _events(root, "host.edac_corrected")
    assert [e.repeats for e in events] == [3, 3]
    # three reports inside the window are fewer than a failing DIMM needs (CE_REPEAT = 5): the
    # three before the job do not count towards them
    assert analyze_path(root).category != "host_hardware_other"
    inside = "".join(CE.format(h=13, m=m) for m in range(1, 7))
    diagnosis = analyze_path(write_job(tmp_path / "six", {"gpu02/journal.txt": before + inside}))
    assert (diagnosis.category, diagnosis.culprit_nodes) == ("host_hardware_other", ["gpu02"])


def test_a_line_another_program_filed_never_joins_the_kernels_count(tmp_path):
    kernel = "".join(AER.format(m=5, s=s) for s in range(10))
    claimed = kernel.replace(" kernel: ", " myjob: ")
    root = write_job(tmp_path, {"gpu02/journal.txt": kernel + claimed})
    events = _events(root, "host.pcie_aer_corrected")
    assert [e.repeats for e in events] == [10, 10]
    assert events[0].trusted and not events[1].trusted


@pytest.mark.parametrize("rule_id, key, wrong_role, refusal, groups", [
    ("host.pcie_aer_corrected", "collapse", {"role": "cause", "category": "pcie_error"}, "only context collapses",
     ["pci", "no_such_group"]),
    ("torch.watchdog_timeout", "cascade", {"role": "cause", "category": "nccl_usage", "domain": "application"},
     "joins a cascade", ["seq", "no_such_group"]),
])
def test_lines_fold_only_in_their_role_and_only_by_their_own_groups(rule_id, key, wrong_role, refusal, groups):
    # event.collapse (a node's noise) and event.cascade (what every rank prints)
    rule = next(r for r in load_rules() if r.id == rule_id)
    data = dataclasses.asdict(rule)
    refused = copy.deepcopy(data)
    refused["event"].update(wrong_role)
    with pytest.raises(ValidationError, match=refusal):
        RuleModel.model_validate(refused)
    unknown_group = copy.deepcopy(data)
    unknown_group["event"][key] = groups
    with pytest.raises(ValidationError, match="no_such_group"):
        RuleModel.model_validate(unknown_group)


@pytest.mark.parametrize("line", [
    b"pcieport 0000:27:01.0: AER: Corrected error received: 0000:27:01.0",
    b"AER: Corrected error received:",  # optional groups take no part
    "pcieport 0000:27:01.0: \u00e9t\u00e9 AER: Corrected error received: 0000:27:01.0".encode(),
    b"nothing to see",
])
def test_the_direct_search_gives_what_the_re2_wrapper_gives(line):
    rule = next(r for r in load_rules() if r.id == "host.pcie_aer_corrected")
    regex = Regex(rule.match.regex)
    assert regex._spans is not None  # the direct path is the one in use here
    assert regex.search(line) == regex._search_with_wrapper(line)


def test_no_lead_stands_on_a_line_a_collapsed_event_counts(tmp_path):
    # Three corrected DRAM errors, in dmesg and in the journal: context, counted once per log.  The
    # second look's generic rules read "memory read error" as a lead on the lines that the
    # collapsed event stands for but whose numbers it does not keep; they are not leads.
    dmesg = "".join(f"[Wed Dec  2 13:0{m}:00 2026] EDAC MC0: 1 CE memory read error on "
                    f"CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 page:0x{m})\n" for m in (1, 2, 3))
    journal = "".join(CE.format(h=13, m=m) for m in (1, 2, 3))
    diagnosis = analyze_path(write_job(tmp_path, {"gpu02/dmesg.txt": dmesg, "gpu02/journal.txt": journal}))
    assert (diagnosis.category, diagnosis.culprit_nodes) == ("no_evidence", [])
    assert not any(rule.startswith("fallback.") for rule in diagnosis.rules_fired)


MONO_AER = "[{t:>12.6f}] pcieport 0000:27:01.0: AER: Corrected error received: 0000:27:01.0\n"
BOOT_PAIR = "2026-12-02T12:00:10+0000 gpu02 kernel: [   10.000000] Linux version 6.8.0-45-generic\n"  # boot: 12:00:00


def _judged(root, rule_id):
    from slurm_attrib.engine.pipeline import judge_path

    _, events = judge_path(root)
    return sorted((e for e in events if e.rule_id == rule_id and e.source.endswith("dmesg.txt")), key=lambda e: e.order)


def test_boot_relative_noise_is_one_event_per_side_once_placed(tmp_path):
    """dmesg's seconds-since-boot lines collapse per minute while the boot time is unknown; placed
    on the wall clock, the minutes in a row on one side of the job's window are one event, with
    the count of that side and the time of its last line (join_minutes): as soon as the node's
    own files are read, which give its boot time (scan_evidence)."""
    before = [3000 + 50 * n for n in range(6)]  # 12:50:00-12:54:10: before the window (13:00, 2 min slack)
    inside = [3700 + 100 * n for n in range(10)]  # 13:01:40-13:16:40
    dmesg = "".join(MONO_AER.format(t=float(t)) for t in before + inside)
    root = write_job(tmp_path, {"gpu02/dmesg.txt": dmesg, "gpu02/journal.txt": BOOT_PAIR})
    scanned = _events(root, "host.pcie_aer_corrected")
    assert len(scanned) == 2  # the minutes joined once the node's files were read
    events = _judged(root, "host.pcie_aer_corrected")
    boot = scanned[0].time - before[0]
    assert [e.repeats for e in events] == [6, 10]
    assert [e.time - boot for e in events] == [before[0], inside[0]]
    assert [e.last_time - boot for e in events] == [before[-1], inside[-1]]


def test_noise_placed_through_the_same_line_elsewhere_joins_too(tmp_path):
    """A node whose boot time comes only from a line dmesg and the journal both hold
    (anchor_boot_clock): its minutes join once anchored, and their last lines are placed too."""
    inside = [3700 + 30 * n for n in range(12)]  # 13:01:40-13:07:10, the boot at 12:00:00
    dmesg = "[ 3650.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, Graphics Exception\n"
    dmesg += "".join(MONO_AER.format(t=float(t)) for t in inside)
    journal = "2026-12-02T13:00:50+0000 gpu02 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, Graphics Exception\n"
    root = write_job(tmp_path, {"gpu02/dmesg.txt": dmesg, "gpu02/journal.txt": journal})
    (event,) = _judged(root, "host.pcie_aer_corrected")
    assert event.repeats == 12
    assert event.notes.get("time_from") == "boot time from the same line in another log"
    assert event.last_time - event.time == inside[-1] - inside[0]


def test_the_minutes_join_alike_whether_a_node_is_settled_early_or_with_the_job(tmp_path):
    """A job-level syslog may name any node, so with one no node is settled before the whole job is
    read (scan_evidence): the events come out the same either way."""
    before = [3000 + 50 * n for n in range(6)]
    inside = [3700 + 100 * n for n in range(10)]
    files = {"gpu02/dmesg.txt": "".join(MONO_AER.format(t=float(t)) for t in before + inside),
             "gpu02/journal.txt": BOOT_PAIR}
    early = _judged(write_job(tmp_path / "early", files), "host.pcie_aer_corrected")
    files["syslog.txt"] = "2026-12-02T12:00:20+0000 head01 systemd[1]: Started Session 4 of user root.\n"
    late_root = write_job(tmp_path / "late", files)
    assert len(_events(late_root, "host.pcie_aer_corrected")) == 15  # one per minute while scanning
    late = _judged(late_root, "host.pcie_aer_corrected")

    def summary(events):
        return [(e.line, e.repeats, e.time, e.last_time, e.mono) for e in events]

    assert summary(early) == summary(late) and [e.repeats for e in early] == [6, 10]


def test_a_line_of_the_job_output_never_sets_a_nodes_boot_clock(tmp_path):
    """The pair that anchors a node's boot clock (anchor_boot_clock) is two lines of its kernel and
    daemons' logs: the same kernel line printed in the job's output (anyone's words) moves no
    dmesg line onto the wall clock, into or out of the job's window."""
    dmesg = "[ 3650.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, Graphics Exception\n"
    forged = "2026-12-02T13:00:50+0000 gpu02 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, Graphics Exception\n"
    own = write_job(tmp_path / "own", {"gpu02/dmesg.txt": dmesg, "gpu02/journal.txt": forged})
    (placed,) = [e for e in judge_path(own)[1] if e.source.endswith("dmesg.txt")]
    assert placed.time is not None  # the journal's copy anchors it
    program = "".join(f"step {n}: loss 2.{n:02d}\n" for n in range(40))  # the job's output reads as the program's
    output = write_job(tmp_path / "output", {"gpu02/dmesg.txt": dmesg, "slurm-1.out": program + forged})
    job_output_events = [e for e in judge_path(output)[1] if e.source == "slurm-1.out"]
    assert [e.node for e in job_output_events] == ["gpu02"]  # the line names the node ...
    (unplaced,) = [e for e in judge_path(output)[1] if e.source.endswith("dmesg.txt")]
    assert unplaced.time is None  # ... but is no second copy of its kernel's line
