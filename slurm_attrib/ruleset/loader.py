"""Load rule files, reporting every problem with its file, rule id and line."""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import tempfile
from pathlib import Path

import yaml
from pydantic import ValidationError

from slurm_attrib.errors import RuleError
from slurm_attrib.paths import bundled_dir
from slurm_attrib.ruleset import spec
from slurm_attrib.ruleset.spec import Rule


SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same result, faster


def _construct(node: yaml.Node) -> object:
    """The Python value of one composed YAML document (composed once, for its line numbers too)."""
    loader = SAFE_LOADER("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


def rule_files(rule_dirs: list[Path]) -> list[Path]:
    """YAML files that hold rules; files starting with '_' hold shared data, not rules."""
    files: list[Path] = []
    for folder in rule_dirs:
        files.extend(p for p in sorted(folder.glob("*.yaml")) if not p.name.startswith("_"))
    return files


def load_rules(extra_dirs: list[Path] | None = None) -> list[Rule]:
    """The bundled pack plus site folders; a site rule with a bundled id replaces it.

    Validating ~300 rules (their regexes compiled) costs most of a short run's time, so a pack
    validated once is kept in the user's cache, keyed by the bytes of every rule file: any
    change to a file, or a different set of files, validates again."""
    folders = [bundled_dir("rules"), *(extra_dirs or [])]
    files = rule_files(folders)
    key = _pack_key(files)
    cached = _read_cache(key) if key else None
    if cached is not None:
        return cached
    rules = _validate(files)
    if key:
        _write_cache(key, rules)
    return rules


CACHE_VARIABLE = "SATTRIB_CACHE_DIR"  # empty: no cache


def _cache_dir() -> Path | None:
    if CACHE_VARIABLE in os.environ:
        value = os.environ[CACHE_VARIABLE].strip()
        return Path(value) if value else None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sattrib"


def _pack_key(files: list[Path]) -> str | None:
    digest = hashlib.sha256()
    try:
        digest.update(Path(spec.__file__).read_bytes())  # the model the pickle holds
        for path in files:
            digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    except OSError:
        return None  # _validate reports the unreadable file
    return digest.hexdigest()[:32]


def _read_cache(key: str) -> list[Rule] | None:
    """The cached pack, only from a file of this user that nobody else can write (it is a pickle)."""
    folder = _cache_dir()
    if folder is None:
        return None
    path = folder / f"rules-{key}.pickle"
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return None
            rules = pickle.load(handle)
    except (OSError, pickle.PickleError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        return None
    return rules if isinstance(rules, list) and all(isinstance(r, Rule) for r in rules) else None


def _write_cache(key: str, rules: list[Rule]) -> None:
    folder = _cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for old in folder.glob("rules-*.pickle"):
            old.unlink(missing_ok=True)  # one pack per user: the last one used
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".rules-")
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(rules, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, folder / f"rules-{key}.pickle")
    except OSError:
        pass  # no cache: the next run validates again


def _validate(files: list[Path]) -> list[Rule]:
    problems: list[str] = []
    by_id: dict[str, Rule] = {}
    for path in files:
        seen_in_file: set[str] = set()
        for line, document in _documents(path, problems):
            rule = _parse_rule(path, line, document, problems)
            if rule is None:
                continue
            if rule.id in seen_in_file:
                problems.append(f"{path}:{line}: rule {rule.id}: duplicate id in the same file")
            seen_in_file.add(rule.id)
            by_id[rule.id] = rule
    if problems:
        raise RuleError("\n".join(problems))
    return [by_id[rule_id] for rule_id in sorted(by_id)]


def _documents(path: Path, problems: list[str]) -> list[tuple[int, dict]]:
    try:
        text = path.read_text(encoding="utf-8")
        nodes = list(yaml.compose_all(text, Loader=SAFE_LOADER))
        documents = [_construct(node) for node in nodes]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        problems.append(f"{path}: cannot read rule file: {str(exc).splitlines()[0]}")
        return []
    result = []
    for node, document in zip(nodes, documents):
        if document is None:
            continue
        line = node.start_mark.line + 1
        if not isinstance(document, dict):
            problems.append(f"{path}:{line}: a rule must be a mapping")
            continue
        result.append((line, document))
    return result


def _parse_rule(path: Path, line: int, document: dict, problems: list[str]) -> Rule | None:
    rule_id = document.get("id", "?")
    try:
        return Rule.model_validate(document)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            where = ".".join(str(part) for part in error["loc"]) or "rule"
            problems.append(f"{path}:{line}: rule {rule_id}: {where}: {error['msg']}")
        return None
