"""Run the relations' own tests (`tests:` in rules/relations/*.yaml): each test's lines, in a logs
layout with its job.json, go through the whole analysis; the events the relation changed, as
`rule@node`, must be exactly those expected (none: it must not fire).  A policy's tests
(rules/policies/*.yaml) expect what the diagnosis says of what the policy decides.  Used by
`sattrib rules test` and the test suite."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_attrib.ruleset.policies import Policy, PolicyTest
from slurm_attrib.ruleset.relations import Relation, RelationTest

if TYPE_CHECKING:
    from slurm_attrib.engine.events import Event
    from slurm_attrib.model import Diagnosis

DEFAULT_JOB = {"job_id": "77", "state": "FAILED", "exit_code": "1:0", "start": "2026-12-02T13:00:00Z",
               "end": "2026-12-02T13:30:00Z", "nodes": ["gpu01", "gpu02", "gpu03", "gpu04"]}


@dataclass(frozen=True)
class RelationFailure:
    relation_id: str
    test: str
    expected: list[str]
    got: list[str]

    def __str__(self) -> str:
        return f"FAIL {self.relation_id} › {self.test}: expected {self.expected}, got {self.got}"


def judged(test: RelationTest | PolicyTest, rule_dirs: tuple[Path, ...] = ()) -> tuple[Diagnosis, list[Event]]:
    """The diagnosis and events of a test's input, in a logs layout with its job.json."""
    from slurm_attrib.engine.pipeline import judge_path

    with tempfile.TemporaryDirectory(prefix="sattrib-relation-") as folder:
        root = Path(folder)
        (root / "job.json").write_text(json.dumps({**DEFAULT_JOB, **test.job}))
        for rel, text in test.input.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return judge_path(root, rule_dirs)


def decided(relation: Relation, test: RelationTest, rule_dirs: tuple[Path, ...] = ()) -> list[str]:
    """`rule@node` of each event the relation changed on the test's input, sorted."""
    _, events = judged(test, rule_dirs)
    return sorted(f"{e.rule_id}@{e.node}" for e in events if relation.id in e.decided_by)


def check_relation(relation: Relation, rule_dirs: tuple[Path, ...] = ()) -> list[RelationFailure]:
    failures = []
    for test in relation.tests:
        got, expected = decided(relation, test, rule_dirs), sorted(test.expect["decided"])
        if got != expected:
            failures.append(RelationFailure(relation.id, test.name, expected, got))
    return failures


def check_policy(policy: Policy, rule_dirs: tuple[Path, ...] = ()) -> list[RelationFailure]:
    """A policy's tests (rules/policies): what each test's diagnosis says of what the policy decides
    (its quality, its culprit nodes)."""
    failures = []
    for test in policy.tests:
        got, expected = policy_outcome(policy, judged(test, rule_dirs)[0]), expected_outcome(policy, test)
        if got != expected:
            failures.append(RelationFailure(policy.id, test.name, expected, got))
    return failures


def policy_outcome(policy: Policy, diagnosis: Diagnosis) -> list:
    """What a diagnosis says of what the policy decides: its culprit nodes (sorted), [its quality],
    [whether it is systemic] or ["category/quality"]."""
    if policy.decides == "culprits":
        return sorted(diagnosis.culprit_nodes)
    if policy.decides == "outcome":
        return [f"{diagnosis.category}/{diagnosis.quality}"]
    if policy.decides == "drain":
        return sorted(d.node for d in diagnosis.drain)
    return [diagnosis.systemic] if policy.decides == "systemic" else [diagnosis.quality]


def expected_outcome(policy: Policy, test: PolicyTest) -> list[str]:
    """What the test expects, in policy_outcome's form."""
    expected = test.expect[policy.decides]
    return sorted(expected) if isinstance(expected, list) else [expected]
