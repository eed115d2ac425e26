"""A real `sattrib serve` on loopback or a Unix socket: start it, talk to it over HTTP, stop it;
`store_dir`, the store it serves (jobs of two users, an admin token and a proxy secret).  No
conftest.py here: the capture tests import theirs by name."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest



REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "slurm_attrib" / "samples" / "demo"
PROXY_SECRET = "proxy-shared-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    token: str
    socket_path: str | None = None

    def request(self, path: str, headers: dict | None = None, data: bytes | None = None, method: str | None = None):
        """(status, headers, body bytes) over real HTTP."""
        if self.socket_path:
            return self.raw_request(method or ("POST" if data is not None else "GET"), path, list((headers or {}).items()), data)
        request = urllib.request.Request(self.url + path, data=data, headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def raw_request(self, method: str, path: str, headers: list[tuple[str, str]], data: bytes | None = None):
        """A request with headers as given, repeated names included (urllib merges them)."""
        if self.socket_path:
            connection = UnixConnection(self.socket_path)
        else:
            connection = http.client.HTTPConnection(self.url.split("//", 1)[1], timeout=30)
        try:
            connection.putrequest(method, path)
            for name, value in headers:
                connection.putheader(name, value)
            if data is not None:
                connection.putheader("Content-Length", str(len(data)))
            connection.endheaders(data)
            answer = connection.getresponse()
            return answer.status, dict(answer.getheaders()), answer.read()
        finally:
            connection.close()

    def json(self, path: str, headers: dict | None = None):
        status, _, body = self.request(path, headers)
        return status, json.loads(body)


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str):
        super().__init__("localhost", timeout=30)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def start_server(tmp: Path, config_text: str, env: dict | None = None, socket_path: Path | None = None) -> Server:
    config = tmp / f"config-{time.monotonic_ns()}.yaml"
    config.write_text(config_text)
    port = free_port()
    where = ["--socket", str(socket_path)] if socket_path else ["--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen([sys.executable, "-m", "slurm_attrib", "serve", *where],
                               env={**os.environ, "SATTRIB_CONFIG": str(config), **(env or {})},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    server = Server(f"http://127.0.0.1:{port}", process, (tmp / "token").read_text().strip() if (tmp / "token").exists() else "",
                    str(socket_path) if socket_path else None)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sattrib serve exited {process.returncode}: {process.stderr.read()}")
        try:
            if server.request("/v1/health")[0] == 200:
                return server
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("sattrib serve did not answer in 60 s")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:
        server.process.kill()


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    """Job 101 of `nobody`, job 102 of `daemon`, both the demo's diagnosis."""
    from slurm_attrib.engine.pipeline import analyze_path
    from slurm_attrib.render import render_text
    from slurm_attrib.store import Store

    tmp = tmp_path_factory.mktemp("service")
    diagnosis = analyze_path(DEMO)
    store = Store(tmp / "results")
    for job_id, user, uid in (("101", "nobody", 65534), ("102", "daemon", 1)):
        store.save(job_id, diagnosis, render_text(diagnosis), uid=uid, user=user, state="FAILED", drains=[])
    token = tmp / "token"
    token.write_text("s3cret-admin-token\n")
    token.chmod(0o600)
    secret = tmp / "proxy-secret"
    secret.write_text(PROXY_SECRET + "\n")
    secret.chmod(0o600)
    return tmp
