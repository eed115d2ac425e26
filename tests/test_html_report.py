"""The self-contained HTML report: one lane per node, the cause on the culprit's lane, nothing
fetched, hostile text escaped."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from slurm_attrib.engine.pipeline import analyze_path
from slurm_attrib.render import MAX_LANES, render_html
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
