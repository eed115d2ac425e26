"""Policies: the judgement's last decisions as small tables, read first row first.

Once the cause is chosen, how sure the diagnosis is (quality) is a policy: a list of rows, each a
condition on the verdict and what follows from it; the first row whose condition holds decides.

    id: pol.quality
    description: ...
    references: [https://...]
    rows:
      - name: a second-look lead is never more than a lead
        when:
          primary: {fallback: true}       # a relation matcher (ruleset/relations.py EventMatch) on the cause
          rivals: true                    # independent candidates timing cannot order
          systemic: true                  # one cause on many nodes (a shared component)
          culprits: false                 # whether the verdict names a node
          job_started: true               # the job's record gives its start
          job_state_not: [CANCELLED]      # Slurm's state is none of these (unknown counts as none)
          text: '(?i)\\bmight\\b'           # RE2, searched in the cause's line
        quality: insufficient
        note: '...'                       # optional: a note the diagnosis carries when the row decides
      - quality: confirmed               # a row without `when` always holds: the last row
    tests:                                # input lines (a logs layout) and the quality expected
      - name: ...
        job: {state: CANCELLED}           # job.json fields over the relations' tests' default
        input: {slurm-77.out: '...'}
        expect: {quality: likely}

The bundled `rules/policies/<name>.yaml`; a site rule folder's `policies/<name>.yaml` replaces it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from slurm_attrib.errors import RuleError
from slurm_attrib.paths import bundled_dir
from slurm_attrib.ruleset.relations import EventMatch, Strict

POLICIES_FOLDER = "policies"  # inside each rule folder
POLICIES = ("quality",)  # the policies the judgement reads, one file each
QUALITIES = ("confirmed", "likely", "ambiguous", "insufficient")


class When(Strict):
    primary: EventMatch | None = None
    rivals: bool | None = None
    systemic: bool | None = None
    culprits: bool | None = None
    job_started: bool | None = None
    job_state_not: list[str] = []
    text: str | None = None

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


class Row(Strict):
    name: str = ""
    when: When | None = None  # none: the row always holds
    quality: Literal["confirmed", "likely", "ambiguous", "insufficient"]
    note: str = ""


class PolicyTest(Strict):
    name: str
    job: dict[str, Any] = {}
    input: dict[str, str] = Field(min_length=1)
    expect: dict[Literal["quality"], Literal["confirmed", "likely", "ambiguous", "insufficient"]]


class Policy(Strict):
    id: str = Field(pattern=r"^pol\.[a-z0-9_]+$")
    description: str
    references: list[str] = Field(min_length=1)
    rows: list[Row] = Field(min_length=1)
    tests: list[PolicyTest] = Field(min_length=2)

    @model_validator(mode="after")
    def _ends_with_a_row_that_always_holds(self) -> "Policy":
        if self.rows[-1].when is not None:
            raise ValueError("the last row has no `when`: some row always decides")
        if any(row.when is None for row in self.rows[:-1]):
            raise ValueError("only the last row may go without `when` (the rows after it could never decide)")
        return self


@cache
def load_policy(name: str, rule_dirs: tuple[Path, ...] = ()) -> Policy:
    """rules/policies/<name>.yaml, or the last site folder's file of that name."""
    from slurm_attrib.ruleset.loader import yaml_and_loader

    path = next((p for p in (Path(d) / POLICIES_FOLDER / f"{name}.yaml" for d in reversed(rule_dirs)) if p.is_file()),
                bundled_dir("rules") / POLICIES_FOLDER / f"{name}.yaml")
    yaml, loader = yaml_and_loader()
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
        return Policy.model_validate(raw)
    except (OSError, yaml.YAMLError, ValueError) as exc:
        raise RuleError(f"{path}: {' '.join(str(exc).split())}") from None
