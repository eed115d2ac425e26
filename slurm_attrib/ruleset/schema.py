"""The YAML rule format as pydantic models: what validates a rule file (the format: ruleset/spec.py).

Built only when a rule file is validated: with the user's cache warm an analysis never imports
this module (ruleset/cache.py keeps the validated rules as spec.Rule).
"""

from __future__ import annotations

import re
from typing import Any, Literal

import re2
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from slurm_attrib.ruleset.spec import DEFAULT_SOURCES, Rule, compiled, group_names
from slurm_attrib.vocab import CATEGORIES_BY_DOMAIN, DOMAIN_OF_CATEGORY, GPU_VENDORS, SOURCE_KINDS

FieldCast = Literal["int", "float", "str", "lower", "pci"]
RULE_ID = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)+")  # used with fullmatch


def _check_compiles(what: str, pattern: str) -> None:
    try:
        compiled(pattern)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise ValueError(
            f"{what} {pattern!r} does not compile for RE2, the linear-time engine (no lookaround, no backreference): {reason}"
        ) from None


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MatchModel(StrictModel):
    contains: list[str] = Field(min_length=1)
    regex: str
    unless: list[str] = []
    requires: list[str] = []
    capture: list[str] = []
    following: int = Field(default=0, ge=0, le=40)
    ignore_case: bool = False

    @field_validator("contains")
    @classmethod
    def _literals_not_empty(cls, value: list[str]) -> list[str]:
        if any(len(literal) < 3 for literal in value):
            raise ValueError("each 'contains' literal needs at least 3 characters")
        return value

    @field_validator("regex")
    @classmethod
    def _regex_compiles(cls, value: str) -> str:
        _check_compiles("regex", value)
        return value

    @field_validator("unless", "requires", "capture")
    @classmethod
    def _list_compiles(cls, value: list[str]) -> list[str]:
        for pattern in value:
            _check_compiles("regex", pattern)
        return value

    def group_names(self) -> list[str]:
        return group_names(self.capture, self.requires, self.regex)


class DecodeModel(StrictModel):
    """spec.Decode: a code table decides what the line means."""

    families: list[str] = Field(min_length=1)
    fields: list[str] = Field(min_length=1)
    note: str = Field(pattern=r"^[a-z][a-z0-9_]*$")

    @field_validator("families")
    @classmethod
    def _known_families(cls, value: list[str]) -> list[str]:
        from slurm_attrib.ruleset.hooks import code_tables

        unknown = sorted(set(value) - set(code_tables()))
        if unknown:
            raise ValueError(f"unknown code famil(ies) {unknown} (rules/_codes.yaml: {', '.join(sorted(code_tables()))})")
        return value


class EventModel(StrictModel):
    type: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    domain: str
    category: str | None = None
    role: Literal["cause", "symptom", "context", "marker"]
    severity: Literal["info", "warning", "error", "critical"] = "error"
    strength: int = Field(default=2, ge=1, le=3)
    hook: str | None = None
    decode: DecodeModel | None = None  # spec.EventSpec.decode
    # A second-look rule: generic wording (a component named next to a failure word) that is read
    # only when the rules proper found no origin at all; its cause is a lead (quality
    # `insufficient`), never drained.  A fallback marker (work going on) weighs the leads.
    fallback: bool = False
    generic: bool = False  # spec.EventSpec.generic
    collapse: list[str] | None = None  # spec.EventSpec.collapse
    cascade: list[str] | None = None  # spec.EventSpec.cascade
    ends: bool = False  # spec.EventSpec.ends
    onset: Literal["node_last_seen"] | None = None  # spec.EventSpec.onset
    reports_on: Literal["named_node", "job"] | None = None  # spec.EventSpec.reports_on
    vendor: Literal[GPU_VENDORS] | None = None  # spec.EventSpec.vendor

    @model_validator(mode="after")
    def _category_fits_domain(self) -> "EventModel":
        if self.domain not in CATEGORIES_BY_DOMAIN:
            raise ValueError(f"domain {self.domain!r} is not one of {', '.join(CATEGORIES_BY_DOMAIN)}")
        if self.category is not None and DOMAIN_OF_CATEGORY.get(self.category) != self.domain:
            raise ValueError(f"category {self.category!r} does not belong to domain {self.domain!r}")
        if self.role == "cause" and self.category is None:
            raise ValueError("a cause needs a category")
        if self.fallback and self.role not in ("cause", "marker"):
            raise ValueError("a fallback rule gives a lead (a cause) or a marker the second look weighs it by")
        if self.generic and (self.fallback or self.role not in ("cause", "symptom")):
            raise ValueError("a generic reading is a rule proper's cause or symptom (a second look's lead yields anyway)")
        if self.collapse is not None and self.role != "context":
            raise ValueError("only context collapses: a cause, symptom or marker line is read on its own")
        if self.cascade is not None and (self.role not in ("symptom", "marker") or self.collapse is not None):
            raise ValueError("only a symptom or marker joins a cascade of ranks; a cause line is read on its own")
        if self.ends and (self.role != "marker" or self.collapse is not None or self.cascade is not None or self.fallback):
            raise ValueError("only a marker of the rules proper reads a file's ends (first and last lines); it does not collapse")
        if self.onset is not None and self.role != "cause":
            raise ValueError("only a cause has an onset of its own: it dates the failure the line reports")
        if self.vendor is not None and self.domain != "gpu":
            raise ValueError("only a GPU's line names its vendor: the admin's diagnostics depend on it")
        return self


class MatchExampleModel(StrictModel):
    line: str
    fields: dict[str, Any] = {}
    kind: str | None = None


class ExamplesModel(StrictModel):
    match: list[MatchExampleModel] = Field(min_length=1)
    no_match: list[str] = Field(min_length=1)


class RuleModel(StrictModel):
    id: str
    title: str = Field(max_length=100)
    description: str = ""
    sources: list[str] = DEFAULT_SOURCES
    match: MatchModel
    fields: dict[str, FieldCast] = {}
    event: EventModel
    references: list[str] = Field(min_length=1)
    examples: ExamplesModel
    status: Literal["stable", "test", "experimental"] = "stable"

    @field_validator("id")
    @classmethod
    def _id_shape(cls, value: str) -> str:
        if not RULE_ID.fullmatch(value):
            raise ValueError("id must be dotted lowercase words, e.g. 'gpu.xid'")
        return value

    @field_validator("sources")
    @classmethod
    def _known_sources(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(SOURCE_KINDS))
        if unknown:
            raise ValueError(f"unknown source kind(s) {unknown}; known: {', '.join(SOURCE_KINDS)}")
        return value

    @model_validator(mode="after")
    def _fields_are_groups(self) -> "RuleModel":
        names = self.match.group_names()
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"group(s) {twice} are named in more than one of match.regex, requires, capture")
        groups = set(names)
        missing = sorted(set(self.fields) - groups)
        if missing:
            raise ValueError(f"fields {missing} are not named groups of match.regex")
        decoded = self.event.decode.fields if self.event.decode else []
        for key, named in (("collapse", self.event.collapse), ("cascade", self.event.cascade), ("decode.fields", decoded)):
            unknown = sorted(set(named or []) - groups)
            if unknown:
                raise ValueError(f"event.{key} names {unknown}, which are not named groups of the rule's regexes")
        placed_by = sorted({"host", "node"} & groups - set(self.event.cascade or ["host", "node"]))
        if placed_by:
            raise ValueError(f"event.cascade must name {placed_by}: the ranks of one event are placed by its host")
        if self.event.reports_on == "named_node" and not {"host", "node", "ip"} & groups:
            raise ValueError("event.reports_on needs a group named node, host or ip: the node the line reports on")
        return self

    def to_rule(self) -> Rule:
        """The form the scanner reads and the cache keeps (ruleset/spec.py)."""
        return Rule.from_dict(self.model_dump())
