"""The pages in Debian's headless Chromium, through nginx configured with the location block of
contrib/systemd/nginx-sattrib.conf (basic auth, the service's Unix socket) as a site's
authenticating proxy: they load without console messages, the timeline has one lane per node
with the cause on the culprit's lane, and screenshots are saved."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from nginx_proxy import NGINX, WORKER_USER, site_folder, start_nginx
from service_support import start_server, stop_server, store_dir  # noqa: F401 (a fixture)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package chromium; contrib/testcluster/install.sh)")


PASSWORDS = {"root": "root-pw", "nobody": "nobody-pw"}  # root: an admin when no admin_group is set


@pytest.fixture(scope="module")
def browser_bases(store_dir):
    """The pages through nginx with contrib's location block, as root (an admin) and as nobody (a
    user), each logged in by basic auth in the URL."""
    if NGINX is None:
        pytest.skip("nginx not installed (Debian package nginx-light; contrib/testcluster/install.sh)")
    folder = site_folder()
    socket_path = folder / "serve.sock"
    server = start_server(store_dir, f"results: {store_dir / 'results'}\nservice_socket_group: {WORKER_USER}\n",
                          socket_path=socket_path)
    base, nginx = start_nginx(folder, socket_path, PASSWORDS)
    yield tuple(base.replace("http://", f"http://{user}:{password}@") for user, password in PASSWORDS.items())
    nginx.terminate()
    nginx.wait(timeout=20)
    stop_server(server)
    shutil.rmtree(folder, ignore_errors=True)


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
    base = browser_bases[1].replace("nobody:nobody-pw@", "")
    login = "Basic " + base64.b64encode(b"nobody:nobody-pw").decode()
    api = urllib.request.Request(f"{base}/fleet", headers={"Accept": "application/json", "Authorization": login})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(api, timeout=30)
    assert refused.value.code == 403 and json.loads(refused.value.read()) == {"detail": "for administrators only"}


def test_the_proxy_asks_for_a_login_and_replaces_a_forged_user_header(browser_bases):
    """contrib's nginx block: no login, no page; a logged-in user's own X-Remote-User (here
    claiming root, an admin) is replaced by the name nginx authenticated."""
    base = browser_bases[1].replace("nobody:nobody-pw@", "")
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(f"{base}/jobs", timeout=30)
    assert anonymous.value.code == 401
    login = "Basic " + base64.b64encode(b"nobody:nobody-pw").decode()
    forged = urllib.request.Request(f"{base}/fleet", headers={"Accept": "application/json", "Authorization": login,
                                                              "X-Remote-User": "root"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(forged, timeout=30)
    assert refused.value.code == 403
    mine = urllib.request.Request(f"{base}/jobs", headers={"Authorization": login})
    with urllib.request.urlopen(mine, timeout=30) as page:
        assert page.status == 200 and b"101" in page.read()  # nobody's job
