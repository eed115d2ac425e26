"""The self-contained HTML report: one lane per node, the cause on the culprit's lane, nothing
fetched, hostile text escaped."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from slurm_attrib.engine.pipeline import analyze_path
from slurm_attrib.engine.timefmt import iso, unix
from slurm_attrib.render import MAX_LANES, PLOT_LEFT, PLOT_WIDTH, render_html
from slurm_attrib.simulate import write_scenario

DEMO = Path(__file__).resolve().parents[1] / "slurm_attrib" / "samples" / "demo"


class Page(HTMLParser):
    """Lanes (their node and the kinds of their marks), external references, and the text."""

    def __init__(self, html: str):
        super().__init__()
        self.lanes: list[tuple[str, list[str]]] = []
        self.external: list[str] = []
        self.tags: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if tag == "g" and "lane" in (attrs.get("class") or ""):
            self.lanes.append((attrs["data-node"], []))
        if "data-kind" in attrs and self.lanes:
            self.lanes[-1][1].append(attrs["data-kind"])
        for key in ("src", "href"):
            if attrs.get(key):
                self.external.append(attrs[key])


def test_the_demo_page_has_a_lane_per_node_and_the_cause_first_on_the_culprit(tmp_path):
    diagnosis = analyze_path(DEMO)
    page = Page(render_html(diagnosis))
    assert page.lanes[0][0] == diagnosis.culprit_nodes[0] == "dgx004"
    assert "cause" in page.lanes[0][1]
    assert sorted(node for node, _ in page.lanes) == sorted(diagnosis.outcome.nodes)
    assert all("cause" not in kinds for node, kinds in page.lanes[1:])
    assert page.external == [] and "script" not in page.tags  # nothing fetched, nothing run


def test_hundreds_of_nodes_fold_into_one_lane_keeping_the_culprit(tmp_path):
    write_scenario("gpu_fell_off_bus", tmp_path / "job", nodes=128, ranks_per_node=2, seed=4)
    diagnosis = analyze_path(tmp_path / "job")
    page = Page(render_html(diagnosis))
    assert len(page.lanes) == MAX_LANES
    assert page.lanes[0][0] == diagnosis.culprit_nodes[0] and "cause" in page.lanes[0][1]
    assert re.fullmatch(r"\+\d+ more nodes", page.lanes[-1][0])


def test_log_text_is_escaped(tmp_path):
    diagnosis = analyze_path(DEMO)
    evil = diagnosis.evidence[0].model_copy(update={"text": '<script>alert(1)</script><img src="http://x/y">'})
    html = render_html(diagnosis.model_copy(update={"evidence": [evil, *diagnosis.evidence[1:]], "summary": "a <b> & c"}))
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "a &lt;b&gt; &amp; c" in html
    assert Page(html).external == []


def test_a_job_without_times_has_no_timeline_but_a_page(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "slurm-9.out").write_text("Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nZeroDivisionError: division by zero\n")
    html = render_html(analyze_path(job))
    assert 'id="timeline"' not in html and 'id="evidence"' in html


def test_cli_analyze_writes_the_page(tmp_path):
    out = tmp_path / "job.html"
    proc = subprocess.run([sys.executable, "-m", "slurm_attrib", "analyze", str(DEMO), "--format", "html", "--output", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("<!DOCTYPE html>") and "dgx004" in out.read_text()


# -- in headless Chromium: what a reader sees --------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package chromium)")
FAILURE_RED = (0xC0, 0x39, 0x2B)


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
                          capture_output=True, text=True, timeout=120)


def browser_dom(html: str, folder: Path) -> str:
    page = folder / "page.html"
    page.write_text(html)
    return chromium("--dump-dom", page.as_uri()).stdout


def screenshot_pixels(html: str, folder: Path) -> set[tuple[int, int, int]]:
    """The colours of a 1000x1400 screenshot of the page (a PNG decoded with the standard library)."""
    page, shot = folder / "page.html", folder / "page.png"
    page.write_text(html)
    chromium(f"--screenshot={shot}", "--window-size=1000,1400", page.as_uri())
    return png_colours(shot.read_bytes())


def png_colours(data: bytes) -> set[tuple[int, int, int]]:
    chunks, at = [], 8
    while at < len(data):
        length = struct.unpack(">I", data[at:at + 4])[0]
        chunks.append((data[at + 4:at + 8], data[at + 8:at + 8 + length]))
        at += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", chunks[0][1][:10])
    assert depth == 8 and colour_type in (2, 6), (depth, colour_type)
    step = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    stride, previous, colours = width * step, bytearray(width * step), set()
    for row in range(height):
        kind, line = raw[row * (stride + 1)], bytearray(raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)])
        for i in range(stride):
            left, up = line[i - step] if i >= step else 0, previous[i]
            corner = previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        colours.update(tuple(line[i:i + 3]) for i in range(0, stride, step))
        previous = line
    return colours


def lanes_in(dom: str) -> dict[str, list[tuple[str, str]]]:
    """Each lane's marks in drawing order: (kind, x)."""
    return {node: re.findall(r'data-kind="(\w+)"[^>]*?(?:cx="|d="M)([\d.]+)', body)
            for node, body in re.findall(r'<g class="lane" data-node="([^"]+)">(.*?)</g>', dom, re.S)}


@needs_chromium
def test_a_short_job_fills_the_axis_and_context_before_it_sits_on_the_edge(tmp_path):
    diagnosis = analyze_path(DEMO)
    cause = unix(diagnosis.cause.time)
    short = diagnosis.outcome.model_copy(update={"start": iso(cause - 2), "end": iso(cause + 10)})  # a 12 s job
    dom = browser_dom(render_html(diagnosis.model_copy(update={"outcome": short})), tmp_path)
    window = re.search(r'<rect class="window" x="([\d.]+)" y="\d+" width="([\d.]+)"', dom)
    assert float(window.group(2)) > 0.9 * PLOT_WIDTH
    folded = re.findall(r'data-kind="context" data-folded="before" cx="([\d.]+)"', dom)
    assert folded and {float(x) for x in folded} == {PLOT_LEFT}


@needs_chromium
def test_the_cause_is_drawn_last_in_its_lane(tmp_path):
    diagnosis = analyze_path(DEMO)
    culprit = lanes_in(browser_dom(render_html(diagnosis), tmp_path))["dgx004"]
    kinds = [kind for kind, _ in culprit]
    assert "symptom" in kinds and kinds[-kinds.count("cause"):] == ["cause"] * kinds.count("cause")
    # a symptom at the cause's very moment exists, and is drawn under it
    assert any(kind == "symptom" and abs(float(x) - float(culprit[-1][1])) < 1 for kind, x in culprit)


@needs_chromium
def test_a_slurm_banner_lands_on_the_lane_of_the_node_it_names(tmp_path):
    diagnosis = analyze_path(DEMO)
    banner = diagnosis.evidence[0].model_copy(update={
        "node": "dgx002", "role": "context", "source": "slurm-4189877.out", "line": 99999, "time": diagnosis.outcome.end,
        "text": "slurmstepd: error: *** STEP 4189877.0 ON dgx006 CANCELLED AT 2026-12-02T16:58:28 ***"})
    dom = browser_dom(render_html(diagnosis.model_copy(update={"evidence": [*diagnosis.evidence, banner]})), tmp_path)
    lanes = re.findall(r'<g class="lane" data-node="([^"]+)">(.*?)</g>', dom, re.S)
    assert [node for node, body in lanes if "slurm-4189877.out:99999" in body] == ["dgx006"]


@needs_chromium
def test_a_success_page_has_nothing_of_the_failure_colour(tmp_path):
    write_scenario("success", tmp_path / "job", nodes=2, ranks_per_node=2, seed=1)
    shutil.rmtree(tmp_path / "job" / "hgx001")  # a node without logs: a coverage gap
    diagnosis = analyze_path(tmp_path / "job")
    assert diagnosis.domain == "none" and any(c.status != "ok" for c in diagnosis.coverage)
    (tmp_path / "ok").mkdir(), (tmp_path / "failed").mkdir()
    assert FAILURE_RED not in screenshot_pixels(render_html(diagnosis), tmp_path / "ok")
    assert FAILURE_RED in screenshot_pixels(render_html(analyze_path(DEMO)), tmp_path / "failed")  # the check can fail
    dom = browser_dom(render_html(diagnosis), tmp_path)
    assert '<details id="coverage">' in dom and "Coverage gaps" not in dom
