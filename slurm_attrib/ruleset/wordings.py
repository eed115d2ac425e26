"""The wordings catalogue: failure messages mined from the code that prints them.

`rules/wordings/<project>.yaml` lists, per project (NCCL, PyTorch, the kernel, Slurm ...), the
format strings that report a failure, with the file and versions they come from, one concrete
line that the format prints, and what the rule pack must make of it:

    project: NCCL
    repository: https://github.com/NVIDIA/nccl
    mined: [v2.12.12-1, v2.19.3-1, v2.28.3-1]      # the tags or commits that were read
    wordings:
      - format: 'NET/IB : Got completion from peer %s with error %d, opcode %d, len %d, vendor err %d'
        file: src/transport/net_ib.cc
        versions: v2.12.12-1 .. v2.19.3-1
        kind: app                                   # the file kind the line shows up in
        example: 'gpu-a:1:2 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion ...'
        rule: nccl.ib_completion_error              # the rule that must match the example
        role: cause                                 # optional: role after the rule's hook
        category: transport_error                   # optional: category after the hook
      - format: 'NET/IB : Using [%d]%s:%d/%s'
        ...
        ignore: informational, not a failure        # instead of `rule`: why no rule is needed

`check_catalogue` verifies that each example really is printed by its format (the format turned
into a regex) and that the named rule matches it with the stated role and category, so a
catalogued wording without a rule fails the test suite.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from slurm_attrib.paths import bundled_dir
from slurm_attrib.ruleset.loader import load_yaml_file
from slurm_attrib.ruleset.scanner import Scanner
from slurm_attrib.ruleset.spec import Rule
from slurm_attrib.vocab import DOMAIN_OF_CATEGORY, ROLES, SOURCE_KINDS


class Wording(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str = Field(min_length=4)
    file: str
    versions: str
    kind: str = "app"
    example: str
    rule: str | None = None
    role: str | None = None
    category: str | None = None
    ignore: str | None = None
    note: str = ""

    @model_validator(mode="after")
    def _rule_or_ignore(self) -> "Wording":
        if (self.rule is None) == (self.ignore is None):
            raise ValueError("a wording names either the `rule` that covers it or why it is ignored")
        if self.kind not in SOURCE_KINDS:
            raise ValueError(f"kind {self.kind!r} is not one of {', '.join(SOURCE_KINDS)}")
        if self.role is not None and self.role not in ROLES:
            raise ValueError(f"role {self.role!r} is not one of {', '.join(ROLES)}")
        if self.category is not None and self.category not in DOMAIN_OF_CATEGORY:
            raise ValueError(f"category {self.category!r} is not a contract category")
        return self


class Catalogue(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    project: str
    repository: str
    mined: list[str] = Field(min_length=1)
    wordings: list[Wording] = Field(min_length=1)


def catalogue_files(folder: Path | None = None) -> list[Path]:
    folder = folder or bundled_dir("rules") / "wordings"
    return sorted(folder.glob("*.yaml")) if folder.is_dir() else []


def load_catalogue(path: Path) -> Catalogue:
    return Catalogue.model_validate(load_yaml_file(path))


# printf conversions (C, the kernel's %pX extensions, Slurm's %m), Python/fmt `{...}`, and `...`
# for text a format builds in pieces (c10::str, string concatenation).
_PLACEHOLDER = re.compile(
    r"%%"
    r"|%[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|L|q|j|z|Z|t|PRI\w+)?"
    r"(?:p[A-Za-z]\w*|[diouxXeEfFgGaAcspnm])"
    r"|\{[^{}]*\}"
    r"|\.\.\."
)


def format_regex(fmt: str) -> re.Pattern:
    """A regex that finds what `fmt` prints: literal text as is, every placeholder as any text."""
    fmt = fmt.strip()
    while fmt.endswith("\\n"):  # a trailing newline escape, as the source spells it
        fmt = fmt[:-2].rstrip()
    parts, position = [], 0
    for found in _PLACEHOLDER.finditer(fmt):
        parts.append(re.escape(fmt[position : found.start()]))
        parts.append("%" if found.group() == "%%" else ".*?")
        position = found.end()
    parts.append(re.escape(fmt[position:]))
    pattern = re.sub(r"(?:\\\s)+", r"\\s+", "".join(parts))  # whitespace runs: printers pad and wrap
    return re.compile(pattern)


@dataclass(frozen=True)
class WordingProblem:
    file: str
    format: str
    problem: str

    def __str__(self) -> str:
        return f"{self.file}: {self.format[:90]!r}: {self.problem}"


def check_wording(wording: Wording, rules_by_id: dict[str, Rule], scanner: Scanner) -> str | None:
    """None when the wording is covered as stated, else what is wrong."""
    if not format_regex(wording.format).search(wording.example):
        return "the example is not printed by this format"
    if wording.ignore is not None:
        return None
    if wording.rule not in rules_by_id:
        return f"rule {wording.rule} does not exist"
    hits = [h for h in scanner.match_text(wording.example, wording.kind) if h.rule.id == wording.rule]
    if not hits:
        return f"rule {wording.rule} does not match the example (as {wording.kind})"
    hit = hits[0]
    if wording.role is not None and hit.role != wording.role:
        return f"rule {wording.rule} gives role {hit.role}, the catalogue says {wording.role}"
    if wording.category is not None and hit.category != wording.category:
        return f"rule {wording.rule} gives category {hit.category}, the catalogue says {wording.category}"
    return None


def check_catalogue(rules: list[Rule], files: list[Path] | None = None) -> tuple[int, list[WordingProblem]]:
    """(number of wordings checked, problems) over every catalogue file."""
    rules_by_id = {r.id: r for r in rules}
    scanner = Scanner(rules, engine="re")
    checked, problems = 0, []
    for path in files if files is not None else catalogue_files():
        catalogue = load_catalogue(path)
        for wording in catalogue.wordings:
            checked += 1
            problem = check_wording(wording, rules_by_id, scanner)
            if problem:
                problems.append(WordingProblem(path.name, wording.format, problem))
    return checked, problems
