"""Load rule files, reporting every problem with its file, rule id and line."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from slurm_attrib.errors import RuleError
from slurm_attrib.paths import bundled_dir
from slurm_attrib.ruleset import spec
from slurm_attrib.ruleset.cache import cached, code_digest
from slurm_attrib.ruleset.spec import Rule


def yaml_and_loader():
    """PyYAML and its safe loader (libyaml's when present: same result, faster), which refuses a
    key twice in one mapping.  Imported only when a YAML file is actually read: with the user's
    cache warm an analysis reads none."""
    import yaml

    return yaml, _unique_keys_loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@cache
def _unique_keys_loader(base: type) -> type:
    """`base` refusing a mapping that holds a key twice.  PyYAML keeps the last value silently, so
    a `---` missing between two rules made one rule of them: the second, and the first was gone
    with no error (a site's rule file as much as ours)."""
    import yaml

    class UniqueKeysLoader(base):
        def construct_mapping(self, node, deep=False):
            seen: dict[str, int] = {}
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    line = key_node.start_mark.line + 1
                    if key_node.value in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"line {line}: key {key_node.value!r} again (first on line "
                            f"{seen[key_node.value]}): a `---` missing between two documents?", key_node.start_mark)
                    seen[key_node.value] = line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeysLoader


def load_yaml_file(path: Path):
    yaml, loader = yaml_and_loader()
    return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)


def _construct(node) -> object:
    """The Python value of one composed YAML document (composed once, for its line numbers too)."""
    loader = yaml_and_loader()[1]("")
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


def pack_version(extra_dirs: list[Path] | None = None) -> str:
    """The rule pack's version: the package version and a digest of every file of the bundled and
    site rule folders (code tables and relations included).  A stored diagnosis made with the same pack version
    would come out the same: `sattrib batch` skips it."""
    import hashlib

    from slurm_attrib import __version__

    digest = hashlib.sha256()
    for folder in [bundled_dir("rules"), *(extra_dirs or [])]:
        for path in sorted([*Path(folder).glob("*.yaml"), *Path(folder).glob("relations/*.yaml")]):
            try:
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
            except OSError:
                digest.update(path.name.encode() + b"\0unreadable\0")
    return f"{__version__}+{digest.hexdigest()[:12]}"


def load_rules(extra_dirs: list[Path] | None = None) -> list[Rule]:
    """The bundled pack plus site folders; a site rule with a bundled id replaces it.

    Validating ~300 rules (their regexes compiled) costs most of a short run's time, so a pack
    validated once is kept in the user's cache (ruleset.cache), keyed by the bytes of every rule
    file and of the code that builds it (_CODE): any change to a file, or a different set of
    files, validates again."""
    folders = [bundled_dir("rules"), *(extra_dirs or [])]
    files = rule_files(folders)
    return cached(
        "rules",
        files,
        lambda: _validate(files),
        lambda rules: isinstance(rules, list) and all(isinstance(r, Rule) for r in rules),
        code=_CODE,
    )


# The code a cached rule pack is built with, taken when it is imported: the classes the pickle
# holds (spec), what they find of their patterns (shapes), the schema that validates them and the
# vocabulary it checks against.  The schema's path is found without importing it: a warm cache
# builds no pydantic model.
_CODE = code_digest([Path(spec.__file__), Path(spec.__file__).with_name("shapes.py"),
                     Path(spec.__file__).with_name("schema.py"), Path(spec.__file__).parent.parent / "vocab.py"])


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
    yaml, safe_loader = yaml_and_loader()
    try:
        text = path.read_text(encoding="utf-8")
        nodes = list(yaml.compose_all(text, Loader=safe_loader))
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
    from pydantic import ValidationError

    from slurm_attrib.ruleset.schema import RuleModel

    rule_id = document.get("id", "?")
    try:
        return RuleModel.model_validate(document).to_rule()
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            where = ".".join(str(part) for part in error["loc"]) or "rule"
            problems.append(f"{path}:{line}: rule {rule_id}: {where}: {error['msg']}")
        return None
