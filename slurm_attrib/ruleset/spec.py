"""The YAML rule format, as pydantic models.

One rule turns one log line (or a short block starting at that line) into an event:

    id: gpu.xid                       # dotted, immutable
    title: NVIDIA Xid error
    description: ...
    sources: [kernel, syslog, app]    # file kinds it applies to (default: all)
    match:
      contains: ['NVRM: Xid']         # literal pre-filter: the line holds at least one
      regex: 'NVRM: Xid \\((?:PCI:)?(?P<pci>...)\\): (?P<xid>\\d+)'
      unless: ['regex', ...]          # near misses that must not match
      requires: ['regex', ...]        # the matched line must hold these too, anywhere on it
      capture: ['regex', ...]         # named groups read wherever they are on the matched line
                                      # (a rank printed before or after the message), when present
      following: 0                    # lines after the matched one the regex may also read
    fields: {xid: int, pci: pci}      # casts for named groups (int, float, str, lower, pci)
    event:
      type: gpu_xid
      domain: gpu
      category: gpu_hardware_other
      role: cause                     # cause | symptom | context | marker
      severity: critical
      strength: 3                     # 1 generic .. 3 specific, for ranking causes
      hook: xid                       # optional Python refinement (ruleset/hooks.py)
      fallback: false                 # true: read only on a second look, when no other rule found
                                      # the origin (a lead, quality insufficient, never drained)
      collapse: [pci]                 # context only: a file's hits that agree on these fields (and
                                      # on the line's host, rank and program) are one event with a
                                      # count and a last time, not one event per line
    references: [https://...]
    examples:
      match: [{line: '...', fields: {...}}]
      no_match: ['...']

Every regex runs on RE2 (`google-re2`), in time linear in the line: job output is written by the
user, and a backtracking engine lets one line hang the analysis.  RE2 has no lookaround and no
backreference; `requires` and `capture` take the place of a lookahead, `unless` of a negative one.
A pattern RE2 cannot run is refused when the rule loads.  RE2's classes (`\\d`, `\\w`, `\\s`,
`\\b`) are ASCII, and `$` is the end of the text only (`\\z`; Python's `\\Z` is not RE2 syntax).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any, Literal

import re2
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from slurm_attrib.vocab import CATEGORIES_BY_DOMAIN, DOMAIN_OF_CATEGORY, SOURCE_KINDS

FieldCast = Literal["int", "float", "str", "lower", "pci"]
RULE_ID = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)+")  # used with fullmatch


@cache
def compiled(pattern: str, ignore_case: bool = False):
    """The pattern compiled by RE2, once per process: validating a rule and scanning with it share
    it.  Raises re2.error with RE2's one-line reason (e.g. `invalid perl operator: (?=`)."""
    options = re2.Options()
    options.log_errors = False  # the reason goes into our error, not to stderr
    options.case_sensitive = not ignore_case
    return re2.compile(pattern, options)


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


class Match(StrictModel):
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
        """The named groups of every regex that gives fields: capture, requires, then regex."""
        return [name for pattern in [*self.capture, *self.requires, self.regex] for name in compiled(pattern).groupindex]


class EventSpec(StrictModel):
    type: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    domain: str
    category: str | None = None
    role: Literal["cause", "symptom", "context", "marker"]
    severity: Literal["info", "warning", "error", "critical"] = "error"
    strength: int = Field(default=2, ge=1, le=3)
    hook: str | None = None
    # A second-look rule: generic wording (a component named next to a failure word) that is read
    # only when the rules proper found no origin at all; its cause is a lead (quality
    # `insufficient`), never drained.  A fallback marker (work going on) weighs the leads.
    fallback: bool = False
    # Noise a node prints all day (corrected PCIe/DRAM errors, NIC command errors): the judgement
    # reads how many, when first and when last, not each line; building one event per line cost
    # most of the analysis on realistic logs (issue 19).  Only context collapses: every cause,
    # symptom and marker line is read on its own.
    collapse: list[str] | None = None

    @model_validator(mode="after")
    def _category_fits_domain(self) -> "EventSpec":
        if self.domain not in CATEGORIES_BY_DOMAIN:
            raise ValueError(f"domain {self.domain!r} is not one of {', '.join(CATEGORIES_BY_DOMAIN)}")
        if self.category is not None and DOMAIN_OF_CATEGORY.get(self.category) != self.domain:
            raise ValueError(f"category {self.category!r} does not belong to domain {self.domain!r}")
        if self.role == "cause" and self.category is None:
            raise ValueError("a cause needs a category")
        if self.fallback and self.role not in ("cause", "marker"):
            raise ValueError("a fallback rule gives a lead (a cause) or a marker the second look weighs it by")
        if self.collapse is not None and self.role != "context":
            raise ValueError("only context collapses: a cause, symptom or marker line is read on its own")
        return self


class MatchExample(StrictModel):
    line: str
    fields: dict[str, Any] = {}
    kind: str | None = None


class Examples(StrictModel):
    match: list[MatchExample] = Field(min_length=1)
    no_match: list[str] = Field(min_length=1)


class Rule(StrictModel):
    id: str
    title: str = Field(max_length=100)
    description: str = ""
    # default: every kind of log; the metrics connector's change lines only for rules that name it
    sources: list[str] = [k for k in SOURCE_KINDS if k != "metrics"]
    match: Match
    fields: dict[str, FieldCast] = {}
    event: EventSpec
    references: list[str] = Field(min_length=1)
    examples: Examples
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
    def _fields_are_groups(self) -> "Rule":
        names = self.match.group_names()
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"group(s) {twice} are named in more than one of match.regex, requires, capture")
        groups = set(names)
        missing = sorted(set(self.fields) - groups)
        if missing:
            raise ValueError(f"fields {missing} are not named groups of match.regex")
        unknown = sorted(set(self.event.collapse or []) - groups)
        if unknown:
            raise ValueError(f"event.collapse names {unknown}, which are not named groups of the rule's regexes")
        return self
