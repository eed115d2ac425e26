"""Windows over streamed files (what the scanner reads of a large file, one pread per window), and
worker processes scanning a large job's files."""

from __future__ import annotations

import gzip
import os
import random
import subprocess
import sys

import pytest

from slurm_attrib.engine.events import scan_evidence
from slurm_attrib.engine.pipeline import _scanner
from slurm_attrib.ingest import readers
from slurm_attrib.ingest.layout import load_evidence


def _content(seed: int, crlf: bool) -> bytes:
    rng = random.Random(seed)
    lines = []
    for number in range(400):
        width = rng.choice([0, 5, 40, 120, 900]) if number != 200 else 5000  # one line longer than a block
        lines.append(f"{number:04d} " + "x" * width)
    text = ("\r\n" if crlf else "\n").join(lines)
    return text.encode() + (b"" if seed % 2 else b"\n")  # odd seeds: no line end at the end


def _windows(path, content: bytes, monkeypatch, block: int, lines: int, span: int):
    monkeypatch.setattr(readers, "CONTEXT_LINES", lines)
    monkeypatch.setattr(readers, "CONTEXT_BYTES", span)
    monkeypatch.setattr(readers, "AFTER_READ", 300)
    path.write_bytes(content)
    return [
        (bytes(w.data), w.begin, w.end, w.offset, w.last)
        for w in readers.iter_windows(path, 0, len(content), block=block)
    ]


def _expected_before(text: bytes, at: int, lines: int, span: int) -> bytes:
    """The last `lines` whole lines before `at` within `span` bytes (a line start)."""
    start = at
    for _ in range(lines):
        previous = text.rfind(b"\n", 0, max(start - 1, 0)) + 1 if start > 0 else 0
        if start == 0 or at - previous > span:
            break
        start = previous
    return text[start:at]


def _expected_after(text: bytes, at: int, lines: int, span: int) -> bytes:
    end = at
    for _ in range(lines):
        found = text.find(b"\n", end)
        if found < 0:
            return text[at:] if len(text) - at <= span else text[at:end]
        if found + 1 - at > span:
            break
        end = found + 1
    return text[at:end]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("crlf", [False, True])
def test_bodies_tile_the_content_and_contexts_are_whole_neighbour_lines(tmp_path, monkeypatch, seed, crlf):
    content = _content(seed, crlf)
    text = content.replace(b"\r\n", b"\n")
    block, lines, span = [700, 1500, 4096][seed % 3], [0, 3, 8][seed % 3], [200, 2000, 1 << 20][seed % 3]
    windows = _windows(tmp_path / "big.log", content, monkeypatch, block, lines, span)
    assert len(windows) > 3
    position = raw = 0  # the body's start in the normalised content and in the file
    for data, begin, end, offset, last in windows:
        assert offset + begin == position  # offsets are into the normalised content
        assert data[begin:end] == text[position : position + end - begin]
        assert data == text[offset : offset + len(data)]
        # context sizes are measured in the file's bytes
        assert data[:begin] == _expected_before(content, raw, lines, span).replace(b"\r\n", b"\n")
        position += end - begin
        raw += end - begin + (data.count(b"\n", begin, end) if crlf else 0)
        assert data[end:] == _expected_after(content, raw, lines, span).replace(b"\r\n", b"\n")
        assert position == len(text) or text[position - 1 : position] == b"\n"
        assert last == (position == len(text))
    assert position == len(text)


def test_a_line_longer_than_the_block_is_one_body(tmp_path, monkeypatch):
    content = b"short\n" + b"y" * 10_000 + b"\nend\n"
    windows = _windows(tmp_path / "long.log", content, monkeypatch, 1000, 2, 1 << 20)
    assert [data[begin:end] for data, begin, end, _, _ in windows] == [b"short\n", b"y" * 10_000 + b"\n", b"end\n"]


def test_a_file_that_shrinks_while_read_ends_the_windows(tmp_path, monkeypatch):
    path = tmp_path / "shrinking.log"
    content = b"".join(b"line %d\n" % n for n in range(2000))
    path.write_bytes(content)
    seen = []
    for window in readers.iter_windows(path, 0, len(content), block=1024):
        seen.append(bytes(window.data[window.begin : window.end]))
        if len(seen) == 2:
            path.write_bytes(content[:3000])
    assert b"".join(seen) == content[: len(b"".join(seen))]
    assert len(b"".join(seen)) <= 3000 + 1024 + 64 * 1024


def test_streamed_and_held_files_give_the_same_events(tmp_path, monkeypatch):
    """Line numbers, times and texts of events do not depend on where windows are cut."""
    lines = []
    for n in range(3000):
        if n % 97 == 5:
            lines.append(f"[{n}.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.")
        elif n % 13 == 0:
            lines.append(f"[{n}.500000] random kernel line {n}")
        else:
            lines.append(f"untimed line {n} " + "z" * (n % 50))
    content = ("\n".join(lines) + "\n").encode()
    root = tmp_path / "job"
    (root / "node001").mkdir(parents=True)
    (root / "node001" / "dmesg.txt").write_bytes(content)
    scanner = _scanner(())

    def events(small_file: int, block: int):
        monkeypatch.setattr(readers, "SMALL_FILE", small_file)
        monkeypatch.setattr(readers, "WINDOW_BLOCK", block)
        evidence = load_evidence(root)
        assert evidence.files[0].streamed == (small_file < len(content))
        return [(e.rule_id, e.line, e.mono, e.time, e.text) for e in scan_evidence(evidence, scanner).events]

    held = events(1 << 30, readers.WINDOW_BLOCK)
    assert len(held) == 31
    assert events(1024, 4096) == held
    assert events(1024, 700) == held


def _job_with_large_files(root, files: int = 4):
    for n in range(files):
        node = root / f"node{n + 1:03d}"
        node.mkdir(parents=True)
        lines = [f"[{t}.250000] some kernel line {t} on node {n}" for t in range(4000)]
        lines[1000 + 500 * n] = f"[{1000 + 500 * n}.500000] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE (0x1) detected."
        lines.insert(3000, "untimed line between stamped ones")
        (node / "dmesg.txt").write_text("\n".join(lines) + "\n")


def _summary(scans):
    return [([(e.rule_id, e.line, e.time, e.mono, e.text, e.node) for e in s.events], s.observations, s.last) for s in scans]


def test_workers_scan_what_this_process_scans(tmp_path, monkeypatch):
    from slurm_attrib.engine import events as events_module
    from slurm_attrib.ingest.timestamps import evidence_year

    monkeypatch.setattr(readers, "SMALL_FILE", 1024)
    monkeypatch.setattr(readers, "WINDOW_BLOCK", 16 * 1024)
    _job_with_large_files(tmp_path / "job")
    evidence = load_evidence(tmp_path / "job")
    assert all(f.streamed for f in evidence.files)
    scanner, year = _scanner(()), evidence_year(evidence)
    here = [events_module._scan_file(i, f, scanner, year, True, evidence.job) for i, f in enumerate(evidence.files)]
    assert sum(len(s.events) for s in here) == 4
    assert _summary(events_module._scan_in_workers(evidence, scanner, year, True, 2, "")) == _summary(here)
    assert _summary(events_module._scan_in_workers(evidence, scanner, year, True, 3, "")) == _summary(here)


def test_the_diagnosis_does_not_depend_on_the_number_of_workers(tmp_path):
    _job_with_large_files(tmp_path / "job", files=3)
    outputs = []
    for workers in ("1", "3"):
        out = tmp_path / f"diagnosis-{workers}.json"
        env = {**os.environ, "SATTRIB_SCAN_WORKERS": workers}
        subprocess.run([sys.executable, "-m", "slurm_attrib.cli", "analyze", str(tmp_path / "job"), "--output", str(out)],
                       check=True, env=env, capture_output=True)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    assert b"gpu_uncorrectable_ecc" in outputs[0]


# ------------------------------------------------------------------------------ gzip, streamed

def _gz_windows(path, content: bytes, monkeypatch, block: int, lines: int, span: int, level: int = 6):
    monkeypatch.setattr(readers, "CONTEXT_LINES", lines)
    monkeypatch.setattr(readers, "CONTEXT_BYTES", span)
    monkeypatch.setattr(readers, "AFTER_READ", 300)
    monkeypatch.setattr(readers, "CHUNK", 1000)  # decompressed in many small pieces
    path.write_bytes(gzip.compress(content, level))
    return [
        (bytes(w.data), w.begin, w.end, w.offset, w.last)
        for w in readers.iter_windows(path, 0, len(content), block=block, compressed=True)
    ]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_gzip_file_streams_the_windows_of_its_plain_content(tmp_path, monkeypatch, seed):
    content = _content(seed, crlf=seed > 2)
    plain = _windows(tmp_path / "plain.log", content, monkeypatch, block=3000, lines=4, span=2500)
    streamed = _gz_windows(tmp_path / "log.gz", content, monkeypatch, block=3000, lines=4, span=2500)
    assert len(plain) > 5 and streamed == plain


def _noisy_job_output(lines: int) -> bytes:
    init = "".join(f"gpu0{n // 2 + 1}:1{n}00:1{n}01 [{n % 2}] NCCL INFO comm 0x55d0c8a0 rank {n} nranks 8 cudaDev {n % 2} "
                   f"nvmlDev {n % 2} busId {n % 2 + 1}b000 commId 0x5f2c1a - Init COMPLETE\n" for n in range(8))
    steps = "".join(f"[2026-12-02 13:{n // 3000 % 60:02d}:00] iteration {n}/100000 | lm loss: 2.{n % 997:03d}\n"
                    for n in range(lines))
    return (init + steps + "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
            "RuntimeError: CUDA error: an illegal memory access was encountered\n").encode()


def test_a_large_gzip_output_is_streamed_and_read_whole(tmp_path, monkeypatch):
    # More than SMALL_FILE decompressed: streamed window by window, never held; its first lines
    # (the NCCL rank map) and its last (the failure) both read, as in the plain file.
    monkeypatch.setattr(readers, "SMALL_FILE", 64 * 1024)
    monkeypatch.setattr(readers, "WINDOW_BLOCK", 256 * 1024)
    content = _noisy_job_output(40_000)
    assert len(content) > 2 * 1024 * 1024
    for name, data in (("plain", content), ("gz", gzip.compress(content))):
        (tmp_path / name / "gpu01").mkdir(parents=True)
        (tmp_path / name / "slurm-77.out").write_bytes(data)
    found = {}
    for name in ("plain", "gz"):
        evidence = load_evidence(tmp_path / name)
        (source,) = evidence.files
        assert source.streamed and source.start == 0 and source.size == len(content)
        assert source.compressed == (name == "gz")
        assert source.read_all() == content  # its windows' bodies, joined (SourceFile.blocks)
        found[name] = [(e.rule_id, e.line, e.rank) for e in scan_evidence(evidence, _scanner(())).events]
    assert found["gz"] == found["plain"]
    assert any(rule == "marker.nccl_rank" for rule, _, _ in found["gz"])  # the first lines
    assert any(rule.startswith("cuda.") for rule, _, _ in found["gz"]), found["gz"][-5:]


def test_a_gzip_file_over_the_cap_keeps_its_newest_lines_as_a_plain_file_does(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "SMALL_FILE", 64 * 1024)
    content = _noisy_job_output(20_000)
    (tmp_path / "plain.log").write_bytes(content)
    (tmp_path / "log.gz").write_bytes(gzip.compress(content))
    cap = len(content) // 3 + 17  # inside a line
    plain, packed = readers.probe_file(tmp_path / "plain.log", cap), readers.probe_file(tmp_path / "log.gz", cap)
    assert not packed.whole and packed.result.compressed and packed.result.status == "truncated"
    assert (packed.start, packed.size, packed.result.line_offset) == (plain.start, plain.size, plain.result.line_offset)
    assert packed.result.data == plain.result.data  # the head and tail samples
    kept = b"".join(bytes(w.data[w.begin:w.end]) for w in readers.iter_windows(tmp_path / "log.gz", packed.start,
                                                                                 packed.size, compressed=True))
    assert kept == content[plain.start:] and kept.startswith(b"[2026-")


def test_a_truncated_gzip_stream_is_read_as_far_as_it_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "SMALL_FILE", 64 * 1024)
    content = _noisy_job_output(20_000)
    packed = gzip.compress(content)
    (tmp_path / "log.gz").write_bytes(packed[: len(packed) // 2])
    probe = readers.probe_file(tmp_path / "log.gz")
    assert probe.result.status == "truncated" and "truncated" in probe.result.detail
    kept = b"".join(bytes(w.data[w.begin:w.end]) for w in readers.iter_windows(tmp_path / "log.gz", probe.start,
                                                                                 probe.size, compressed=True))
    assert len(kept) == probe.size and content.startswith(kept)


_WATCHDOG = ("[rank{rank}]:[E1202 15:18:{second:02d}.267672062 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught "
             "collective operation timeout: WorkNCCL(SeqNum={rank}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
             "Timeout(ms)=600000) ran for 600020 milliseconds before timing out.")
_XID = "Dec 02 15:18:{second:02d} node001 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."


def _job_output_and_journal(root, newline: str = "\n", compress: bool = False) -> tuple[list[str], list[str]]:
    """A job output with watchdog lines (one event each: another sequence number) among progress lines, and a node's journal with
    Xid lines: the lines the events must show."""
    output = [_WATCHDOG.format(rank=n, second=n % 60) if n % 50 == 7 else f"step {n} loss 1.{n:04d}"
              for n in range(3000)]
    journal = [_XID.format(second=n % 60) if n % 300 == 1 else f"Dec 02 15:18:{n % 60:02d} node001 systemd[1]: tick {n}"
               for n in range(3000)]
    (root / "node001").mkdir(parents=True)
    for rel, lines in (("slurm-1.out", output), ("node001/journal.txt", journal)):
        content = (newline.join(lines) + newline).encode()
        if compress:
            (root / (rel + ".gz")).write_bytes(gzip.compress(content))
        else:
            (root / rel).write_bytes(content)
    return [line for line in output if "Watchdog" in line], [line for line in journal if "Xid" in line]


@pytest.mark.parametrize("held, small_file, newline, compress, read_again", [
    (True, 1 << 30, "\n", False, True),  # held in memory: the line is read from the data held
    (False, 1 << 30, "\n", False, True),  # read whole again when analysed (past HELD_TOTAL): from the file
    (False, 1024, "\n", False, True),  # streamed window by window: from the file
    (False, 1024, "\r\n", False, False),  # CRLF normalised: the text is kept
    (False, 1024, "\n", True, False),  # gzip: the text is kept
])
def test_events_show_their_lines_read_again_from_where_the_file_holds_them(
        tmp_path, monkeypatch, held, small_file, newline, compress, read_again):
    """An event keeps where its line is instead of its text when the line can be read again as it
    was (most lines are never shown: 40 MB of a 4,096-node job's memory), and shows the same text."""
    from slurm_attrib.ingest import layout

    watchdogs, xids = _job_output_and_journal(tmp_path / "job", newline, compress)
    monkeypatch.setattr(readers, "SMALL_FILE", small_file)
    monkeypatch.setattr(readers, "WINDOW_BLOCK", 16 * 1024)
    monkeypatch.setattr(layout, "HELD_TOTAL", 1 << 30 if held else 0)
    evidence = load_evidence(tmp_path / "job")
    events = scan_evidence(evidence, _scanner(())).events
    shown = {rule: [e.text for e in events if e.rule_id == rule] for rule in ("torch.watchdog_timeout", "gpu.xid")}
    assert shown == {"torch.watchdog_timeout": watchdogs, "gpu.xid": xids}
    kept = [isinstance(e.line_text, str) for e in events if e.rule_id in shown]
    assert kept == [not read_again] * len(kept)


@pytest.mark.parametrize("change, why", [
    ("remove", "No such file or directory"),
    ("rotate", "another file is there now"),  # logrotate: renamed away, a new file in its place
    ("truncate", "the file is shorter now"),
])
def test_a_line_that_cannot_be_read_again_says_so(tmp_path, monkeypatch, change, why):
    from slurm_attrib.ingest import layout

    _job_output_and_journal(tmp_path / "job")
    monkeypatch.setattr(layout, "HELD_TOTAL", 0)
    evidence = load_evidence(tmp_path / "job")
    events = scan_evidence(evidence, _scanner(())).events
    output = tmp_path / "job" / "slurm-1.out"
    if change == "remove":
        output.unlink()
    elif change == "rotate":
        content = output.read_bytes()
        output.rename(tmp_path / "job" / "slurm-1.out.1")
        output.write_bytes(content.replace(b"Watchdog", b"Watchd0g"))  # the same size, other words
    else:
        output.write_bytes(b"")
    watchdog = [e for e in events if e.rule_id == "torch.watchdog_timeout"][-1]
    assert watchdog.text.startswith("(the line at byte ")
    assert f"slurm-1.out could not be read again: {why})" in watchdog.text


def test_workers_events_show_the_lines_their_files_hold(tmp_path, monkeypatch):
    """A worker's events keep where their lines are, not their text, and show the same text here."""
    from slurm_attrib.engine import events as events_module

    watchdogs, xids = _job_output_and_journal(tmp_path / "job")
    monkeypatch.setattr(readers, "SMALL_FILE", 1024)
    monkeypatch.setattr(readers, "WINDOW_BLOCK", 16 * 1024)
    monkeypatch.setenv("SATTRIB_SCAN_WORKERS", "2")
    scanned_in_workers = []
    in_workers = events_module._scan_in_workers
    monkeypatch.setattr(events_module, "_scan_in_workers",
                        lambda *args: scanned_in_workers.append(in_workers(*args)) or scanned_in_workers[-1])
    events = scan_evidence(load_evidence(tmp_path / "job"), _scanner(())).events
    assert scanned_in_workers and scanned_in_workers[0] is not None
    shown = [e for e in events if e.rule_id in ("torch.watchdog_timeout", "gpu.xid")]
    assert [e.text for e in shown] == xids + watchdogs  # in file order: node001/ sorts first
    assert all(isinstance(e.line_text, int) for e in shown)
