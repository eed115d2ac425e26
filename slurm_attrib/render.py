"""Render a diagnosis as text through the jinja2 templates (bundled, or a site folder first)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jinja2

from slurm_attrib.engine.timefmt import unix
from slurm_attrib.model import Diagnosis
from slurm_attrib.paths import bundled_dir


def _clock(value: str | None) -> str:
    """'2026-12-02T13:04:06.123Z' -> '13:04:06'; unknown times stay visible as '--:--:--'."""
    if not value:
        return "--:--:--"
    return datetime.fromisoformat(value.replace("Z", "+00:00")).strftime("%H:%M:%S")


def environment(template_dirs: list[Path] | None = None) -> jinja2.Environment:
    folders = [str(p) for p in (template_dirs or [])] + [str(bundled_dir("templates"))]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folders),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["clock"] = _clock
    return env


def render_text(diagnosis: Diagnosis, template_dirs: list[Path] | None = None) -> str:
    template = environment(template_dirs).get_template("diagnosis.txt.j2")
    return template.render(d=diagnosis)


# -- Markdown (for a GitHub issue) ------------------------------------------------------------------

MARKDOWN_SPECIALS = "\\`*_[]|~"  # what makes markup mid-line (a link needs a `[`, a table cell ends at `|`)


def _md(value) -> str:
    """One line of Markdown that shows the text as it is: markup characters escaped, HTML's too
    (a log line is hostile: it must not become a link, an image or a tag)."""
    text = " ".join(str(value).split())
    text = "".join(f"\\{c}" if c in MARKDOWN_SPECIALS else c for c in text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _fence(lines) -> str:
    """A code fence longer than any run of backticks in the lines (or in any field of the evidence
    lines given), so that none can close it."""
    longest = max((len(run) for line in lines for run in re.findall("`+", str(line))), default=0)
    return "`" * max(3, longest + 1)


def render_markdown(diagnosis: Diagnosis, template_dirs: list[Path] | None = None) -> str:
    env = environment(template_dirs)
    env.filters["md"] = _md
    env.filters["fence"] = _fence
    return env.get_template("diagnosis.md.j2").render(d=diagnosis)


# -- HTML ------------------------------------------------------------------------------------------

MAX_LANES = 24  # a job of hundreds of nodes: the culprits and the first reporters, the rest in one lane
LANE_HEIGHT = 22
PLOT_LEFT, PLOT_WIDTH = 150, 760
KIND_OF = {"first_cause": "cause", "first_symptom": "symptom", "last_event": "last"}


def timeline_view(d: Diagnosis) -> dict | None:
    """The cross-node timeline as drawing instructions: one lane per node (culprits first, then by
    first event; beyond MAX_LANES the rest share one lane), each timed line a mark at its time, the
    job's window as a band.  The axis spans the failure's interval (the job's window and the cause):
    lines outside it are folded onto its edge, so minutes of context do not squeeze a short job.
    None when no line has a time."""
    marks = _timeline_marks(d)
    if not marks:
        return None
    t0, t1 = _axis_interval(d, marks)
    span = max(t1 - t0, 1.0)
    t0, t1 = t0 - span * 0.03, t1 + span * 0.03
    x = lambda t: round(PLOT_LEFT + (min(max(t, t0), t1) - t0) / (t1 - t0) * PLOT_WIDTH, 1)  # noqa: E731
    lanes = _lanes(d, marks)
    for index, lane in enumerate(lanes):
        lane["y"] = 30 + index * LANE_HEIGHT
        lane["marks"] = [{**m, "x": x(m["t"]), "clock": _clock(m["time"]), "folded": _folded(m["t"], t0, t1)}
                         for m in sorted(lane["marks"], key=lambda m: (m["kind"] == "cause", m["t"]))]  # the cause on top
    start, end = unix(d.outcome.start), unix(d.outcome.end)
    return {
        "width": PLOT_LEFT + PLOT_WIDTH + 40,
        "height": 40 + len(lanes) * LANE_HEIGHT,
        "lanes": lanes,
        "window": {"x0": x(start), "x1": x(end)} if start is not None and end is not None else None,
        "ticks": [{"x": x(t0 + (t1 - t0) * i / 6), "label": datetime.fromtimestamp(t0 + (t1 - t0) * i / 6, UTC).strftime("%H:%M:%S")}
                  for i in range(7)],
        "left": PLOT_LEFT,
        "right": PLOT_LEFT + PLOT_WIDTH,
    }


def _axis_interval(d: Diagnosis, marks: list[dict]) -> tuple[float, float]:
    """The job's window widened to the cause's time (a fault just before the job started); every
    mark's time when the window is not known."""
    start, end = unix(d.outcome.start), unix(d.outcome.end)
    if start is None or end is None or end < start:
        times = [m["t"] for m in marks] + [t for t in (start, end) if t is not None]
        return min(times), max(times)
    causes = [m["t"] for m in marks if m["kind"] == "cause"]
    return min([start, *causes]), max([end, *causes])


def _folded(t: float, t0: float, t1: float) -> str | None:
    return "before" if t < t0 else "after" if t > t1 else None


# A Slurm banner names its node: `*** STEP 12.0 ON gpu01 CANCELLED AT ... ***`
SLURM_BANNER_NODE = re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON (\S+) ")


def _mark_node(d: Diagnosis, node: str | None, text: str) -> str | None:
    """The node a line is about: the one a Slurm banner names when it is one of the job's nodes,
    else the node the evidence gives it."""
    named = SLURM_BANNER_NODE.search(text)
    if named and named.group(1) in d.outcome.nodes:
        return named.group(1)
    return node


def _timeline_marks(d: Diagnosis) -> list[dict]:
    seen: set[tuple] = set()
    marks = []
    evidence_node = {(line.source, line.line): line.node for line in d.evidence}
    for entry in d.timeline:
        node = _mark_node(d, evidence_node.get((entry.source, entry.line), entry.node), entry.text)
        if entry.time and node:
            seen.add((entry.source, entry.line))
            marks.append({"t": unix(entry.time), "time": entry.time, "node": node, "kind": KIND_OF[entry.what],
                          "text": entry.text, "where": f"{entry.source}:{entry.line}"})
    for line in d.evidence:
        node = _mark_node(d, line.node, line.text)
        if line.time and node and (line.source, line.line) not in seen:
            seen.add((line.source, line.line))
            marks.append({"t": unix(line.time), "time": line.time, "node": node, "kind": line.role,
                          "text": line.text, "where": f"{line.source}:{line.line}"})
    return sorted(marks, key=lambda m: (m["t"], m["node"]))


def _lanes(d: Diagnosis, marks: list[dict]) -> list[dict]:
    first: dict[str, float] = {}
    for mark in marks:
        first.setdefault(mark["node"], mark["t"])
    culprits = [n for n in d.culprit_nodes if n in first] + [n for n in d.culprit_nodes if n not in first]
    causes = [n for n in first if n not in culprits and any(m["node"] == n and m["kind"] == "cause" for m in marks)]
    others = sorted((n for n in first if n not in culprits and n not in causes), key=lambda n: (first[n], n))
    shown = culprits + causes + others[: max(0, MAX_LANES - 1 - len(culprits) - len(causes))]
    rest = [n for n in others if n not in shown]
    lanes = [{"name": n, "culprit": n in d.culprit_nodes, "marks": [m for m in marks if m["node"] == n]} for n in shown]
    if rest:
        lanes.append({"name": f"+{len(rest)} more nodes", "culprit": False, "marks": [m for m in marks if m["node"] in rest]})
    return lanes


def render_html(diagnosis: Diagnosis, template_dirs: list[Path] | None = None) -> str:
    """One self-contained HTML file (inline CSS and SVG, nothing fetched)."""
    return render_page("diagnosis.html.j2", template_dirs, d=diagnosis, tl=timeline_view(diagnosis))


DOMAIN_COLOURS = {"gpu": "#c0392b", "network": "#2980b9", "host": "#8e44ad", "storage": "#16a085",
                  "application": "#e67e22", "scheduler": "#7f8c8d", "unknown": "#34495e"}


CHART_WIDTH = 760
MAX_DAY_LABELS = 31


def failures_chart(per_day: dict[str, dict[str, int]], now: float, since_days: float, height: int = 120) -> dict:
    """Failures per day as stacked bars (one colour per domain) over a day axis spanning the report's
    window, a labelled tick per day (every few days beyond a month): drawing instructions for SVG."""
    first = datetime.fromtimestamp(now - since_days * 86400, UTC).date()
    last = datetime.fromtimestamp(now, UTC).date()
    axis = [(first + timedelta(days=i)).isoformat() for i in range((last - first).days + 1)]
    slot = CHART_WIDTH / len(axis)
    bar = max(1.0, round(slot * 0.7, 1))
    every = -(-len(axis) // MAX_DAY_LABELS)
    top = max([sum(c.values()) for c in per_day.values()] + [1])
    x = lambda index: round(40 + index * slot + (slot - bar) / 2, 1)  # noqa: E731
    bars = []
    for index, day in enumerate(axis):
        if not per_day.get(day):
            continue
        y = height
        segments = []
        for domain, count in sorted(per_day[day].items()):
            h = round(count / top * (height - 10), 1)
            y -= h
            segments.append({"domain": domain, "count": count, "y": round(y, 1), "h": h,
                             "colour": DOMAIN_COLOURS.get(domain, "#95a5a6")})
        bars.append({"day": day, "x": x(index), "segments": segments, "total": sum(per_day[day].values())})
    ticks = [{"day": day, "x": round(x(index) + bar / 2, 1), "label": day[5:] if index == 0 or day.endswith("-01") else day[8:]}
             for index, day in enumerate(axis) if index % every == 0]
    return {"width": 60 + CHART_WIDTH, "height": height + 30, "base": height, "bar": bar, "bars": bars, "ticks": ticks,
            "top": top, "legend": [(d, c) for d, c in DOMAIN_COLOURS.items() if any(d in per_day[x] for x in per_day)]}


def render_page(name: str, template_dirs: list[Path] | None = None, **values) -> str:
    """An HTML page (the diagnosis report, the service's fleet and node pages) from the templates."""
    env = environment(template_dirs)
    env.autoescape = True  # log lines are hostile: every value is escaped
    return env.get_template(name).render(**values)
