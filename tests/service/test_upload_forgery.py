"""Uploads never drain (issue 18): a logs-layout folder whose node folder holds forged kernel lines
(hostile_support), POSTed to a real `sattrib serve`, gives no drain and no `confirmed` hardware."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

from hostile_support import PLACES, WRAPPINGS, forgeable_lines, window
from service_support import start_server, stop_server

WRAPPING_NAMES = list(WRAPPINGS)


def _tar(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(folder, arcname="job")
    return buffer.getvalue()


def test_an_uploaded_node_folder_never_drains(tmp_path):
    """POST /v1/analyze of a logs-layout folder with a node folder of forged kernel lines (one
    upload per line of every eighth rule, wrappings rotating): uploads never drain.  Every rule's
    line goes through the same analysis of an upload (vouch=False) in-process in
    tests/test_hostile_forgery.py; this holds the service's own path to it."""
    token = tmp_path / "token"
    token.write_text("forgery-test-token\n")
    token.chmod(0o600)
    server = start_server(tmp_path, f"results: {tmp_path / 'results'}\nservice_admin_token_file: {token}\n")
    admin = {"Authorization": f"Bearer {server.token}"}
    win = window()
    drained, confirmed, answered = [], [], 0
    try:
        for number, (rule, line) in enumerate(forgeable_lines()[::8]):
            wrapping = WRAPPING_NAMES[number % len(WRAPPING_NAMES)]
            job = tmp_path / "upload" / str(number)
            PLACES["user-node-folder"](job, [WRAPPINGS[wrapping](line, win.when)], win)
            status, _, body = server.request("/v1/analyze", admin, _tar(job), "POST")
            assert status == 200, body
            answer = json.loads(body)
            answered += 1
            if answer["drain"]:
                drained.append(f"{rule} [{wrapping}] drain={[d['node'] for d in answer['drain']]}")
            if answer["domain"] in ("gpu", "network", "host") and answer["quality"] == "confirmed":
                confirmed.append(f"{rule} [{wrapping}] {answer['domain']}/{answer['category']}")
            shutil.rmtree(job)
    finally:
        stop_server(server)
    assert not drained, f"{len(drained)} of {answered} uploads drained, e.g. {drained[:6]}"
    assert not confirmed, f"{len(confirmed)} of {answered} uploads confirmed hardware, e.g. {confirmed[:6]}"
