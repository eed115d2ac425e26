"""Input that is legal in form but hostile in size or value (far stamps, huge hostlists, gzip
bombs, deep folders, malformed bundles) gives a diagnosis with coverage notes, never a stop."""

import gzip
import json
import os
import resource
import subprocess
import zlib

import pytest

from slurm_attrib import hostlist
from slurm_attrib.engine.timefmt import iso, unix
from slurm_attrib.ingest import readers
from slurm_attrib.ingest.layout import TimeOutOfRange, parse_job_time
from slurm_attrib.ingest.timestamps import parse_line_time
from slurm_attrib.timebounds import sane_time
from support import sattrib_argv

EXCEPTION = "Traceback (most recent call last):\nValueError: boom\n"


def analyze(path, timeout=120):
    result = subprocess.run([*sattrib_argv(), "analyze", str(path)], capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in result.stderr
    return result


def job_coverage(diagnosis):
    return [c["detail"] for c in diagnosis["coverage"] if c["source"] == "job.json"]


FAR_STAMPS = [
    "9999-12-31T23:59:59-12:00",
    "0000-01-01T00:00:00",
    "0001-01-01T00:00:00+01:00",
    "2201-01-01T00:00:00Z",
    "[99999999999999999999999999999999999999.5]",
    "Dec 31 23:59:59 9999",
    "[Fri Dec 31 23:59:59 9999]",
]


@pytest.mark.parametrize("stamp", FAR_STAMPS)
def test_a_far_stamp_is_no_time(stamp):
    found = parse_line_time(f"{stamp} ValueError: boom", 2026)
    assert found.wall is None and found.mono is None


def test_sane_stamps_still_parse():
    assert parse_line_time("2026-12-02T13:04:06Z x", None).wall == 1796216646.0
    assert parse_line_time("[  123.5] x", None).mono == 123.5


@pytest.mark.parametrize("value", [1e20, -1e20, float("nan"), float("inf"), 10**30, -1, "9999-12-31T23:59:59-12:00",
                                   "0000-01-01T00:00:00", "99999999999999999999"])
def test_a_job_time_out_of_range_is_ignored(value):
    with pytest.raises(TimeOutOfRange):
        parse_job_time(value)


def test_time_printing_never_overflows():
    assert iso(1e20) is None and iso(float("nan")) is None and iso(-1e20) is None
    assert unix("9999-12-31T23:59:59-12:00") is None
    assert iso(sane_time(0)) == "1970-01-01T00:00:00.000Z"


@pytest.mark.parametrize("stamp", FAR_STAMPS)
def test_a_far_stamp_in_job_output_hides_no_diagnosis(tmp_path, stamp):
    (tmp_path / "slurm-1.out").write_text(f"{stamp} {EXCEPTION}")
    result = analyze(tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["category"] == "app_exception"


def test_job_json_times_out_of_range_are_coverage_notes(tmp_path):
    (tmp_path / "job.json").write_text('{"state": "FAILED", "start": NaN, "end": 1e20}')
    (tmp_path / "slurm-1.out").write_text("2026-12-02T13:04:06Z " + EXCEPTION)
    result = analyze(tmp_path)
    assert result.returncode == 0, result.stderr
    diagnosis = json.loads(result.stdout)
    assert diagnosis["category"] == "app_exception"
    notes = job_coverage(diagnosis)
    assert any("'start' ignored" in n for n in notes) and any("'end' ignored" in n for n in notes)


def test_a_job_time_that_is_no_time_is_still_unusable_input(tmp_path):
    (tmp_path / "job.json").write_text('{"start": "yesterday"}')
    result = analyze(tmp_path)
    assert result.returncode == 2 and "job.json" in result.stderr and len(result.stderr.splitlines()) == 1


# ------------------------------------------------------------------------------------- hostlists

@pytest.mark.parametrize("expr", ["a[0-999]b[0-999]c[0-99]", "x" + "[0-1]" * 5000, ",".join(["n[0-99999]"] * 1000),
                                  "a[0-99999999999999999999]"])
def test_a_hostlist_bomb_is_refused_before_expanding(expr):
    with pytest.raises(hostlist.HostlistTooLarge):
        hostlist.expand(expr)


def test_hostlists_expand_as_before():
    assert hostlist.expand("gpu[01-03,7],login1") == ["gpu01", "gpu02", "gpu03", "gpu7", "login1"]
    assert hostlist.expand("rack[1-2]-n[01-02],rack1-n01") == ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
    assert len(hostlist.expand("n[1-100000]")) == hostlist.MAX_HOSTS


@pytest.mark.parametrize("nodes", ['"a[0-999]b[0-999]c[0-99]"', '["gpu01", "n[0-99999]", "m[0-99999]"]'])
def test_a_hostlist_bomb_in_job_json_is_a_coverage_note(tmp_path, nodes):
    (tmp_path / "job.json").write_text(f'{{"state": "FAILED", "nodes": {nodes}}}')
    (tmp_path / "slurm-1.out").write_text(EXCEPTION)
    result = analyze(tmp_path, timeout=30)
    assert result.returncode == 0, result.stderr
    diagnosis = json.loads(result.stdout)
    assert diagnosis["category"] == "app_exception" and diagnosis["outcome"]["nodes"] == []
    assert any("'nodes' ignored" in n for n in job_coverage(diagnosis))


# ------------------------------------------------------------------------------------ gzip bombs

def gzip_bomb(megabytes: int, tail: bytes = b"") -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"\0" * (1 << 20)
    parts = [packer.compress(zeros) for _ in range(megabytes)]
    return b"".join([*parts, packer.compress(tail), packer.flush()])


def analyze_within(path, megabytes):
    """`sattrib analyze` with its address space limited (RLIMIT_AS): a memory spike fails it."""
    limit = megabytes << 20
    return subprocess.run([*sattrib_argv(), "analyze", str(path)], capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))


def test_a_gzip_bomb_is_a_truncated_source_in_bounded_memory(tmp_path):
    (tmp_path / "gpu01").mkdir()
    (tmp_path / "gpu01" / "dmesg.gz").write_bytes(gzip_bomb(1024))  # 1 GiB of zeros in 1 MB
    (tmp_path / "slurm-1.out").write_text(EXCEPTION)
    result = analyze_within(tmp_path, 600)
    assert result.returncode == 0, result.stderr
    diagnosis = json.loads(result.stdout)
    assert diagnosis["category"] == "app_exception"
    bomb = next(c for c in diagnosis["coverage"] if c["source"] == "gpu01/dmesg.gz")
    assert bomb["status"] == "truncated" and "gzip bomb" in bomb["detail"]


def test_gzip_reading_keeps_the_newest_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "MAX_GZIP_KEPT", 1 << 20)
    lines = b"".join(b"2026-12-02T13:04:%02dZ line %d\n" % (n % 60, n) for n in range(100_000))
    (tmp_path / "log.gz").write_bytes(gzip.compress(lines))
    result = readers.read_file(tmp_path / "log.gz")
    assert result.status == "truncated" and len(result.data) <= readers.MAX_GZIP_KEPT
    assert result.data.endswith(b"line 99999\n") and result.data.startswith(b"2026-")
    assert result.line_offset == lines.count(b"\n", 0, len(lines) - len(result.data))


# ---------------------------------------------------------------------------------- deep folders

def test_a_deep_folder_is_read(tmp_path):
    deep = str(tmp_path / "gpu01")
    os.mkdir(deep)
    for _ in range(1500):  # deeper than Python's recursion limit
        deep += "/d"
        os.mkdir(deep)
    with open(f"{deep}/app.log", "w") as log:
        log.write(EXCEPTION)
    try:
        result = analyze(tmp_path)
    finally:
        os.remove(f"{deep}/app.log")
        while deep != str(tmp_path):  # shutil.rmtree recurses too: leave pytest no deep tree
            os.rmdir(deep)
            deep = os.path.dirname(deep)
    assert result.returncode == 0, result.stderr
    diagnosis = json.loads(result.stdout)
    assert diagnosis["category"] == "app_exception"
    assert diagnosis["evidence"][0]["node"] == "gpu01" and diagnosis["evidence"][0]["source"].endswith("/d/app.log")


# ----------------------------------------------------------------------------- validation (full)

def test_validation_refuses_a_trailing_newline():
    from slurm_attrib.capture.common import valid_job_id, valid_node
    from slurm_attrib.fleet.batch import is_job_id
    from slurm_attrib.slurm import cli as slurm_cli

    assert valid_job_id("123") and valid_node("gpu01") and is_job_id("123_4")
    assert not valid_job_id("123\n") and not valid_node("gpu01\n")
    assert not slurm_cli._VALID_JOB.fullmatch("123\n") and not slurm_cli._VALID_NODE.fullmatch("gpu01\n")
    assert not is_job_id("١٢٣") and slurm_cli._time("١٢٣") is None
    assert slurm_cli._owner("root(0)\n") == ("root(0)\n", None)


def test_the_worker_refuses_a_job_id_with_a_newline(tmp_path):
    import sys

    result = subprocess.run([sys.executable, "-m", "slurm_attrib.worker", "123\n"], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "SATTRIB_CONFIG": str(tmp_path / "none.yaml")})
    assert result.returncode == 2 and "no job id" in result.stderr


@pytest.mark.parametrize("since", ["nan", "inf", "1e300d", "-5d"])
def test_a_report_window_that_is_no_duration_is_refused(since):
    from slurm_attrib.errors import SattribError
    from slurm_attrib.fleet.report import parse_days

    with pytest.raises(SattribError, match="--since"):
        parse_days(since)
