import gzip
import json
import os
import time
from pathlib import Path

import pytest

from slurm_attrib.errors import InputError
from slurm_attrib.ingest import layout, readers
from slurm_attrib.ingest.layout import expand_hostlist, load_evidence

CORPUS = Path(__file__).resolve().parent / "data" / "dev_corpus"
DMESG = b"[12345.678901] NVRM: Xid (PCI:0000:17:00): 79, GPU has fallen off the bus.\n"
SYSLOG = b"Dec  2 13:04:06 gpu01 systemd[1]: Started x.\nDec  2 13:04:07 gpu01 slurmd[3]: error: y\n"
APP = b"[rank3]: Traceback (most recent call last):\n[rank3]: RuntimeError: boom\n"


def cov(ev, source):
    found = [c for c in ev.coverage if c.source == source]
    assert len(found) == 1, (source, ev.coverage)
    return found[0]


def by_rel(ev):
    return {f.rel: f for f in ev.files}


# ------------------------------------------------------------------------------ input errors

def test_missing_path(tmp_path):
    with pytest.raises(InputError) as err:
        load_evidence(tmp_path / "nope")
    message = str(err.value)
    assert "nope" in message and "\n" not in message


def test_not_a_directory(tmp_path):
    f = tmp_path / "file.log"
    f.write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        load_evidence(f)


@pytest.mark.parametrize("content", [b"{not json", b"", b"\xff\xfe\x00garbage", b"{\"a\": 1,}"])
def test_invalid_job_json(tmp_path, content):
    (tmp_path / "job.json").write_bytes(content)
    with pytest.raises(InputError) as err:
        load_evidence(tmp_path)
    message = str(err.value)
    assert "job.json" in message and "\n" not in message


@pytest.mark.parametrize("content", ["[1, 2]", "\"FAILED\"", "42", "null"])
def test_job_json_not_an_object(tmp_path, content):
    (tmp_path / "job.json").write_text(content)
    with pytest.raises(InputError, match="job.json: not a JSON object"):
        load_evidence(tmp_path)


@pytest.mark.parametrize("key", ["start", "end"])
def test_unparsable_times_name_the_key(tmp_path, key):
    (tmp_path / "job.json").write_text(json.dumps({key: "yesterday at noon"}))
    with pytest.raises(InputError, match=f"'{key}'"):
        load_evidence(tmp_path)


def test_job_json_directory_is_an_error(tmp_path):
    (tmp_path / "job.json").mkdir()
    with pytest.raises(InputError, match="job.json"):
        load_evidence(tmp_path)


# ------------------------------------------------------------------------------ job context

def test_job_context(tmp_path):
    (tmp_path / "job.json").write_text(json.dumps({
        "job_id": 4711, "user": "alice", "state": "CANCELLED by 1234", "exit_code": "0:15",
        "start": "2024-12-02T13:00:00", "end": "2024-12-02T14:00:00+01:00",
        "nodes": ["gpu01", "gpu02"], "extra": {"ignored": True},
    }))
    ev = load_evidence(tmp_path)
    job = ev.job
    assert job.job_id == "4711" and job.user == "alice" and job.state == "CANCELLED"
    assert job.exit_code == "0:15"
    assert job.start == 1733144400.0  # no zone = UTC
    assert job.end == 1733144400.0  # 14:00+01:00 == 13:00Z
    assert job.nodes == ("gpu01", "gpu02")
    assert job.source == "job.json"
    assert ev.files == []  # job.json is not a source file
    assert all(c.source != "job.json" for c in ev.coverage)


def test_job_context_all_optional(tmp_path):
    (tmp_path / "job.json").write_text("{}")
    job = load_evidence(tmp_path).job
    assert job.start is None and job.nodes == () and job.source == "job.json"
    assert load_evidence(tmp_path / ".." / tmp_path.name).job.source == "job.json"


def test_no_job_json(tmp_path):
    (tmp_path / "log.txt").write_bytes(APP)
    assert load_evidence(tmp_path).job.source is None


def test_job_times_variants(tmp_path):
    (tmp_path / "job.json").write_text(json.dumps({"start": "2024-12-02T13:00:00Z", "end": "Unknown",
                                                    "nodes": "gpu[01-03,07]"}))
    job = load_evidence(tmp_path).job
    assert job.start == 1733144400.0 and job.end is None
    assert job.nodes == ("gpu01", "gpu02", "gpu03", "gpu07")


def test_expand_hostlist():
    assert expand_hostlist("gpu[01-02],login1") == ["gpu01", "gpu02", "login1"]
    assert expand_hostlist("a[1-2]-ib[0-1]") == ["a1-ib0", "a1-ib1", "a2-ib0", "a2-ib1"]
    assert expand_hostlist("jean-zay-iam39-ib0") == ["jean-zay-iam39-ib0"]


# ------------------------------------------------------------------------------ layout

def test_layout_nodes_trust_and_order(tmp_path):
    (tmp_path / "job.json").write_text(json.dumps({"nodes": ["gpu01", "gpu02", "gpu03"]}))
    (tmp_path / "slurm-1.out").write_bytes(APP)
    (tmp_path / "dmesg.txt").write_bytes(DMESG)  # job-level: never trusted, whatever the content
    (tmp_path / "gpu01").mkdir()
    (tmp_path / "gpu01" / "dmesg.txt").write_bytes(DMESG)
    (tmp_path / "gpu01" / "rank0.log").write_bytes(APP)
    (tmp_path / "gpu02" / "var" / "log").mkdir(parents=True)
    (tmp_path / "gpu02" / "var" / "log" / "syslog").write_bytes(SYSLOG)
    (tmp_path / ".hidden").write_bytes(DMESG)
    (tmp_path / "gpu01" / ".cache").mkdir()
    (tmp_path / "gpu01" / ".cache" / "x").write_bytes(DMESG)
    ev = load_evidence(tmp_path)
    files = by_rel(ev)
    assert list(files) == sorted(files) == [
        "dmesg.txt", "gpu01/dmesg.txt", "gpu01/rank0.log", "gpu02/var/log/syslog", "slurm-1.out"]
    assert (files["dmesg.txt"].node, files["dmesg.txt"].kind, files["dmesg.txt"].trusted) == (None, "kernel", False)
    assert (files["gpu01/dmesg.txt"].node, files["gpu01/dmesg.txt"].trusted) == ("gpu01", True)
    assert (files["gpu01/rank0.log"].kind, files["gpu01/rank0.log"].trusted) == ("app", False)
    deep = files["gpu02/var/log/syslog"]
    assert (deep.node, deep.kind, deep.trusted) == ("gpu02", "syslog", True)
    assert files["slurm-1.out"].node is None and files["slurm-1.out"].data == APP
    # coverage: one entry per file considered, sorted; a listed node with no folder is missing
    assert [c.source for c in ev.coverage] == sorted(c.source for c in ev.coverage)
    assert cov(ev, "gpu01/dmesg.txt").status == "ok" and cov(ev, "gpu01/dmesg.txt").kind == "kernel"
    assert cov(ev, "gpu03/").status == "missing"
    assert not any(".hidden" in c.source or ".cache" in c.source for c in ev.coverage)


def test_deterministic(tmp_path):
    for i in range(30):
        (tmp_path / f"n{i % 3}").mkdir(exist_ok=True)
        (tmp_path / f"n{i % 3}" / f"f{i}.log").write_bytes(APP)
    first = load_evidence(tmp_path)
    second = load_evidence(tmp_path)
    assert [(f.rel, f.node, f.kind) for f in first.files] == [(f.rel, f.node, f.kind) for f in second.files]
    assert first.coverage == second.coverage


# ------------------------------------------------------------------------------ hostile input

def test_empty_file(tmp_path):
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "gpu01").mkdir()
    (tmp_path / "gpu01" / "dmesg.txt").write_bytes(b"")
    ev = load_evidence(tmp_path)
    assert ev.files == []
    assert cov(ev, "empty.log").status == "empty"
    entry = cov(ev, "gpu01/dmesg.txt")
    assert entry.status == "empty" and entry.node == "gpu01"


def test_invalid_utf8_nul_crlf(tmp_path):
    raw = b"ok line\r\n\xff\xfe\xfa bad utf8\r\nnul \x00\x00 byte\r\n[  1.5] NVRM: x\r\n"
    (tmp_path / "weird.log").write_bytes(raw)
    ev = load_evidence(tmp_path)
    f = by_rel(ev)["weird.log"]
    assert f.data == raw.replace(b"\r\n", b"\n")
    assert f.data.count(b"\n") == raw.count(b"\n")  # line numbers unchanged
    assert cov(ev, "weird.log").status == "ok"


def test_binary_garbage(tmp_path):
    garbage = bytes(range(256)) * 400
    (tmp_path / "core.bin").write_bytes(garbage)
    ev = load_evidence(tmp_path)
    assert by_rel(ev)["core.bin"].data == garbage
    assert by_rel(ev)["core.bin"].kind == "app"


def test_50mb_single_line(tmp_path):
    big = b"A" * (50 * 1024 * 1024)
    (tmp_path / "big.log").write_bytes(big)
    (tmp_path / "small.log").write_bytes(APP)
    start = time.perf_counter()
    ev = load_evidence(tmp_path)
    assert time.perf_counter() - start < 5
    assert len(by_rel(ev)["big.log"].data) == len(big)
    assert cov(ev, "big.log").status == "ok"
    assert by_rel(ev)["small.log"].data == APP


def test_gzip_detected_by_magic_not_name(tmp_path):
    (tmp_path / "gpu01").mkdir()
    (tmp_path / "gpu01" / "kernel.txt").write_bytes(gzip.compress(DMESG * 100))
    (tmp_path / "gpu01" / "syslog.gz").write_bytes(SYSLOG)  # named .gz but plain
    ev = load_evidence(tmp_path)
    files = by_rel(ev)
    assert files["gpu01/kernel.txt"].data == DMESG * 100
    assert files["gpu01/kernel.txt"].kind == "kernel" and files["gpu01/kernel.txt"].trusted
    assert files["gpu01/kernel.txt"].compressed
    assert files["gpu01/syslog.gz"].data == SYSLOG and not files["gpu01/syslog.gz"].compressed


def test_multi_member_gzip(tmp_path):
    (tmp_path / "log").write_bytes(gzip.compress(b"one\n") + gzip.compress(b"two\n"))
    ev = load_evidence(tmp_path)
    assert by_rel(ev)["log"].data == b"one\ntwo\n"
    assert cov(ev, "log").status == "ok"


def test_truncated_gzip(tmp_path):
    payload = b"".join(b"line %06d of the log\n" % i for i in range(200_000))
    blob = gzip.compress(payload)
    (tmp_path / "cut.log").write_bytes(blob[: len(blob) // 2])
    ev = load_evidence(tmp_path)
    data = by_rel(ev)["cut.log"].data
    assert 0 < len(data) < len(payload)
    assert payload.startswith(data)  # what could be decompressed
    assert cov(ev, "cut.log").status == "truncated"


def test_corrupt_gzip_header_only(tmp_path):
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8b\x00garbage")
    ev = load_evidence(tmp_path)
    assert "bad.gz" not in by_rel(ev)
    assert cov(ev, "bad.gz").status in ("unreadable", "truncated")


def test_per_file_cap_keeps_tail(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "MAX_FILE_BYTES", 1000)
    lines = [b"line %05d\n" % i for i in range(1000)]  # 11 bytes each
    payload = b"".join(lines)
    (tmp_path / "plain.log").write_bytes(payload)
    (tmp_path / "zipped.log").write_bytes(gzip.compress(payload))
    ev = load_evidence(tmp_path)
    for name in ("plain.log", "zipped.log"):
        f = by_rel(ev)[name]
        assert cov(ev, name).status == "truncated"
        assert len(f.data) <= 1000
        assert payload.endswith(f.data)  # the newest bytes
        assert f.data.startswith(b"line ")  # cut at a line start
        first_kept = int(f.data[5:10])
        assert f.line_offset == first_kept  # original line number = line_offset + local number


def test_total_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(readers, "MAX_TOTAL_BYTES", 2500)
    (tmp_path / "a.log").write_bytes(b"a" * 999 + b"\n")
    (tmp_path / "b.log").write_bytes(b"b" * 999 + b"\n")
    (tmp_path / "c.log").write_bytes(b"c\n" * 1000)
    (tmp_path / "d.log").write_bytes(b"d\n" * 1000)
    ev = load_evidence(tmp_path)
    total = sum(len(f.data) for f in ev.files)
    assert total <= 2500
    statuses = {c.source: c.status for c in ev.coverage}
    assert statuses["a.log"] == statuses["b.log"] == "ok"  # small files first
    assert "skipped" in statuses.values() or "truncated" in statuses.values()


def test_symlinks_are_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret\n")
    root = tmp_path / "logs"
    root.mkdir()
    (root / "real.log").write_bytes(APP)
    (root / "escape.log").symlink_to(outside / "secret")
    (root / "dangling.log").symlink_to(root / "does-not-exist")
    (root / "inside.log").symlink_to(root / "real.log")
    (root / "gpu09").symlink_to(outside, target_is_directory=True)
    (root / "gpu01").mkdir()
    (root / "gpu01" / "loop").symlink_to(root, target_is_directory=True)
    ev = load_evidence(root)
    assert list(by_rel(ev)) == ["real.log"]
    for source in ("escape.log", "dangling.log", "inside.log", "gpu09", "gpu01/loop"):
        assert cov(ev, source).status == "skipped", source
    assert "outside" in cov(ev, "escape.log").detail
    assert all(b"secret" not in f.data for f in ev.files)


def test_fifo_is_skipped_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "ok.log").write_bytes(APP)
    ev = load_evidence(tmp_path)
    assert cov(ev, "pipe").status == "skipped"
    assert list(by_rel(ev)) == ["ok.log"]


def test_unreadable_file_continues(tmp_path, monkeypatch):
    (tmp_path / "gpu01").mkdir()
    (tmp_path / "gpu01" / "locked.log").write_bytes(DMESG)
    (tmp_path / "gpu01" / "open.log").write_bytes(DMESG)
    if os.geteuid() != 0:
        os.chmod(tmp_path / "gpu01" / "locked.log", 0)
    else:  # root reads anything: simulate the permission error at open()
        real_open = os.open

        def fake_open(path, flags, *args, **kwargs):
            if str(path).endswith("locked.log"):
                raise PermissionError(13, "Permission denied", str(path))
            return real_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(readers.os, "open", fake_open)
    ev = load_evidence(tmp_path)
    entry = cov(ev, "gpu01/locked.log")
    assert entry.status == "unreadable" and "permission" in entry.detail and entry.node == "gpu01"
    assert list(by_rel(ev)) == ["gpu01/open.log"]


def test_unreadable_subdirectory_continues(tmp_path, monkeypatch):
    (tmp_path / "gpu01").mkdir()
    (tmp_path / "gpu01" / "dmesg.txt").write_bytes(DMESG)
    (tmp_path / "gpu02").mkdir()
    (tmp_path / "gpu02" / "dmesg.txt").write_bytes(DMESG)
    real_scandir = os.scandir

    def fake_scandir(path):
        if str(path).endswith("gpu02"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(layout.os, "scandir", fake_scandir)
    ev = load_evidence(tmp_path)
    assert cov(ev, "gpu02/").status == "unreadable"
    assert list(by_rel(ev)) == ["gpu01/dmesg.txt"]


def test_ten_thousand_files_fast(tmp_path):
    for n in range(10):
        node = tmp_path / f"gpu{n:02d}"
        node.mkdir()
        for i in range(1000):
            (node / f"f{i:04d}.log").write_bytes(DMESG if i % 2 else APP)
    start = time.perf_counter()
    ev = load_evidence(tmp_path)
    elapsed = time.perf_counter() - start
    assert len(ev.files) == 10_000
    assert elapsed < 3.0, elapsed
    kinds = {f.kind for f in ev.files}
    assert kinds == {"kernel", "app"}


# ------------------------------------------------------------------------------ corpus

CORPUS_DIRS = sorted(p for p in CORPUS.iterdir() if p.is_dir()) if CORPUS.is_dir() else []


@pytest.mark.parametrize("case", CORPUS_DIRS, ids=[p.name for p in CORPUS_DIRS])
def test_corpus_loads(case):
    ev = load_evidence(case)
    assert ev.files
    assert all(f.node is None and not f.trusted for f in ev.files)  # flat: job-level only
    assert all(c.status == "ok" for c in ev.coverage if c.source != "expected.yaml")
    assert [c.status for c in ev.coverage if c.source == "expected.yaml"] == ["skipped"]  # metadata
    expected = {
        "010-akash-node1-xid79-a1/dmesg.txt": "kernel",
        "034-hgx-nvidia-peermem-invalid-context-harmless/dmesg.txt": "kernel",
        "036-returnn-cn234-gpu-lost-pcie-aer-hang/dmesg.txt": "kernel",
        "036-returnn-cn234-gpu-lost-pcie-aer-hang/nvidia_smi.txt": "nvidia_smi",
        "017-arjuna-slurm-cgroup-oomkill-gpu-job/slurm.txt": "app",
        "018-zetta-slurm-time-limit/slurm.txt": "app",
    }
    for f in ev.files:
        key = f"{case.name}/{f.rel}"
        if key in expected:
            assert f.kind == expected[key], key
        elif f.rel.endswith((".txt",)) and "log" in f.rel:
            assert f.kind == "app", key


def test_corpus_as_node_folder(tmp_path):
    case = CORPUS / "036-returnn-cn234-gpu-lost-pcie-aer-hang"
    if not case.is_dir():
        pytest.skip("corpus not available")
    node = tmp_path / "cn-234"
    node.mkdir()
    for name in ("dmesg.txt", "nvidia_smi.txt"):
        (node / name).write_bytes((case / name).read_bytes())
    ev = load_evidence(tmp_path)
    files = by_rel(ev)
    assert files["cn-234/dmesg.txt"].trusted and files["cn-234/nvidia_smi.txt"].trusted
    assert files["cn-234/dmesg.txt"].node == "cn-234"


def test_binary_files_are_read_but_flagged(tmp_path):
    import random

    (tmp_path / "n1").mkdir()
    rng = random.Random(3)
    (tmp_path / "n1" / "counters.dat").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    (tmp_path / "n1" / "dmesg.txt").write_bytes(b"[  1.000000] hello\n")
    coverage = {c.source: c for c in load_evidence(tmp_path).coverage}
    assert "mostly binary" in coverage["n1/counters.dat"].detail
    assert "binary" not in coverage["n1/dmesg.txt"].detail


def test_small_files_beyond_the_held_total_are_read_again_with_the_same_result(tmp_path, monkeypatch):
    """Memory stays flat in the number of files: past HELD_TOTAL, small files are not held but
    read again when analysed, and the analysis is the same."""
    from slurm_attrib.cli import render_json
    from slurm_attrib.engine.pipeline import analyze_path

    nodes = [f"gpu{n:02d}" for n in range(1, 9)]
    (tmp_path / "job.json").write_text(json.dumps({"job_id": "5", "state": "FAILED", "start": "2026-12-02T13:00:00Z",
                                                   "end": "2026-12-02T13:30:00Z", "nodes": nodes}))
    for number, node in enumerate(nodes):
        lines = [f"[{100 + n}.000000] routine kernel line {n} " + "x" * 60 for n in range(300)]
        if node == "gpu05":
            lines.append("2026-12-02T13:04:06,123456+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.")
        (tmp_path / node).mkdir()
        (tmp_path / node / "dmesg.txt").write_text("\n".join(lines) + "\n")
    everything_held = render_json(analyze_path(tmp_path))
    monkeypatch.setattr(layout, "HELD_TOTAL", 60_000)  # about two of the eight files
    evidence = layout.load_evidence(tmp_path)
    held = [f for f in evidence.files if not f.streamed]
    assert 1 <= len(held) < len(evidence.files)
    assert sum(len(f.data) for f in held) <= 60_000
    assert render_json(analyze_path(tmp_path)) == everything_held
    assert json.loads(everything_held)["culprit_nodes"] == ["gpu05"]
