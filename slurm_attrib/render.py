"""Render a diagnosis as text through the jinja2 templates (bundled, or a site folder first)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import jinja2

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
