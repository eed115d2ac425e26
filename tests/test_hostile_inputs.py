"""Hostile files give a diagnosis or a one-line error, never a traceback."""

import gzip
import json
import os
import subprocess

import pytest

from support import sattrib_argv

XID = b"2026-12-02T13:04:06,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"


def analyze(path):
    result = subprocess.run([*sattrib_argv(), "analyze", str(path)], capture_output=True, timeout=300)
    assert b"Traceback" not in result.stderr
    return result


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(os.urandom(200_000), id="binary-garbage"),
        pytest.param(b"\x00" * 1000 + XID + b"\x00\xff\xfe" * 100, id="nul-bytes"),
        pytest.param(XID.replace(b"\n", b"\r\n") * 3, id="crlf"),
        pytest.param(b"\xc3\x28 invalid utf8 \xa0\xa1\n" + XID, id="invalid-utf8"),
        pytest.param(b"", id="empty"),
        pytest.param(XID[:-40], id="truncated-line"),
    ],
)
def test_hostile_node_file(tmp_path, content):
    (tmp_path / "gpu01").mkdir()
    (tmp_path / "gpu01" / "dmesg.txt").write_bytes(content)
    result = analyze(tmp_path)
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)


def test_fifty_megabyte_single_line(tmp_path):
    (tmp_path / "gpu01").mkdir()
    with open(tmp_path / "gpu01" / "app.log", "wb") as handle:
        handle.write(b"x" * (50 * 1024 * 1024))
        handle.write(b" NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    result = analyze(tmp_path)
    assert result.returncode == 0
    json.loads(result.stdout)


def test_gzip_and_truncated_gzip(tmp_path):
    (tmp_path / "gpu01").mkdir()
    (tmp_path / "gpu02").mkdir()
    (tmp_path / "gpu01" / "dmesg.gz").write_bytes(gzip.compress(XID * 10))
    (tmp_path / "gpu02" / "dmesg.gz").write_bytes(gzip.compress(XID * 1000)[:-200])
    result = analyze(tmp_path)
    assert result.returncode == 0
    diagnosis = json.loads(result.stdout)
    assert "gpu01" in diagnosis["culprit_nodes"]


def test_ten_thousand_files(tmp_path):
    node = tmp_path / "gpu01"
    node.mkdir()
    for index in range(10_000):
        (node / f"part-{index:05d}.log").write_bytes(b"step %d ok\n" % index)
    result = analyze(tmp_path)
    assert result.returncode == 0
    assert json.loads(result.stdout)["domain"] in ("none", "unknown")
