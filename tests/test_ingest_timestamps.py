import calendar
import random
import time
from pathlib import Path

import pytest

from slurm_attrib.ingest.timestamps import (
    LineTime,
    estimate_boot_times,
    parse_line_time,
    time_after,
    time_before,
    year_hint,
)
from slurm_attrib.ingest import timestamps
from slurm_attrib.ingest.types import Evidence, JobContext, SourceFile
from slurm_attrib.provenance import Provenance


def utc(y, mo, d, h, mi, s, frac=0.0):
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + frac


T = utc(2024, 12, 2, 13, 4, 6)


@pytest.mark.parametrize(
    "line, hint, wall, mono",
    [
        # dmesg, seconds since boot
        ("[  123.456789] NVRM: Xid (PCI:0000:a1:00): 79, GPU has fallen off the bus.", None, None, 123.456789),
        ("[25033.266922] nvidia-peermem nv_get_p2p_free_callback:127 ERROR", 2024, None, 25033.266922),
        # ten digits are no uptime (31 years) but UCX's gettimeofday
        ("[1668693503.473099] [ampere:1188443:0]   ib_log.c:246  UCX  ERROR mlx5_0: ibv_create_cq() failed", None,
         utc(2022, 11, 17, 13, 58, 23, 0.473099), None),
        ("[999999999.500000] uptime of 31 years, still read as one", None, None, 999999999.5),
        # dmesg -T (the year is in the line)
        ("[Tue Apr  9 01:21:38 2024] NVRM: Xid (PCI:0000:a1:00): 79", None, utc(2024, 4, 9, 1, 21, 38), None),
        # bracketed RFC 3164 stamps of December and February (their first letters are also glog's levels)
        ("[Dec  2 13:04:06] gpu01 slurmd[77]: error: x", 2024, T, None),
        ("[Feb 02 13:04:06] x", 2024, utc(2024, 2, 2, 13, 4, 6), None),
        # NVIDIA Fabric Manager's log: month, day, year, time
        ("[Dec 02 2024 13:04:06] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0", None, T, None),
        ("[Jul 23 2024 07:53:55] [INFO] [tid 12] Fabric Manager version 535.129.03 is running", None,
         utc(2024, 7, 23, 7, 53, 55), None),
        ("[Dec 02 2024 13:04:06 unclosed", None, None, None),
        # dmesg --time-format iso
        ("2024-04-09T01:21:38,123456+00:00 NVRM: Xid 79", None, utc(2024, 4, 9, 1, 21, 38, 0.123456), None),
        ("2024-04-09T03:21:38,500000+02:00 NVRM: Xid 79", None, utc(2024, 4, 9, 1, 21, 38, 0.5), None),
        # RFC 3164 (year from the hint)
        ("Dec  2 13:04:06 gpu01 kernel: NVRM: Xid 79", 2024, T, None),
        ("Dec  2 13:04:06 gpu01 slurmd[123]: error: foo", 2023, utc(2023, 12, 2, 13, 4, 6), None),
        ("<13>Dec  2 13:04:06 gpu01 prog: msg", 2024, T, None),
        # RFC 5424 / ISO 8601 with zone
        ("<165>1 2024-12-02T13:04:06.123+01:00 gpu01 app 1 - - msg", None, T - 3600 + 0.123, None),
        ("2024-12-02T13:04:06.123Z gpu01 app: msg", None, T + 0.123, None),
        ("2024-12-02T13:04:06-05:30 gpu01 app: msg", None, T + 5.5 * 3600, None),
        # journalctl short / short-precise / short-iso / short-iso-precise / short-full
        ("Dec 02 13:04:06 gpu01 kernel: mlx5_core: link down", 2024, T, None),
        ("Dec 02 13:04:06.123456 gpu01 kernel: msg", 2024, T + 0.123456, None),
        ("2024-12-02T13:04:06+0100 gpu01 kernel: msg", None, T - 3600, None),
        ("2024-12-02T13:04:06.654321+0100 gpu01 kernel: msg", None, T - 3600 + 0.654321, None),
        ("Mon 2024-12-02 13:04:06 UTC gpu01 kernel: msg", None, T, None),
        # syslog line with the kernel's mono stamp: both
        ("Dec  2 13:04:06 gpu01 kernel: [12345.678901] NVRM: Xid 79", 2024, T, 12345.678901),
        ("2024-12-02T13:04:06+00:00 gpu01 kernel: [  42.5] pcieport: AER", None, T, 42.5),
        # glog and PyTorch glog prefix (year from the hint)
        ("E1202 13:04:06.123456 12345 file.cc:12] boom", 2024, T + 0.123456, None),
        ("W1026 03:51:31.222000 2521679 site-packages/torch/distributed/elastic/multiprocessing/api.py:908] x",
         2025, utc(2025, 10, 26, 3, 51, 31, 0.222), None),
        ("[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught", 2024,
         utc(2024, 12, 18, 20, 27, 21, 0.426415540), None),
        # NCCL 2.26+ WARN timestamp
        ("[2024-12-02 13:04:06] gpu01:1234:5678 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB", None, T, None),
        # torchrun elastic error block
        ("  time      : 2022-02-26_22:02:07", None, utc(2022, 2, 26, 22, 2, 7), None),
        # Python logging
        ("2024-12-02 13:04:06,123 - root - INFO - hello", None, T + 0.123, None),
        ("[2024-12-02 13:04:06,500] [INFO] hello", None, T + 0.5, None),
        # slurmd log
        ("[2024-12-02T13:04:06.250] error: Node configuration differs", None, T + 0.25, None),
        # srun --label and [rankN]: prefixes
        ("12: 2024-12-02 13:04:06,123 - root - INFO - hello", None, T + 0.123, None),
        (" 3: [rank3]:[W1202 13:04:06.000000000 ProcessGroupNCCL.cpp:1] x", 2024, T, None),
        ("12: [2024-12-02 13:04:06] gpu01:1:2 [0] NCCL WARN x", None, T, None),
        ("[default0]:[rank0]:[E1202 13:04:06.000000000 ProcessGroupNCCL.cpp:1] x", 2024, T, None),
        # IBM Storage Scale (GPFS) mmfs.log: the year after the time with a colon, or ISO with `_`
        ("Mon Jun 25 22:23:36.298 2018: Close connection to 192.168.10.109 c5n109", None,
         calendar.timegm((2018, 6, 25, 22, 23, 36)) + 0.298, None),
        ("2024-12-02_14:04:06.000+0100: [E] Lost membership in cluster c1.", None, T, None),
        # dmesg -x facility prefix
        ("kern  :err   : [  123.456] NVRM: Xid", None, None, 123.456),
    ],
)
def test_formats(line, hint, wall, mono):
    got = parse_line_time(line, hint)
    if wall is None:
        assert got.wall is None
    else:
        assert got.wall == pytest.approx(wall, abs=1e-6)
    if mono is None:
        assert got.mono is None
    else:
        assert got.mono == pytest.approx(mono)


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: *** JOB 494583 ON ... CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***",
        "Traceback (most recent call last):",
        "",
        "   ",
        "[  +0.000316] pcieport 0000:00:03.0: AER: Corrected error received",  # delta: no absolute time
        "torch.distributed.DistBackendError: NCCL error in: x",
        "12: no time here",
        "[rank11]: torch.OutOfMemoryError: CUDA out of memory.",
        "Dec 32 13:04:06 host kernel: impossible day",
        "2024-13-02T13:04:06 month 13",
        "2023-02-29 12:00:00 not a leap year",
        "Feb 30 12:00:00 host kernel: x",
        "\x00\x00\x00 binary",
        "Epoch: [0][415/1736]\t Loss 0.5844",
    ],
)
def test_no_time(line):
    assert parse_line_time(line, 2024) == LineTime(None, None)


def test_year_less_formats_without_hint_have_no_wall():
    assert parse_line_time("Dec  2 13:04:06 gpu01 kernel: msg", None).wall is None
    assert parse_line_time("E1202 13:04:06.123456 1 f.cc:1] x", None).wall is None
    both = parse_line_time("Dec  2 13:04:06 gpu01 kernel: [12.5] x", None)
    assert both == LineTime(None, 12.5)


def test_timestamp_inside_message_is_not_the_line_time():
    got = parse_line_time("srun: error: gpu01: task 3: Exited at 2024-04-20T09:09:37", 2024)
    assert got == LineTime(None, None)


def test_long_line_is_cheap():
    line = "[  1.5] " + "x" * 50_000_000
    start = time.perf_counter()
    assert parse_line_time(line, None).mono == 1.5
    assert time.perf_counter() - start < 0.5


def test_time_before():
    data = (
        b"[  10.000000] first\n"
        b"    continuation a\n"
        b"    continuation b\n"
        b"[  12.000000] second\n"
        b"    continuation c\n"
        b"    continuation d\n"
    )
    offset_d = data.index(b"    continuation d")
    assert time_before(data, offset_d, None) == LineTime(None, 12.0)
    offset_second = data.index(b"[  12.000000]")
    assert time_before(data, offset_second, None) == LineTime(None, 10.0)  # earlier lines only
    assert time_before(data, 0, None) == LineTime(None, None)
    offset_a = data.index(b"    continuation a")
    assert time_before(data, offset_a, None).mono == 10.0
    # bounded look-back
    many = b"[  5.0] start\n" + b"no time\n" * 40 + b"target\n"
    assert time_before(many, many.index(b"target"), None, max_lines=30) == LineTime(None, None)
    assert time_before(many, many.index(b"target"), None, max_lines=50).mono == 5.0


def test_time_before_with_wall_times():
    data = b"2024-12-02 13:04:06,000 - x - ERROR - boom\nTraceback (most recent call last):\n  File x\n"
    assert time_before(data, data.index(b"  File"), None).wall == pytest.approx(T)


def test_year_hint():
    assert year_hint(JobContext()) is None
    assert year_hint(JobContext(start=utc(2023, 12, 31, 23, 0, 0))) == 2023
    assert year_hint(JobContext(end=utc(2025, 1, 1, 0, 0, 1))) == 2025
    assert year_hint(JobContext(start=utc(2023, 6, 1, 0, 0, 0), end=utc(2024, 6, 1, 0, 0, 0))) == 2023


def test_estimate_boot_times():
    boot = T - 1000.0
    node_a = (
        b"Dec  2 13:04:06 gpu01 kernel: [ 1000.000000] NVRM: Xid 79\n"
        b"Dec  2 13:04:07 gpu01 kernel: [ 1001.000000] NVRM: more\n"
        # an early-boot message stamped with the syslog daemon's receive time: an outlier
        b"Dec  2 13:05:00 gpu01 kernel: [    1.000000] early boot\n"
        b"Dec  2 13:04:08 gpu01 systemd[1]: started\n"
    )
    dmesg_only = b"[  123.456] NVRM: Xid\n"
    job_level = b"2024-12-02T13:04:06+00:00 gpu02 kernel: [  500.000000] mlx5: link down\n"
    ev = Evidence(
        root=Path("."),
        job=JobContext(start=T - 10),
        files=[
            SourceFile("gpu01/syslog", "gpu01", "syslog", Provenance.DAEMON, node_a),
            SourceFile("gpu03/dmesg.txt", "gpu03", "kernel", Provenance.KERNEL, dmesg_only),
            SourceFile("all.log", None, "syslog", Provenance.USER, job_level),
            SourceFile("app.log", None, "app", Provenance.USER, b"Dec  2 13:04:06 gpu09 kernel: [ 1.0] x\n"),
        ],
    )
    boots = estimate_boot_times(ev)
    assert boots["gpu01"] == pytest.approx(boot)
    assert boots["gpu02"] == pytest.approx(T - 500.0)
    assert "gpu03" not in boots  # mono only: no pair
    assert "gpu09" not in boots  # app output is not a source of kernel stamps


def test_last_time_is_the_last_stamped_line():
    from slurm_attrib.ingest.timestamps import last_time

    data = b"2026-12-02T13:00:00+00:00 a\n2026-12-02T13:05:00+00:00 b\nno time here\n\n\n"
    assert last_time(data, 2026).wall == calendar.timegm((2026, 12, 2, 13, 5, 0))
    assert last_time(b"nothing\n", 2026).wall is None


def test_evidence_year_without_a_job_window():
    from slurm_attrib.ingest.timestamps import evidence_year

    files = [
        SourceFile("a/syslog", "a", "syslog", Provenance.DAEMON, b"Dec  2 13:04:06 a kernel: x\n"),
        SourceFile("b/dmesg", "b", "kernel", Provenance.KERNEL, b"[Tue Dec  1 10:00:00 2026] y\n"),
    ]
    assert evidence_year(Evidence(Path("."), JobContext(), files)) == 2026
    assert evidence_year(Evidence(Path("."), JobContext(), files[:1])) is None


def _time_before_line_by_line(data: bytes, offset: int, max_lines: int, floor: int) -> LineTime:
    """The definition time_before keeps: the nearest earlier line with a time, within reach."""
    lines = data[: data.rfind(b"\n", 0, offset) + 1].split(b"\n")[:-1]
    starts = [sum(len(line) + 1 for line in lines[:i]) for i in range(len(lines))]
    for line, start in list(zip(lines, starts))[::-1][:max_lines]:
        if start < floor:
            break
        found = parse_line_time(line[:512].decode("utf-8", errors="replace"), 2026)
        if found.wall is not None or found.mono is not None:
            return found
    return LineTime(None, None)


def test_time_before_finds_what_reading_line_by_line_finds():
    rng = random.Random(7)
    shapes = ["[{n}.5] kernel line", "untimed {n}", "2026-12-02T13:00:{s:02d}+0000 host prog: x", "",
              "[  {n}.25]", "ends with a bracket [", " 12.5] after it", "12:00:0 not a stamp", "Dec  2 13:00:{s:02d} h p: y"]
    for _ in range(200):
        lines = [rng.choice(shapes).format(n=rng.randrange(1000), s=rng.randrange(60)) for _ in range(rng.randrange(1, 40))]
        data = ("\n".join(lines) + "\n").encode()
        offset = rng.randrange(len(data) + 1)
        max_lines, floor = rng.randrange(1, 12), rng.choice([0, rng.randrange(len(data) + 1)])
        assert time_before(data, offset, 2026, max_lines, floor) == _time_before_line_by_line(data, offset, max_lines, floor)


def _time_after_line_by_line(data: bytes, offset: int, year: int, max_lines: int):
    """What time_after must give: each of the next max_lines lines parsed in turn; the search
    stops at the stamped line's start, else at the end of the lines read."""
    lines_end = data.find(b"\n", offset)
    if lines_end < 0:
        return None, None, len(data)
    for _ in range(max_lines):
        start = lines_end + 1
        lines_end = data.find(b"\n", start)
        stamp = parse_line_time(data[start:len(data) if lines_end < 0 else lines_end].decode(errors="replace"), year)
        if stamp.wall is not None or stamp.mono is not None:
            return stamp.wall, stamp.mono, start
        if lines_end < 0:
            return None, None, len(data)
    return None, None, lines_end


@pytest.mark.parametrize("near", [1, 64, timestamps.NEAR_BYTES])
def test_the_look_ahead_finds_what_reading_line_by_line_finds(monkeypatch, near):
    monkeypatch.setattr(timestamps, "NEAR_BYTES", near)
    shapes = [b"frame #3: foo + 0x12 (0x7f in lib.so)", b"[rank3]:[E1202 13:14:06.123 ProcessGroupNCCL.cpp:632] x",
              b"2026-12-02T13:04:06+0000 gpu01 kernel: x", b"", b"12:30:45 not a stamp at the start",
              b"[  123.456] eth0 up", b"x" * 3000]
    chance = random.Random(7)
    for _ in range(3000):
        data = b"\n".join(chance.choice(shapes) for _ in range(chance.randint(0, 40))) + chance.choice([b"", b"\n"])
        offset, max_lines = chance.randint(0, len(data)), chance.choice([1, 3, 30])
        found, stopped = time_after(data, offset, 2026, max_lines)
        assert (found.wall, found.mono, stopped) == _time_after_line_by_line(data, offset, 2026, max_lines)


def test_a_small_file_is_sampled_whole_for_its_years():
    """A file of at most two samples is read once, whole: a stamp across the point where the
    head sample ended and the tail sample began still gives its year."""
    sample = timestamps._YEAR_SAMPLE
    line = b"2025-01-02T03:04:05 host kernel: x\n"
    data = b"a" * (sample - 10) + b"\n" + line
    data += b"b" * (2 * sample - len(data) - 1) + b"\n"
    assert len(data) == 2 * sample
    assert timestamps.sample_years(data) == [2025]
    assert timestamps.sample_years(b"c" * 3 * sample + b"\n" + line) == [2025]  # a large file: its tail
