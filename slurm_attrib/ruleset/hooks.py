"""Python refinements for rules whose meaning depends on captured values.

A hook takes the Hit a YAML rule produced and returns it refined (role, category, strength and
notes such as NVIDIA's recommended action).  Hooks are pure: no I/O beyond reading the bundled
catalog once.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

import yaml

from slurm_attrib.paths import bundled_dir

if TYPE_CHECKING:
    from slurm_attrib.ruleset.scanner import Hit

XID_ROLES = {
    # points_at -> (role, strength, severity)
    "hardware": ("cause", 3, "critical"),
    "application": ("context", 1, "warning"),
    "follow_on": ("symptom", 1, "warning"),
    "informational": ("context", 1, "info"),
}


@cache
def xid_catalog() -> dict[int, dict[str, Any]]:
    """The NVIDIA Xid catalog shipped as rules/_xid_catalog.yaml, keyed by Xid number."""
    path = bundled_dir("rules") / "_xid_catalog.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {int(number): entry for number, entry in data["xids"].items()}


def refine_xid(hit: "Hit") -> "Hit":
    """Role and category of an Xid from the catalog: only hardware Xids can be a cause."""
    xid = hit.fields.get("xid")
    entry = xid_catalog().get(xid)
    if entry is None:
        hit.role, hit.strength, hit.severity = "context", 1, "warning"
        hit.notes["xid_action"] = "CONTACT_SUPPORT"
        hit.notes["xid_meaning"] = f"Xid {xid} is not in the bundled catalog"
        return hit
    hit.role, hit.strength, hit.severity = XID_ROLES[entry["points_at"]]
    hit.category = entry.get("category", "gpu_hardware_other") if hit.role == "cause" else None
    hit.notes["xid_action"] = entry["action"]
    hit.notes["xid_meaning"] = entry["description"]
    hit.notes["xid_points_at"] = entry["points_at"]
    return hit


HOOKS: dict[str, Callable[["Hit"], "Hit"]] = {
    "xid": refine_xid,
}
