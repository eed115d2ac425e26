"""The pre-filter literals: each rule document's `match.contains`, read straight from the YAML.

No rule validation here (that is the analyzer's job, with pydantic): the capture only needs the
literals, `match.ignore_case`, `match.following` (how many lines after a match a rule reads) and
the rule's `sources`: the analyzer tries a rule only on the kinds of source it names (default:
every kind but metrics), so a source is filtered with the literals of its kind's rules
(`Literals.for_kind`).  The rank and address maps are the marker rules whose regex names a host
and a rank or an IP (NCCL `Init COMPLETE`, `OOB ib0:10.0.0.5<0>`): their lines are kept apart
from the bundle share (capture.sources.KeepBuffer).  Nothing is cached on disk; every epilog
reads the rule files afresh, so whatever the rule pack's `match.contains` says flows in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from slurm_attrib.vocab import SOURCE_KINDS


DEFAULT_KINDS = frozenset(k for k in SOURCE_KINDS if k != "metrics")


@dataclass(frozen=True)
class MapRule:
    """A marker rule that maps ranks or IP addresses to hosts; `key` names the groups (rank, ip)
    that say which rank or address a line maps: the first line of each is the one kept."""

    literals: tuple[bytes, ...]
    regex: str
    key: tuple[str, ...]
    kinds: frozenset[str]


@dataclass
class Literals:
    exact: list[bytes] = field(default_factory=list)  # case-sensitive literals
    folded: list[bytes] = field(default_factory=list)  # ignore_case literals, lower-cased
    following: int = 0  # largest match.following of any rule
    files: int = 0
    errors: list[str] = field(default_factory=list)
    kinds: dict[bytes, frozenset[str]] = field(default_factory=dict)  # literal -> source kinds of its rules
    following_by_kind: dict[str, int] = field(default_factory=dict)
    maps: list[MapRule] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.exact and not self.folded

    def all_literals(self) -> list[bytes]:
        return self.exact + self.folded

    def for_kind(self, kind: str) -> Literals:
        """The literals of the rules that the analyzer tries on a source of this kind."""
        return Literals(
            exact=[lit for lit in self.exact if kind in self.kinds.get(lit, DEFAULT_KINDS)],
            folded=[lit for lit in self.folded if kind in self.kinds.get(lit, DEFAULT_KINDS)],
            following=self.following_by_kind.get(kind, 0),
            files=self.files,
            errors=self.errors,
            kinds=self.kinds,
            following_by_kind=self.following_by_kind,
            maps=[m for m in self.maps if kind in m.kinds],
        )


def rule_folders(rule_dirs: tuple[str, ...] | list[str]) -> list[str]:
    from slurm_attrib.paths import bundled_dir

    return [str(bundled_dir("rules")), *[str(d) for d in rule_dirs]]


def load_literals(rule_dirs: tuple[str, ...] | list[str] = ()) -> Literals:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    lits = Literals()
    exact: set[bytes] = set()
    folded: set[bytes] = set()
    kinds: dict[bytes, set[str]] = {}
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
                if not isinstance(match, dict) or _progress_marker(doc):
                    continue
                contains = match.get("contains") or []
                if isinstance(contains, str):
                    contains = [contains]
                ignore_case = bool(match.get("ignore_case"))
                rule_kinds = _rule_kinds(doc)
                following = _following(match)
                lits.following = max(lits.following, following)
                for kind in rule_kinds:
                    lits.following_by_kind[kind] = max(lits.following_by_kind.get(kind, 0), following)
                found = []
                for literal in contains:
                    if not isinstance(literal, str) or len(literal) < 3:
                        continue
                    data = literal.encode("utf-8")
                    if ignore_case:
                        data = data.lower()
                        folded.add(data)
                    else:
                        exact.add(data)
                    kinds.setdefault(data, set()).update(rule_kinds)
                    found.append(data)
                map_rule = _map_rule(doc, match, tuple(found), rule_kinds)
                if map_rule:
                    lits.maps.append(map_rule)
    lits.exact = sorted(exact)
    lits.folded = sorted(folded)
    lits.kinds = {lit: frozenset(k) for lit, k in kinds.items()}
    return lits


def _rule_kinds(doc: dict) -> frozenset[str]:
    sources = doc.get("sources")
    if isinstance(sources, str):
        sources = [sources]
    if not isinstance(sources, list):
        return DEFAULT_KINDS
    return frozenset(s for s in sources if isinstance(s, str))


def _following(match: dict) -> int:
    try:
        return max(0, min(int(match.get("following") or 0), 40))
    except (TypeError, ValueError):
        return 0


def _map_rule(doc: dict, match: dict, literals: tuple[bytes, ...], kinds: frozenset[str]) -> MapRule | None:
    """A one-line marker rule whose regex names a host and a rank or an IP address."""
    event = doc.get("event")
    regex = match.get("regex")
    if not (isinstance(event, dict) and event.get("role") == "marker" and isinstance(regex, str) and literals):
        return None
    if match.get("ignore_case") or "\\n" in regex or "(?P<host>" not in regex:
        return None
    key = tuple(name for name in ("rank", "ip") if f"(?P<{name}>" in regex)
    return MapRule(literals, regex, key, kinds) if key else None


def _progress_marker(doc: dict) -> bool:
    """A fallback rule's marker (training steps reporting a loss, benchmark rows) and a marker read
    at a file's ends (`event.ends`: progress counts) read lines that fill a job's output: the
    capture does not keep lines for them."""
    event = doc.get("event")
    return (isinstance(event, dict) and event.get("role") == "marker"
            and (bool(event.get("fallback")) or bool(event.get("ends"))))
