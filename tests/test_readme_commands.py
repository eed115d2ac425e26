"""Every `sattrib` command the README shows, with every option it shows, is run by some test
(issue 21): a test file that names the subcommand as an argument ("show", 'show') also names each
option ("--html"), so a README line no test runs fails here."""

from __future__ import annotations

import re
from pathlib import Path

from slurm_attrib.cli import main

REPO = Path(__file__).resolve().parents[1]
SUBGROUPS = ("rules", "webhooks", "connectors")  # commands whose README lines name a subcommand too


def readme_commands() -> dict[str, set[str]]:
    """Per command the README shows (`show`, `rules test`), the options it shows with it."""
    found: dict[str, set[str]] = {}
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for match in re.finditer(r"\bsattrib ([a-z][a-z-]+)((?: [a-z][a-z-]+)?)([^`\n#]*)", text):
        command, rest = match.group(1), match.group(2) + match.group(3)
        if command not in main.commands:
            continue
        if command in SUBGROUPS and match.group(2).strip():
            command += match.group(2)
        found.setdefault(command, set()).update(re.findall(r"--[a-z][a-z-]+", rest))
    return found


def _runs(test_text: str, command: str) -> bool:
    return all(re.search(r"[\"']%s[\"']" % re.escape(word), test_text) for word in command.split())


def test_every_readme_command_and_option_is_run_by_a_test():
    tests = [p.read_text(encoding="utf-8") for p in (REPO / "tests").rglob("*.py") if p.name != Path(__file__).name]
    commands = readme_commands()
    assert {"analyze", "show", "jobs", "doctor", "drain", "batch", "serve"} <= set(commands)  # the parse found them
    missing = []
    for command, options in sorted(commands.items()):
        running = [text for text in tests if _runs(text, command)]
        if not running:
            missing.append(command)
        missing += [f"{command} {option}" for option in sorted(options)
                    if not any(re.search(r"[\"']%s(?:=|[\"'])" % re.escape(option), text) for text in running)]
    assert not missing, f"README commands no test runs: {missing}"
