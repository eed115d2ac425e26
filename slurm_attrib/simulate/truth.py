"""What a correct analysis of a simulated job says: the ground truth and the scenario record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurm_attrib.simulate.job import Job

HARD = ("confirmed", "likely")  # trusted hardware/kernel evidence of a single fault



@dataclass(frozen=True)
class Expectation:
    """One acceptable reading of a job."""

    domain: str
    category: str
    culprit_nodes: tuple[str, ...]
    allowed_qualities: tuple[str, ...]
    drain_nodes: tuple[str, ...]


@dataclass
class GroundTruth:
    """What a correct analysis of a simulated job says (plus, optionally, tolerated alternatives)."""

    scenario: str
    domain: str
    category: str
    culprit_nodes: list[str]
    allowed_qualities: tuple[str, ...]
    drain_nodes: list[str]
    description: str = ""
    job_id: str = ""
    nodes: list[str] = field(default_factory=list)
    fault_time: str | None = None  # ISO 8601 UTC of the injected fault, when there is one
    alternatives: list[Expectation] = field(default_factory=list)

    def expectations(self) -> list[Expectation]:
        primary = Expectation(
            self.domain, self.category, tuple(self.culprit_nodes), self.allowed_qualities, tuple(self.drain_nodes)
        )
        return [primary, *self.alternatives]

    def problems(self, diagnosis: Any) -> list[str]:
        """Differences between a diagnosis (pydantic Diagnosis or its dict) and this truth; [] if it fits."""
        d = diagnosis.model_dump() if hasattr(diagnosis, "model_dump") else dict(diagnosis)
        got_drain = sorted({x["node"] for x in d.get("drain", [])})
        best: list[str] | None = None
        for exp in self.expectations():
            issues = []
            if (d.get("domain"), d.get("category")) != (exp.domain, exp.category):
                issues.append(f"domain/category {d.get('domain')}/{d.get('category')} != {exp.domain}/{exp.category}")
            if set(d.get("culprit_nodes", [])) != set(exp.culprit_nodes):
                issues.append(f"culprit_nodes {sorted(d.get('culprit_nodes', []))} != {sorted(exp.culprit_nodes)}")
            if d.get("quality") not in exp.allowed_qualities:
                issues.append(f"quality {d.get('quality')} not in {list(exp.allowed_qualities)}")
            if got_drain != sorted(exp.drain_nodes):
                issues.append(f"drain {got_drain} != {sorted(exp.drain_nodes)}")
            if not issues:
                return []
            if best is None:
                best = issues
        return best or []

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "domain": self.domain,
            "category": self.category,
            "culprit_nodes": self.culprit_nodes,
            "allowed_qualities": list(self.allowed_qualities),
            "drain_nodes": self.drain_nodes,
            "description": self.description,
            "fault_time": self.fault_time,
        }


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    build: Callable[["Job"], GroundTruth]
    min_nodes: int = 2
