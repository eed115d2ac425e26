"""Webhooks against a real HTTP server on loopback that fails on purpose."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from slurm_attrib.config import Config, ConfigError, WebhookConfig, load_config
from slurm_attrib.engine.pipeline import analyze_path
from slurm_attrib.notify import dead_letter_path, notify, retry_dead_letters
from slurm_attrib.store import Store

DEMO = Path(__file__).resolve().parents[2] / "slurm_attrib" / "samples" / "demo"


class Receiver:
    """Answers each POST with the next planned status (then 200), or sleeps first; records bodies."""

    def __init__(self):
        self.plan: list[int | float] = []  # an int: that status; a float: sleep that long, then 200
        self.requests: list[tuple[dict, bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append((dict(self.headers), body))
                step = receiver.plan.pop(0) if receiver.plan else 200
                if isinstance(step, float):
                    time.sleep(step)
                    step = 200
                self.send_response(step)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    root = tmp_path_factory.mktemp("hooks")
    diagnosis = analyze_path(DEMO)
    row = Store(root / "results").save("4189877", diagnosis, "t\n", uid=None, user="alice", state="FAILED", drains=[
        {"node": "dgx004", "reason": "sattrib: Xid79 job 4189877", "status": "recommended", "detail": ""}])
    return root, row, diagnosis


def _config(root: Path, *hooks: WebhookConfig) -> Config:
    return Config(results=str(root / "results"), webhooks=hooks)


def _hook(url: str, **kw) -> WebhookConfig:
    return WebhookConfig(url=url, **{"timeout": 2.0, "retries": 2, "backoff": 0.05, **kw})


def test_json_delivery_with_headers(receiver, stored, tmp_path):
    root, row, diagnosis = stored
    [result] = notify(row, diagnosis, _config(tmp_path, _hook(receiver.url, headers=(("Authorization", "Bearer s3cret"),))))
    assert result.delivered and result.attempts == 1
    [(headers, body)] = receiver.requests
    payload = json.loads(body)
    assert payload["job_id"] == "4189877" and payload["culprit_nodes"] == ["dgx004"]
    assert payload["diagnosis"]["category"] == "gpu_fell_off_bus" and payload["drains"][0]["status"] == "recommended"
    assert headers["Authorization"] == "Bearer s3cret" and headers["Content-Type"] == "application/json"
    assert not dead_letter_path(_config(tmp_path)).exists()


def test_two_503_then_delivered(receiver, stored, tmp_path):
    root, row, diagnosis = stored
    receiver.plan = [503, 503]
    [result] = notify(row, diagnosis, _config(tmp_path, _hook(receiver.url)))
    assert result.delivered and result.attempts == 3 and len(receiver.requests) == 3


def test_always_500_is_dead_lettered_with_the_exact_body(receiver, stored, tmp_path):
    root, row, diagnosis = stored
    receiver.plan = [500, 500, 500]
    config = _config(tmp_path, _hook(receiver.url))
    [result] = notify(row, diagnosis, config)
    assert not result.delivered and result.attempts == 3 and result.error == "HTTP 500 Internal Server Error"
    path = dead_letter_path(config)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    [entry] = [json.loads(line) for line in path.read_text().splitlines()]
    assert entry["body"].encode() == receiver.requests[0][1] and entry["job_id"] == "4189877" and entry["url"] == receiver.url
    # the receiver is back: the dead letter is delivered and the file emptied
    assert retry_dead_letters(config) == (1, 0)
    assert receiver.requests[-1][1] == receiver.requests[0][1] and path.read_text() == ""


def test_a_400_is_not_retried(receiver, stored, tmp_path):
    root, row, diagnosis = stored
    receiver.plan = [400]
    [result] = notify(row, diagnosis, _config(tmp_path, _hook(receiver.url)))
    assert not result.delivered and result.attempts == 1 and len(receiver.requests) == 1


def test_a_receiver_slower_than_the_timeout(receiver, stored, tmp_path):
    root, row, diagnosis = stored
    receiver.plan = [1.0, 1.0]
    started = time.monotonic()
    [result] = notify(row, diagnosis, _config(tmp_path, _hook(receiver.url, timeout=0.3, retries=1)))
    assert not result.delivered and result.attempts == 2 and "timed out" in result.error
    assert time.monotonic() - started < 1.5


def test_a_closed_port_is_dead_lettered_and_kept_on_retry(stored, tmp_path):
    root, row, diagnosis = stored
    closed = Receiver()
    url = closed.url
    closed.close()
    config = _config(tmp_path, _hook(url, retries=1))
    [result] = notify(row, diagnosis, config)
    assert not result.delivered and "refused" in result.error.lower()
    assert retry_dead_letters(config) == (0, 1)
    [entry] = [json.loads(line) for line in dead_letter_path(config).read_text().splitlines()]
    assert entry["attempts"] == 3  # two in notify, one on retry


def test_chat_template_is_valid_json_for_any_summary(receiver, stored, tmp_path):
    root, row, diagnosis = stored
    odd = diagnosis.model_copy(update={"summary": 'quote " backslash \\ newline\nand </script>'})
    [result] = notify(row, odd, _config(tmp_path, _hook(receiver.url, format="template")))
    assert result.delivered
    text = json.loads(receiver.requests[0][1])["text"]
    assert text.startswith("*sattrib* job 4189877") and 'quote " backslash \\ newline\nand </script>' in text
    assert "drain dgx004: recommended -- sattrib: Xid79 job 4189877" in text


def test_config_errors_name_the_file(tmp_path):
    path = tmp_path / "config.yaml"
    for text, message in (
        ("webhooks: [{url: 'ftp://x/y'}]", "webhook url must start with http:// or https://"),
        ("webhooks: [{url: 'http://x/y', retry: 3}]", "webhook: unknown key(s) retry"),
        ("webhooks: [{url: 'http://x/y', format: xml}]", "webhook format 'xml'"),
    ):
        path.write_text(text)
        with pytest.raises(ConfigError, match=f"^{path}: .*{message[:20]}"):
            load_config(path)
    path.write_text("webhooks: [{url: 'https://chat/hook', headers: {Authorization: 'Bearer x'}, retries: 1}]")
    [hook] = load_config(path).webhooks
    assert hook.headers == (("Authorization", "Bearer x"),) and hook.retries == 1


def test_the_worker_notifies_and_never_fails_for_a_webhook(receiver, tmp_path):
    from slurm_attrib.simulate import write_scenario
    from slurm_attrib.worker import analyse_job

    write_scenario("gpu_fell_off_bus", tmp_path / "spool" / "21", nodes=2, ranks_per_node=2, seed=21)
    down = Receiver()
    down_url = down.url
    down.close()
    config = replace(_config(tmp_path, _hook(receiver.url), _hook(down_url, retries=0)), spool=str(tmp_path / "spool"))
    row = analyse_job("21", config, nodes=[], deadline=0, backend=None, env={}, apply=False)
    assert row.job_id == "21"  # stored although one receiver is down
    assert json.loads(receiver.requests[0][1])["job_id"] == "21"
    assert json.loads(dead_letter_path(config).read_text())["url"] == down_url


def test_cli_test_and_retry(receiver, stored, tmp_path):
    root, row, diagnosis = stored
    config = tmp_path / "config.yaml"
    config.write_text(f"results: {root / 'results'}\nwebhook_dead_letter: {tmp_path / 'dead.jsonl'}\n"
                      f"webhooks: [{{url: '{receiver.url}', retries: 0}}]\n")
    env = dict(os.environ, SATTRIB_CONFIG=str(config))
    run = lambda *a: subprocess.run([sys.executable, "-m", "slurm_attrib", "webhooks", *a], capture_output=True, text=True, env=env, timeout=60)  # noqa: E731
    receiver.plan = [502]
    failed = run("--test", "4189877")
    assert failed.returncode == 1 and "NOT delivered (HTTP 502" in failed.stdout
    resent = run("--retry")
    assert resent.returncode == 0 and resent.stdout.startswith("1 delivered, 0 still in")
    assert run("--test", "999").stderr.strip() == "sattrib: job 999: no stored diagnosis"


def test_a_letter_dead_lettered_during_a_retry_is_kept(receiver, stored, tmp_path):
    root, row, diagnosis = stored
    closed = Receiver()
    down_url = closed.url
    closed.close()
    config = _config(tmp_path, _hook(down_url, retries=0))
    notify(row, diagnosis, config)  # one dead letter for a receiver that is down
    receiver.plan = [0.5]  # the retry's delivery is slow...
    entry = json.loads(dead_letter_path(config).read_text())
    dead_letter_path(config).write_text(json.dumps({**entry, "url": receiver.url}) + "\n")
    retrying = threading.Thread(target=lambda: retry_dead_letters(config))
    retrying.start()
    time.sleep(0.2)
    notify(row, diagnosis, config)  # ...and meanwhile another webhook fails
    retrying.join()
    [kept] = [json.loads(line) for line in dead_letter_path(config).read_text().splitlines()]
    assert kept["url"] == down_url and kept["attempts"] == 1
