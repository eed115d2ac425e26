"""Policies: the judgement's last decisions as small tables, read first row first.

Once the cause is chosen, whether it is one shared by many nodes, which nodes are the culprits and
how sure the diagnosis is are policies: each a list of rows, a condition on the verdict and what
follows from it.

    id: pol.quality
    decides: quality                      # systemic | culprits | quality | drain (read in this order) | outcome
    description: ...
    references: [https://...]
    rows:
      - name: a second-look lead is never more than a lead
        when:
          primary: {fallback: true}       # a relation matcher (ruleset/relations.py EventMatch) on the cause
          rivals: true                    # independent candidates timing cannot order
          systemic: true                  # one cause on many nodes (a shared component)
          culprits: false                 # whether the verdict names a node (quality only)
          job_started: true               # the job's record gives its start
          job_state: [COMPLETED]          # Slurm's state is one of these
          job_state_not: [CANCELLED]      # Slurm's state is none of these (unknown counts as none)
          job_nodes: 1                    # the job's record lists this many nodes (0: none)
          text: '(?i)\\bmight\\b'           # RE2, searched in the cause's line
          other_causes: true              # another cause of another domain it does not explain
          blamed_peer: true               # the job's lines blame one peer node (culprits.blamed_peer)
          any: {type: [work_progress]}    # some event holds for this matcher
          said_it_finished: true          # the program said it finished (engine/checks.said_it_finished)
          quality: [confirmed]            # the verdict's quality is one of these (drain)
          every_rival: {trusted: true}    # every rival holds for this matcher (drain)
        quality: insufficient             # quality: what the row gives
        note: '...'                       # optional: a note the diagnosis carries when the row holds
                                          # ([ on {node}]: the cause's node, left out when unknown)
      - quality: confirmed               # a row without `when` always holds: the last row
    tests:                                # input lines (a logs layout) and what is expected
      - name: ...
        job: {state: CANCELLED}           # job.json fields over the relations' tests' default
        input: {slurm-77.out: '...'}
        expect: {quality: likely}         # or {culprits: [gpu03]}

A culprits row names a finder (engine/culprits.py) instead of a quality: `by: failed_nodes`; with
`or_next: true` the next row is read when the finder names nobody; a row with a note and no `by`
only adds its note.  The outcome policy is read instead of the other three when no line names a
cause: its rows give `outcome: {category: ..., quality: ...}` (the domain is the category's), with
conditions on the job's state and on what its events show (`any:` an event matcher that some event
must hold for), and may name a finder of engine/outcome.py (`by: hang_suspect`): a row whose finder
finds nothing decides without culprits, or with `or_next: true` lets the next row decide; a
row's note is filled from what its finder found; `second_look: true` lets the second look (the
fallback rules, engine/pipeline.py) overturn what the row gives: the job is read again with them, and
what that reading decides stands.  A drain row gives `drain: true` or `false`: whether
the culprit nodes are drained (engine/policy.drains_of: never on a fault a user's lines report,
whatever a site's table says).  A systemic row gives `systemic: false`, or `spread: {nodes: 3, within: 300}`:
systemic when the candidate causes of the chosen one's category stand on at least that many nodes
within that many seconds of it (all of them when it has no time).  The first row that decides,
decides.

The bundled `rules/policies/<name>.yaml`; a site rule folder's `policies/<name>.yaml` replaces it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from slurm_attrib import vocab
from slurm_attrib.errors import RuleError
from slurm_attrib.paths import bundled_dir
from slurm_attrib.ruleset import relations
from slurm_attrib.ruleset.cache import cached, code_digest
from slurm_attrib.ruleset.relations import EventMatch, KnownCategory, Strict

POLICIES_FOLDER = "policies"  # inside each rule folder
POLICIES = ("systemic", "culprits", "quality", "drain", "outcome")  # one file each; the first four in this order, once a cause is chosen
QUALITIES = ("confirmed", "likely", "ambiguous", "insufficient")
Quality = Literal["confirmed", "likely", "ambiguous", "insufficient"]


class When(Strict):
    primary: EventMatch | None = None
    rivals: bool | None = None
    systemic: bool | None = None
    culprits: bool | None = None
    job_started: bool | None = None
    job_state: list[str] = []  # Slurm's state is one of these
    quality: list[Quality] = []  # the verdict's (drain)
    job_state_not: list[str] = []
    job_nodes: int | None = Field(default=None, ge=0)
    text: str | None = None
    other_causes: bool | None = None  # another cause, of another domain, that the chosen one does not explain
    blamed_peer: bool | None = None  # the job's lines blame one peer node (engine/culprits.blamed_peer)
    any: EventMatch | None = None  # some event of the job holds for this matcher
    said_it_finished: bool | None = None  # an event of engine/checks.COMPLETION_MARKERS (a positive end)
    every_rival: EventMatch | None = None  # every rival of the cause holds for this matcher (none: holds)

    @field_validator("text")
    @classmethod
    def _runs_on_re2(cls, value: str | None) -> str | None:
        if value is not None:
            from slurm_attrib.ruleset.spec import compiled

            try:
                compiled(value)
            except Exception as exc:  # noqa: BLE001 - RE2's own one-line reason
                raise ValueError(f"text: RE2 cannot run it: {exc}") from None
        return value


class Spread(Strict):
    """systemic: the chosen cause's category on at least `nodes` nodes within `within` seconds of it."""

    nodes: int = Field(ge=2)
    within: float = Field(gt=0)


class Outcome(Strict):
    """outcome: how a job no line names a cause for ended (its domain is the category's)."""

    category: KnownCategory
    quality: Quality


class Row(Strict):
    name: str = ""
    when: When | None = None  # none: the row always holds
    quality: Quality | None = None
    outcome: Outcome | None = None  # outcome: what the row gives
    drain: bool | None = None  # drain: whether the culprits are drained
    by: str | None = None  # culprits: the finder (engine/culprits.py FINDERS)
    or_next: bool = False  # culprits: when the finder names nobody, the next row is read
    systemic: bool | None = None  # systemic: what the row gives ...
    spread: Spread | None = None  # ... or how far the cause must spread to be systemic
    note: str = ""
    # outcome: a verdict the second look's rules may overturn (rules/fallback.yaml): the job is read
    # again with them, and what that reading decides stands (a lead it finds wins)
    second_look: bool = False

    @property
    def decides(self) -> bool:
        return (self.quality is not None or (self.by is not None and not self.or_next)
                or self.systemic is not None or self.spread is not None or (self.outcome is not None and self.by is None)
                or self.drain is not None)


class PolicyTest(Strict):
    name: str
    job: dict[str, Any] = {}
    input: dict[str, str] = Field(min_length=1)
    expect: dict[Literal["quality", "culprits", "systemic", "drain", "outcome"], Any]  # outcome: "category/quality"; drain: nodes


class Policy(Strict):
    id: str = Field(pattern=r"^pol\.[a-z0-9_]+$")
    decides: Literal["systemic", "culprits", "quality", "drain", "outcome"]
    description: str
    references: list[str] = Field(min_length=1)
    rows: list[Row] = Field(min_length=1)
    tests: list[PolicyTest] = Field(min_length=2)

    @model_validator(mode="after")
    def _rows_fit_and_one_always_decides(self) -> "Policy":
        for row in self.rows:
            gives_systemic = row.systemic is not None or row.spread is not None
            if (row.drain is not None) != (self.decides == "drain") or (
                    self.decides == "drain" and (row.quality is not None or row.by is not None or gives_systemic or row.note)):
                raise ValueError(f"row {row.name!r}: only a drain row, and every one, gives `drain` (true or false), nothing else")
            if (row.outcome is not None) != (self.decides == "outcome"):
                raise ValueError(f"row {row.name!r}: only an outcome row, and every one, gives an `outcome`")
            if self.decides == "outcome" and (row.quality is not None or gives_systemic):
                raise ValueError(f"row {row.name!r}: an outcome row gives an `outcome`, maybe a finder (`by`) and a `note`")
            if self.decides == "quality" and (row.quality is None or row.by is not None or row.or_next or gives_systemic):
                raise ValueError(f"row {row.name!r}: a quality row gives a `quality`, no `by`")
            if self.decides == "culprits" and (row.quality is not None or gives_systemic or (row.by is None and not row.note)):
                raise ValueError(f"row {row.name!r}: a culprits row names a finder (`by`) or adds a `note`")
            if self.decides == "systemic" and ((row.systemic is None) == (row.spread is None) or row.quality is not None
                                               or row.by is not None or row.or_next or row.note):
                raise ValueError(f"row {row.name!r}: a systemic row gives `systemic` or a `spread`, nothing else")
        last = self.rows[-1]
        if last.when is not None or not last.decides:
            raise ValueError("the last row has no `when` and decides: some row always decides")
        if any(row.when is None and row.decides for row in self.rows[:-1]):
            raise ValueError("only the last row may decide without `when` (the rows after it could never decide)")
        if any(set(t.expect) != {self.decides} for t in self.tests):
            raise ValueError(f"each test expects the {self.decides}")
        return self


@cache
def load_policy(name: str, rule_dirs: tuple[Path, ...] = ()) -> Policy:
    """rules/policies/<name>.yaml, or the last site folder's file of that name.  Cached like the
    rule pack, keyed by the file and this module (a warm cache reads no YAML)."""
    path = next((p for p in (Path(d) / POLICIES_FOLDER / f"{name}.yaml" for d in reversed(rule_dirs)) if p.is_file()),
                bundled_dir("rules") / POLICIES_FOLDER / f"{name}.yaml")
    return cached(f"policy-{name}", [path], lambda: _read_policy(path), lambda value: isinstance(value, Policy), code=_CODE)


# The modules whose classes a cached policy holds or that validated it: a change to any of them
# (an upgrade that adds a matcher key) builds the policy again, never unpickles an older shape.
MODEL_FILES = (Path(__file__), Path(relations.__file__), Path(vocab.__file__))
_CODE = code_digest(list(MODEL_FILES))


def _read_policy(path: Path) -> Policy:
    from slurm_attrib.ruleset.loader import yaml_and_loader

    yaml, loader = yaml_and_loader()
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
        return Policy.model_validate(raw)
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise RuleError(f"{path}: {' '.join(str(exc).split())}") from None
