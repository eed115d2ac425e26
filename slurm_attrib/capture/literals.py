"""The pre-filter literals: each rule document's `match.contains`, read straight from the YAML.

No rule validation here (that is the analyzer's job, with pydantic): the capture only needs the
literals, `match.ignore_case` and `match.following` (how many lines after a match a rule reads).
Nothing is cached on disk; every epilog reads the rule files afresh.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass
class Literals:
    exact: list[bytes] = field(default_factory=list)  # case-sensitive literals
    folded: list[bytes] = field(default_factory=list)  # ignore_case literals, lower-cased
    following: int = 0  # largest match.following of any rule
    files: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.exact and not self.folded

    def all_literals(self) -> list[bytes]:
        return self.exact + self.folded


def rule_folders(rule_dirs: tuple[str, ...] | list[str]) -> list[str]:
    from slurm_attrib.paths import bundled_dir

    return [str(bundled_dir("rules")), *[str(d) for d in rule_dirs]]


def load_literals(rule_dirs: tuple[str, ...] | list[str] = ()) -> Literals:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    lits = Literals()
    exact: set[bytes] = set()
    folded: set[bytes] = set()
    for folder in rule_folders(rule_dirs):
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".yaml") and not n.startswith("_"))
        except OSError as exc:
            lits.errors.append(f"rule folder {folder}: {exc.strerror or exc}")
            continue
        for name in names:
            path = os.path.join(folder, name)
            try:
                with open(path, encoding="utf-8") as f:
                    documents = list(yaml.load_all(f, Loader=loader))
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                lits.errors.append(f"{path}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
                continue
            lits.files += 1
            for doc in documents:
                match = doc.get("match") if isinstance(doc, dict) else None
                if not isinstance(match, dict) or _second_look_marker(doc):
                    continue
                contains = match.get("contains") or []
                if isinstance(contains, str):
                    contains = [contains]
                ignore_case = bool(match.get("ignore_case"))
                try:
                    lits.following = max(lits.following, min(int(match.get("following") or 0), 40))
                except (TypeError, ValueError):
                    pass
                for literal in contains:
                    if not isinstance(literal, str) or len(literal) < 3:
                        continue
                    data = literal.encode("utf-8")
                    if ignore_case:
                        folded.add(data.lower())
                    else:
                        exact.add(data)
    lits.exact = sorted(exact)
    lits.folded = sorted(folded)
    return lits


def _second_look_marker(doc: dict) -> bool:
    """A fallback rule's marker (training steps reporting a loss, benchmark rows) reads lines that
    fill a job's output: the capture does not keep lines for it."""
    event = doc.get("event")
    return isinstance(event, dict) and bool(event.get("fallback")) and event.get("role") == "marker"
