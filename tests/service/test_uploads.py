"""POST /v1/analyze against hostile uploads over real HTTP: bombs and large bodies are analysed in
bounded child processes while health keeps answering, every malformed upload is a 4xx with a
one-line reason, a full queue is a 503, and an upload never drains a node."""

from __future__ import annotations

import io
import json
import random
import socket
import tarfile
import threading
import time
import zlib

import pytest
from service_support import DEMO, PROXY_SECRET, start_server, stop_server, store_dir  # noqa: F401 (a fixture)

PROXY = {"X-Remote-User": "nobody", "X-Sattrib-Proxy-Secret": PROXY_SECRET}
XID_79 = b"2026-12-02T16:46:53+0000 gpu01 kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


def _config(store_dir, **service) -> str:
    lines = [f"results: {store_dir / 'results'}", f"service_proxy_secret_file: {store_dir / 'proxy-secret'}"]
    return "\n".join(lines + [f"{key}: {value}" for key, value in service.items()]) + "\n"


@pytest.fixture(scope="module")
def server(store_dir):
    server = start_server(store_dir, _config(store_dir, service_upload_workers=2, service_upload_queue=8,
                                             service_upload_timeout=15, service_upload_memory_mb=1024))
    yield server
    stop_server(server)


def tar_of(files, mode: str = "w:gz", kinds: dict[str, bytes] | None = None) -> bytes:
    """A tar archive of `files` (name -> content, or (name, content) pairs); `kinds` (name -> tarfile
    type) adds members of other types."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, data in files.items() if isinstance(files, dict) else files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, kind in (kinds or {}).items():
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = "/etc/shadow"
            archive.addfile(info)
    return buffer.getvalue()


def gzip_bomb(unpacked_gb: float) -> bytes:
    """Concatenated gzip members of 1 MB of zeros each: ~1 KB per MB, `unpacked_gb` GB in all."""
    member = zlib.compressobj(9, zlib.DEFLATED, 31)
    one = member.compress(bytes(1024 * 1024)) + member.flush()
    return one * int(unpacked_gb * 1024)


def declared_bomb() -> bytes:
    """A .tar.gz of 4 KB whose one member says it holds 3.9 GB of zeros (the tar stream is a bomb)."""
    header = tarfile.TarInfo("gpu01/dmesg.txt")
    header.size = 3_900_000_000
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(header.tobuf() + bytes(4 * 1024 * 1024)) + packer.flush()


def post(server, body: bytes, headers: dict | None = None):
    status, answer_headers, answer = server.request("/v1/analyze", {**PROXY, **(headers or {})}, body, "POST")
    return status, answer_headers, answer


def test_health_answers_fast_while_hostile_uploads_run(server):
    big = bytes(random.Random(1).getrandbits(8) for _ in range(1024)) * (60 * 1024)  # 60 MB, incompressible blocks
    uploads = [tar_of({"gpu01/dmesg.txt.gz": gzip_bomb(3.9)}, mode="w"), declared_bomb(),
               tar_of({"job.json": b'{"nodes": "a[0-999]b[0-999]c[0-99]"}', "gpu01/dmesg.txt": XID_79}),
               *[tar_of({"gpu01/app.log": big}, mode="w") for _ in range(3)]]
    answers: list[tuple[int, bytes]] = []

    def send(body):
        status, _, answer = post(server, body)
        answers.append((status, answer))

    threads = [threading.Thread(target=send, args=(body,)) for body in uploads]
    for thread in threads:
        thread.start()
    slowest = 0.0
    while any(t.is_alive() for t in threads):
        started = time.monotonic()
        assert server.request("/v1/health")[0] == 200
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.1)
    assert slowest < 1.0, f"health took {slowest:.2f} s during the uploads"
    assert len(answers) == len(uploads)
    assert all(status < 500 for status, _ in answers), answers
    refused = sorted(json.loads(body)["detail"] for status, body in answers if 400 <= status < 500)
    assert any("unpacked" in d for d in refused) and any("larger than" in d for d in refused), refused


def test_a_full_queue_answers_503_with_retry_after(store_dir):
    server = start_server(store_dir, _config(store_dir, service_upload_workers=1, service_upload_queue=0))
    try:
        deadline = time.monotonic() + 20
        while True:
            # an upload that holds the one slot: its body arrives slowly.  The server must admit it
            # before the next upload comes; when that upload got there first, the slow one was
            # the one refused: try again with a new one
            slow = socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
            try:
                slow.sendall(b"POST /v1/analyze HTTP/1.1\r\nHost: x\r\nX-Remote-User: nobody\r\n"
                             b"X-Sattrib-Proxy-Secret: " + PROXY_SECRET.encode() + b"\r\nContent-Length: 1000\r\n\r\n"
                             + b"x" * 10)
                time.sleep(0.3)
                status, headers, body = post(server, tar_of({"app.log": b"hello\n"}))
            finally:
                slow.close()
            if status == 503 or time.monotonic() > deadline:
                break
        assert status == 503 and headers["retry-after"].isdigit(), body
        assert "try again later" in json.loads(body)["detail"]
    finally:
        stop_server(server)


def test_an_uploaded_node_folder_never_drains_nor_confirms(server):
    job = json.dumps({"job_id": "7", "state": "FAILED", "nodes": ["gpu01", "gpu02"]}).encode()
    for upload in (tar_of({"gpu01/dmesg.txt": XID_79, "job.json": job}),
                   tar_of({"job/gpu01/dmesg.txt": XID_79, "job/job.json": job}, kinds={"job": tarfile.DIRTYPE})):
        status, _, body = post(server, upload)
        assert status == 200, body
        diagnosis = json.loads(body)
        assert diagnosis["category"] == "gpu_fell_off_bus" and diagnosis["culprit_nodes"] == ["gpu01"]
        assert diagnosis["drain"] == [] and diagnosis["quality"] != "confirmed"
        assert diagnosis["cause"]["trusted"] is False


def _malformed_uploads() -> list[tuple[str, bytes]]:
    """Broken archives, hostile members and bad job.json files: each must be a 4xx or a diagnosis."""
    good = tar_of({"gpu01/dmesg.txt": XID_79, "job.json": b'{"nodes": ["gpu01"]}'})
    rng = random.Random(18)
    cases = [
        ("random bytes", rng.randbytes(5000)),
        ("gzip of random bytes", zlib.compressobj(6, zlib.DEFLATED, 31).compress(rng.randbytes(5000)) + b""),
        ("gzip header only", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"),
        ("bzip2 header and junk", b"BZh91AY&SY" + rng.randbytes(200)),
        ("xz header and junk", b"\xfd7zXZ\x00" + rng.randbytes(200)),
        ("a json body", b'{"job_id": 1}'),
        ("an empty tar", tar_of({})),
        ("only zero blocks", bytes(10240)),
        ("absolute path", tar_of({"/etc/cron.d/x": b"x"})),
        ("parent path", tar_of({"job/../../x": b"x"})),
        ("symlink", tar_of({}, kinds={"gpu01/dmesg.txt": tarfile.SYMTYPE})),
        ("hard link", tar_of({}, kinds={"gpu01/dmesg.txt": tarfile.LNKTYPE})),
        ("character device", tar_of({}, kinds={"gpu01/mem": tarfile.CHRTYPE})),
        ("fifo", tar_of({}, kinds={"gpu01/fifo": tarfile.FIFOTYPE})),
        ("too deep", tar_of({"/".join(["d"] * 30) + "/x.log": b"x"})),
        ("too many members", tar_of({f"f{i}.log": b"" for i in range(4100)})),
        ("a file and a folder of one name", tar_of({"gpu01": b"x", "gpu01/dmesg.txt": b"y"})),
        ("one name twice", tar_of([("app.log", b"x"), ("app.log", b"y")])),
        ("a .gz member that is not gzip", tar_of({"gpu01/dmesg.txt.gz": b"not gzip at all\n"})),
        ("job.json not json", tar_of({"job.json": b"{nodes: [", "app.log": b"x\n"})),
        ("job.json a list", tar_of({"job.json": b"[1, 2]"})),
        ("job.json strange values", tar_of({"job.json": b'{"start": 1e400, "end": NaN, "nodes": [1, null, {}], '
                                                         b'"state": 7, "exit_code": [], "job_id": {"a": 1}}'})),
        ("job.json far future", tar_of({"job.json": b'{"start": "9999-12-31T23:59:59-12:00", "end": "0000-01-01"}'})),
        ("job.json deep nesting", tar_of({"job.json": b"[" * 100_000 + b"]" * 100_000})),
        ("odd names and binary content", tar_of({"gpu\u00ff01/dm\u00e9sg\u202e.txt": rng.randbytes(3000), " /x": b"y"})),
        ("truncated tar.gz", good[: len(good) // 2]),
        ("truncated plain tar", tar_of({"gpu01/dmesg.txt": XID_79}, mode="w")[:700]),
    ]
    for i in range(12):  # bit flips in a good upload
        flipped = bytearray(good)
        for _ in range(3):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        cases.append((f"bit flips {i}", bytes(flipped)))
    return cases


def test_malformed_uploads_are_4xx_with_a_one_line_reason(server):
    failures = []
    for name, body in _malformed_uploads():
        status, _, answer = post(server, body)
        if status == 200:
            continue  # some survive as a (possibly empty) diagnosis: fine, never a 500
        try:
            detail = json.loads(answer)["detail"]
        except (ValueError, KeyError):
            detail = None
        if not (400 <= status < 500 and isinstance(detail, str) and detail and "\n" not in detail
                and "sattrib-upload-" not in detail):
            failures.append((name, status, answer[:300]))
    assert not failures, failures


def test_the_plain_refusals_name_their_reason(server):
    expect = {
        "absolute path": (400, "path outside the job folder"),
        "symlink": (400, "links and devices are not accepted"),
        "too deep": (400, "deeper than 8 folders"),
        "too many members": (413, "more than 4096 archive members"),
        "random bytes": (400, "not a readable tar archive"),
    }
    cases = dict(_malformed_uploads())
    for name, (code, words) in expect.items():
        status, _, body = post(server, cases[name])
        assert status == code and words in json.loads(body)["detail"], (name, status, body)
    status, _, body = post(server, b"")
    assert status == 400 and "empty upload" in json.loads(body)["detail"]
    status, _, body = server.raw_request("POST", "/v1/analyze", [*PROXY.items(), ("Content-Length", str(65 * 1024 * 1024))])
    assert status == 413
