"""A window's noise counted in Arrow (engine/counting.py) gives the events of reading every line in
Python, field for field: on the realistic corpora's shapes, and on lines made to sit on every
edge of what is counted."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from slurm_attrib.engine import counting, events  # noqa: E402
from slurm_attrib.engine.events import Event, scan_evidence  # noqa: E402
from slurm_attrib.engine.pipeline import _scanner, load_any  # noqa: E402
from slurm_attrib.ruleset.loader import load_rules  # noqa: E402

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from realistic_corpora import SPECS, write_corpus  # noqa: E402


def _scan(folder: Path, monkeypatch, counted: bool):
    """The scan's events, boot times and last-seen times, and the lines counted in Arrow."""
    tally = {"lines": 0, "unsure": 0}
    split, checked = counting.NoiseCounter.split, events._checked_counts

    def spy(self, *args):
        counts, rest = split(self, *args)
        tally["lines"] += sum(c.lines for c in counts)
        return counts, rest

    def spy_checked(*args):
        counted, unsure = checked(*args)
        tally["unsure"] += len(unsure)
        return counted, unsure

    with monkeypatch.context() as patch:
        patch.setattr(counting, "MIN_LINES", 8 if counted else 10**12)
        patch.setattr(counting, "PER_FILE_LINES", 0)  # tiny files: counted all the same
        patch.setattr(counting, "SPARED_SHARE", 0.0)
        patch.setattr(events, "COUNT_FROM_BYTES", 0)
        patch.setattr(counting.NoiseCounter, "split", spy)
        patch.setattr(events, "_checked_counts", spy_checked)
        result = scan_evidence(load_any(folder), _scanner(()))
    assert tally["unsure"] == 0  # no group's first and last lines read apart: the safety net stayed idle
    return result, tally["lines"]


def event_rows(found) -> list[tuple]:
    """Every field of every event of a scan, in order (a cascade's ranks in their order too)."""
    def row(event: Event) -> tuple:
        values = []
        for field in dataclasses.fields(Event):
            value = getattr(event, field.name)
            if field.name == "explained_by":
                value = None if value is None else value.order
            elif field.name == "ranks" and value is not None:
                value = [(rank, share and dataclasses.astuple(share)) for rank, share in value.items()]  # in order
            values.append((field.name, value))
        return tuple(values)

    return [row(e) for e in found.events]


def _same(folder: Path, monkeypatch) -> int:
    counted, lines = _scan(folder, monkeypatch, counted=True)
    plain, none = _scan(folder, monkeypatch, counted=False)
    assert none == 0
    assert event_rows(counted) == event_rows(plain)
    assert counted.boot_times == plain.boot_times and counted.last_seen == plain.last_seen
    return lines


@pytest.mark.parametrize("name", ["b_16n_nccl_legacy", "c_16n_journal_heavy", "d_64n_healthy", "f_16n_modern"])
def test_realistic_shapes_read_alike(name: str, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / name
    write_corpus(SPECS[name].scaled(0.01, nodes=3), folder, tmp_path / "truth.json")
    assert _same(folder, monkeypatch) > 10  # the noise was counted, not read line by line


START, END = 1_764_691_230.0, 1_764_694_845.0  # 2025-12-02T16:00:30Z .. 17:00:45Z: mid-minute edges


def _iso(t: float, fraction: str = "") -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + fraction


def _ctime(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc).strftime("%a %b %e %H:%M:%S %Y")


def _edge_job(folder: Path) -> None:
    """A node whose dmesg and journal hold the counted rules' lines in every form around the
    edges: minutes the job's start and end fall in, other programs, ranks, brackets after the
    header, overlong lines, storms another rule reads, dmesg's ISO and ctime stamps."""
    node = folder / "gpu01"
    node.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps({
        "job_id": "77", "state": "COMPLETED", "exit_code": "0:0", "nodes": ["gpu01"],
        "start": _iso(START) + "Z", "end": _iso(END) + "Z"}))
    aer = "pcieport 0000:{bus:02x}:01.0: AER: Corrected error received: 0000:{bus:02x}:01.0"
    dmesg, journal, ctime = [], [], []
    for i in range(3000):
        t = START - 900 + i * 1.7  # through the start and past the end of the window
        bus = 0x10 + i % 3
        mono = 1000.0 + t - START
        line = aer.format(bus=bus)
        if i % 97 == 0:
            line = f"EDAC MC0: {150 + i % 7} CE memory read error on DIMM_A{i % 2}"  # edac_ce_storm reads it
        elif i % 89 == 0:
            line = f"EDAC MC1: 1 CE memory read error on DIMM_B{i % 2} (page:0x{i:x})"
        elif i % 83 == 0:
            line = f"mlx5_core 0000:0c:00.0: mlx5_cmd_out_err:838:(pid {i}): QUERY_VPORT_COUNTER(0x770) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x{i:x}), err(-22)"
        elif i % 79 == 0:
            line += " [Rank 3]"
        elif i % 73 == 0:
            line += " " + "x" * 9000  # longer than the scanner reads
        dmesg.append(f"[{mono:12.6f}] {line}")
        program = "kernel" if i % 11 else "kernel-helper"
        stamp = _iso(t, f".{i % 1000:03d}" if i % 5 == 0 else "") + ("+0000" if i % 7 else "Z")
        bracket = f"[{mono:.6f}] " if i % 61 == 0 else ""
        journal.append(f"{stamp} gpu01 {program}: {bracket}{line}")
        if i % 13 == 0:
            journal.append(f"{_iso(t)},{i:06d}+00:00 {line}")  # dmesg --time-format iso
        if i % 17 == 0:
            journal.append(f"Dec  2 16:{i % 60:02d}:00 gpu01 kernel: {line}")  # not counted: read in Python
        ctime.append(f"[{_ctime(t)}] {line}")  # dmesg -T
    (node / "dmesg.txt").write_text("\n".join(dmesg) + "\n")
    (node / "dmesg-T.txt").write_text("\n".join(ctime) + "\n")
    (node / "journal.txt").write_text("\n".join(journal) + "\n")


def test_edges_read_alike(tmp_path: Path, monkeypatch) -> None:
    _edge_job(tmp_path / "job")
    assert _same(tmp_path / "job", monkeypatch) > 3000


def test_a_window_with_a_non_ascii_byte_is_read_line_by_line(tmp_path: Path, monkeypatch) -> None:
    _edge_job(tmp_path / "job")
    dmesg = tmp_path / "job" / "gpu01" / "dmesg.txt"
    dmesg.write_bytes(dmesg.read_bytes() + "[ 9999.000000] pcieport 0000:10:01.0: AER: Corrected error received: 0000:10:01.0 \u00e9\n".encode())
    counted, lines = _scan(tmp_path / "job", monkeypatch, counted=True)
    plain, _ = _scan(tmp_path / "job", monkeypatch, counted=False)
    assert event_rows(counted) == event_rows(plain)
    journal_only = sum(1 for e in counted.events if e.source.endswith("dmesg.txt"))
    assert journal_only and lines > 0  # the journal was still counted


def test_which_rules_are_counted() -> None:
    rules = {r.id: r for r in load_rules()}
    assert counting.counted_rule(rules["host.pcie_aer_corrected"])  # its optional groups are not empty when they take part
    assert counting.counted_rule(rules["host.edac_corrected"])  # `count` is digits only: it always casts
    assert not counting.counted_rule(rules["host.edac_ce_storm"])  # it does not collapse
    cascading = next(r for r in rules.values() if r.event.cascade is not None)
    assert not counting.counted_rule(cascading)
    hooked = next(r for r in rules.values() if r.event.hook)
    assert not counting.counted_rule(hooked)


def test_group_shapes() -> None:
    assert counting._may_be_empty(r"a(?P<x>b*)c", "x")
    assert not counting._may_be_empty(r"a(?:(?P<x>b+) )?c", "x")  # optional, not empty
    assert counting._digits_only(r"(?P<n>\d+) CE", "n")
    assert counting._digits_only(r"(?P<n>[0-9]{2,})", "n")
    assert not counting._digits_only(r"(?P<n>\d+\.\d+)", "n")
    assert not counting._digits_only(r"(?P<n>\d*)", "n")


def test_small_files_stop_the_counting_before_arrow_is_used(tmp_path: Path, monkeypatch) -> None:
    """A many-node job's files hold a few noise lines each, in events of a few lines: the first
    batch's files average fewer than PER_FILE_LINES planned lines, so nothing goes to Arrow."""
    folder = tmp_path / "job"
    write_corpus(SPECS["g_32768_rank_cascade"].scaled(0.002, nodes=64), folder, tmp_path / "truth.json")
    counters, runs = [], []
    prepare, run = counting.NoiseCounter.prepare, counting.NoiseCounter._run

    def spy_prepare(self, *args):
        counters.append(self)
        return prepare(self, *args)

    monkeypatch.setattr(events, "COUNT_FROM_BYTES", 0)
    monkeypatch.setattr(counting, "MIN_LINES", 8)
    monkeypatch.setattr(counting.NoiseCounter, "prepare", spy_prepare)
    monkeypatch.setattr(counting.NoiseCounter, "_run", lambda self, windows: runs.append(len(windows)) or run(self, windows))
    scan_evidence(load_any(folder), _scanner(()))
    assert counters and counters[0].stopped and runs == []
