"""Check every rule against its own examples (`sattrib rules test`, and the test suite)."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_attrib.ruleset.scanner import Scanner
from slurm_attrib.ruleset.spec import Rule


@dataclass(frozen=True)
class ExampleFailure:
    rule_id: str
    example: str
    problem: str

    def __str__(self) -> str:
        return f"FAIL {self.rule_id} › {self.example[:80]!r}: {self.problem}"


def check_rule(rule: Rule) -> list[ExampleFailure]:
    scanner = Scanner([rule], engine="re")
    failures = []
    for example in rule.examples.match:
        kind = example.kind or rule.sources[0]
        hits = [h for h in scanner.match_text(example.line, kind) if h.lineno == 1]
        if not hits:
            failures.append(ExampleFailure(rule.id, example.line, "expected a match, got none"))
            continue
        got = hits[0].fields
        for name, expected in example.fields.items():
            if got.get(name) != expected:
                failures.append(
                    ExampleFailure(rule.id, example.line, f"field {name}: expected {expected!r}, got {got.get(name)!r}")
                )
    for line in rule.examples.no_match:
        for kind in rule.sources:
            if scanner.match_text(line, kind):
                failures.append(ExampleFailure(rule.id, line, f"matched (as {kind}) but must not"))
                break
    return failures


def check_rules(rules: list[Rule]) -> list[ExampleFailure]:
    return [failure for rule in rules for failure in check_rule(rule)]
