"""A real `sattrib serve` on loopback: start it, talk to it over HTTP, stop it; `store_dir`, the
store it serves (jobs of two users and an admin token).  No conftest.py here: the capture tests
import theirs by name."""

from __future__ import annotations

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen
    token: str

    def request(self, path: str, headers: dict | None = None, data: bytes | None = None, method: str | None = None):
        """(status, headers, body bytes) over real HTTP."""
        request = urllib.request.Request(self.url + path, data=data, headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def json(self, path: str, headers: dict | None = None):
        status, _, body = self.request(path, headers)
        return status, json.loads(body)


def start_server(tmp: Path, config_text: str, env: dict | None = None) -> Server:
    config = tmp / f"config-{time.monotonic_ns()}.yaml"
    config.write_text(config_text)
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "slurm_attrib", "serve", "--port", str(port)],
                               env={**os.environ, "SATTRIB_CONFIG": str(config), **(env or {})},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    server = Server(f"http://127.0.0.1:{port}", process, (tmp / "token").read_text().strip() if (tmp / "token").exists() else "")
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
    return tmp
