"""The pages in Debian's headless Chromium, through a reverse proxy that sets the user header as a
site's authenticating proxy does: they load without console messages, the timeline has one lane
per node with the cause on the culprit's lane, and screenshots are saved."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from service_support import PROXY_SECRET, start_server, stop_server, store_dir  # noqa: F401 (a fixture)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package chromium; contrib/testcluster/install.sh)")


def proxy_to(upstream: str, user: str) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            request = urllib.request.Request(upstream + self.path,
                                             headers={"X-Remote-User": user, "X-Sattrib-Proxy-Secret": PROXY_SECRET,
                                                      "Accept": self.headers.get("Accept", "*/*")})
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    status, body, kind = answer.status, answer.read(), answer.headers.get("content-type", "text/html")
            except urllib.error.HTTPError as exc:
                status, body, kind = exc.code, exc.read(), exc.headers.get("content-type", "text/plain")
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def browser_bases(store_dir):
    """The pages through a proxy for root (an admin) and one for nobody (a user)."""
    server = start_server(store_dir, f"results: {store_dir / 'results'}\nservice_proxy_secret_file: {store_dir / 'proxy-secret'}\n")
    proxy = proxy_to(server.url, "root")  # root: an admin when no admin_group is set
    user_proxy = proxy_to(server.url, "nobody")
    yield f"http://127.0.0.1:{proxy.server_address[1]}", f"http://127.0.0.1:{user_proxy.server_address[1]}"
    user_proxy.shutdown()
    proxy.shutdown()
    stop_server(server)


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--enable-logging=stderr", "--v=0", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("page, expect", [("jobs/101", 'data-kind="cause"'), ("fleet?since=3650d", 'id="failures"'),
                                          ("nodes/dgx004", 'id="jobs"')])
def test_pages_render_without_console_messages(browser_bases, tmp_path, page, expect):
    browser_base = browser_bases[0]
    dom = chromium("--dump-dom", f"{browser_base}/{page}")
    assert expect in dom.stdout, dom.stderr[-2000:]
    assert "CONSOLE" not in dom.stderr, [line for line in dom.stderr.splitlines() if "CONSOLE" in line]
    shot = tmp_path / (page.split("?")[0].replace("/", "-") + ".png")
    taken = chromium(f"--screenshot={shot}", "--window-size=1000,800", f"{browser_base}/{page}")
    assert shot.stat().st_size > 10_000, taken.stderr[-2000:]


def test_the_timeline_has_a_lane_per_node_and_the_cause_on_the_culprit(browser_bases):
    dom = chromium("--dump-dom", f"{browser_bases[0]}/jobs/101").stdout
    lanes = re.findall(r'<g class="lane" data-node="([^"]+)">(.*?)</g>', dom, re.S)
    assert len(lanes) == 8 and lanes[0][0] == "dgx004"
    assert [node for node, body in lanes if 'data-kind="cause"' in body] == ["dgx004"]


def test_chromium_does_report_console_messages(tmp_path):
    """The console check above can fail: a page that logs an error shows it."""
    page = tmp_path / "noisy.html"
    page.write_text('<html><body><script>console.error("boom")</script></body></html>')
    assert "CONSOLE" in chromium("--dump-dom", page.as_uri()).stderr


def test_the_fleet_chart_has_a_labelled_tick_per_day_of_the_window(browser_bases):
    dom = chromium("--dump-dom", f"{browser_bases[0]}/fleet?since=14d").stdout
    chart = re.search(r'<svg id="failures".*?</svg>', dom, re.S)
    assert chart, dom[-2000:]
    days = re.findall(r'<text class="tick" data-day="(\d{4}-\d\d-\d\d)"[^>]*>([^<]+)</text>', chart.group(0))
    today = datetime.now(UTC).date()
    assert [day for day, _ in days] == [(today - timedelta(days=14 - i)).isoformat() for i in range(15)]
    assert all(label.strip() for _, label in days)
    xs = [float(x) for x in re.findall(r'<text class="tick"[^>]* x="([\d.]+)"', chart.group(0))]
    assert xs == sorted(xs) and xs[-1] - xs[0] > 600  # spread over the plot, not one bar


def test_an_error_is_a_page_in_a_browser_and_json_for_an_api_client(browser_bases):
    admin_only = chromium("--dump-dom", f"{browser_bases[1]}/fleet").stdout  # nobody is not an admin
    assert '<h1 id="error">403 Forbidden</h1>' in admin_only and "for administrators only" in admin_only
    missing = chromium("--dump-dom", f"{browser_bases[0]}/jobs/999999").stdout
    assert '<h1 id="error">404 Not Found</h1>' in missing
    api = urllib.request.Request(f"{browser_bases[1]}/fleet", headers={"Accept": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(api, timeout=30)
    assert refused.value.code == 403 and json.loads(refused.value.read()) == {"detail": "for administrators only"}
