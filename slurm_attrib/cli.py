"""`sattrib`: the command line.  Options, calls into the library, rendering; nothing else."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# pydantic looks for plugins in every installed distribution's entry points when it builds the
# first model (~25 ms of each run); the command line uses none.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import click  # noqa: E402

from slurm_attrib import __version__  # noqa: E402
from slurm_attrib.errors import SattribError  # noqa: E402

SAMPLES = Path(__file__).resolve().parent / "samples"


class Group(click.Group):
    """Turns expected errors into one line on stderr and exit 2 (no traceback)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except SattribError as error:
            if os.environ.get("SATTRIB_DEBUG"):
                raise
            for line in str(error).splitlines() or ["error"]:
                click.echo(f"sattrib: {line}", err=True)
            sys.exit(2)
        except (KeyboardInterrupt, click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as error:  # a bug: still one line, the traceback on request
            if isinstance(error, BrokenPipeError) and _stdout_reader_gone():
                _end_for_a_gone_reader()
            if os.environ.get("SATTRIB_DEBUG"):
                raise
            click.echo(f"sattrib: internal error: {type(error).__name__}: {error} (SATTRIB_DEBUG=1 shows the traceback)", err=True)
            sys.exit(1)


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (`sattrib rules list | head`), as
    opposed to another pipe or socket that broke (a webhook's, a connector's: those are errors)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no poll, or stdout closed or replaced
        return False


def _end_for_a_gone_reader():
    """No error to report when the reader stopped reading.  Python would flush stdout again at exit
    and fail the same way: stdout goes to /dev/null, and the exit status is a shell's for a tool
    that SIGPIPE ended."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(128 + 13)


@click.group(cls=Group)
@click.version_option(__version__, prog_name="sattrib")
def main() -> None:
    """Failure attribution for distributed GPU jobs on Slurm."""


def _rule_dirs_option(function):
    return click.option(
        "--rules",
        "rule_dirs",
        multiple=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="Extra rule folder (repeatable); its rules add to or replace the bundled ones.",
    )(function)


def _emit(text: str, output: Path | None) -> None:
    """stdout, or `output` replaced whole (a reader never sees half a diagnosis); a device, pipe
    or socket (`--output /dev/null`, a FIFO) is written to, never renamed over."""
    if output is None:
        click.echo(text, nl=False)
        return
    if output.exists() and not output.is_file():
        with open(output, "w", encoding="utf-8") as stream:
            stream.write(text)
        return
    temporary = output.with_name(f".{output.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(output)


def render_json(diagnosis) -> str:
    """The diagnosis as `sattrib analyze` prints it (the case tests dump theirs the same way)."""
    return json.dumps(diagnosis.model_dump(mode="json"), indent=2, sort_keys=False) + "\n"


def _render(diagnosis, fmt: str) -> str:
    if fmt == "json":
        return render_json(diagnosis)
    if fmt == "html":
        from slurm_attrib.render import render_html

        return render_html(diagnosis)
    if fmt == "markdown":
        from slurm_attrib.render import render_markdown

        return render_markdown(diagnosis)
    from slurm_attrib.render import render_text

    return render_text(diagnosis)


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["json", "text", "html", "markdown"]), default="json", show_default=True,
              help="html: one self-contained page (inline CSS and SVG timeline) to open from disk or attach to a ticket; "
                   "markdown: for pasting into a GitHub issue.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here instead of stdout.")
@_rule_dirs_option
@click.option("--connectors/--no-connectors", default=True, show_default=True,
              help="Also read the Loki and Prometheus connectors set in the config (loki.url, prometheus.url) "
                   "for the job's nodes and window; without such settings there is nothing to read.")
def analyze(path: Path, fmt: str, output: Path | None, rule_dirs: tuple[Path, ...], connectors: bool) -> None:
    """Diagnose the job whose evidence is in PATH: a logs layout or capture directory, or one
    job-level file such as slurm-123.out."""
    from slurm_attrib.engine.pipeline import analyze_path

    config = None
    if connectors:
        from slurm_attrib.commands import _config

        config = _config()
    diagnosis = analyze_path(path, rule_dirs, config)
    _emit(_render(diagnosis, fmt), output)


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@_rule_dirs_option
def explain(path: Path, rule_dirs: tuple[Path, ...]) -> None:
    """How the diagnosis of PATH was reached: the cause, the relations (rules/relations) that
    changed it or tied its symptoms to it, what they set aside or promoted, and the policy rows
    (rules/policies) that decided the rest."""
    from slurm_attrib.engine.pipeline import judge_path
    from slurm_attrib.proof import proof_tree

    diagnosis, events = judge_path(path, rule_dirs)
    click.echo(proof_tree(diagnosis, events), nl=False)


@main.command()
@click.option("--format", "fmt", type=click.Choice(["json", "text"]), default="text", show_default=True)
def demo(fmt: str) -> None:
    """Diagnose the bundled sample job (8 nodes, 64 ranks, an Xid 79); no Slurm needed."""
    from slurm_attrib.engine.pipeline import analyze_path

    sample = SAMPLES / "demo"
    click.echo(f"# sattrib analyze {sample}", err=True)
    _emit(_render(analyze_path(sample), fmt), None)


@main.command()
def schema() -> None:
    """Print the JSON Schema of the diagnosis."""
    from slurm_attrib.model import Diagnosis

    click.echo(json.dumps(Diagnosis.model_json_schema(), indent=2, sort_keys=True))


@main.group()
def rules() -> None:
    """The rule pack: list it, check its examples."""


@rules.command("list")
@_rule_dirs_option
def rules_list(rule_dirs: tuple[Path, ...]) -> None:
    """One line per rule: id, role, domain/category, title."""
    from slurm_attrib.ruleset.loader import load_rules

    for rule in load_rules(list(rule_dirs)):
        event = rule.event
        target = f"{event.domain}/{event.category}" if event.category else event.domain
        click.echo(f"{rule.id:40} {event.role:8} {target:36} {rule.title}")


@rules.command("test")
@_rule_dirs_option
def rules_test(rule_dirs: tuple[Path, ...]) -> None:
    """Check every rule against its own examples, the wordings catalogue, and every relation and
    policy against its own tests (rules/relations, rules/policies); exit 1 on any failure."""
    from slurm_attrib.ruleset.loader import load_rules
    from slurm_attrib.ruleset.selftest import check_rules
    from slurm_attrib.ruleset.wordings import check_catalogue

    loaded = load_rules(list(rule_dirs))
    failures = check_rules(loaded)
    for failure in failures:
        click.echo(str(failure))
    examples = sum(len(r.examples.match) + len(r.examples.no_match) for r in loaded)
    click.echo(f"{len(loaded)} rules, {examples} examples: {len(failures)} failed")
    wordings, uncovered = check_catalogue(loaded)
    for problem in uncovered:
        click.echo(f"UNCOVERED {problem}")
    click.echo(f"{wordings} catalogued wordings: {len(uncovered)} not covered as stated")
    relation_failures = _test_relations(tuple(rule_dirs))
    policy_failures = _test_policies(tuple(rule_dirs))
    if failures or uncovered or relation_failures or policy_failures:
        sys.exit(1)


def _test_relations(rule_dirs: tuple[Path, ...]) -> list:
    from slurm_attrib.engine.relate import relations
    from slurm_attrib.engine.relation_tests import check_relation

    loaded = relations(rule_dirs)
    failures = [failure for relation in loaded for failure in check_relation(relation, rule_dirs)]
    for failure in failures:
        click.echo(str(failure))
    click.echo(f"{len(loaded)} relations, {sum(len(r.tests) for r in loaded)} tests: {len(failures)} failed")
    return failures


def _test_policies(rule_dirs: tuple[Path, ...]) -> list:
    from slurm_attrib.engine.relation_tests import check_policy
    from slurm_attrib.ruleset.policies import POLICIES, load_policy

    loaded = [load_policy(name, rule_dirs) for name in POLICIES]
    failures = [failure for policy in loaded for failure in check_policy(policy, rule_dirs)]
    for failure in failures:
        click.echo(str(failure))
    rows = sum(len(p.rows) for p in loaded)
    click.echo(f"{len(loaded)} policies ({rows} rows), {sum(len(p.tests) for p in loaded)} tests: {len(failures)} failed")
    return failures


@main.command()
@click.argument("scenario", required=False)
@click.argument("out", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--nodes", default=8, show_default=True, help="Nodes in the simulated job.")
@click.option("--ranks-per-node", default=8, show_default=True)
@click.option("--seed", default=0, show_default=True)
def simulate(scenario: str | None, out: Path | None, nodes: int, ranks_per_node: int, seed: int) -> None:
    """Write a simulated job (logs layout) with known ground truth; no arguments lists scenarios."""
    from slurm_attrib import simulate as simulator

    if scenario is None or out is None:
        for name, spec in simulator.SCENARIOS.items():
            click.echo(f"{name:24} {spec.description}")
        return
    if scenario not in simulator.SCENARIOS:
        raise SattribError(f"unknown scenario {scenario!r}; 'sattrib simulate' lists them")
    try:
        truth = simulator.write_scenario(scenario, out, nodes=nodes, ranks_per_node=ranks_per_node, seed=seed)
    except ValueError as error:
        raise SattribError(str(error)) from None
    click.echo(json.dumps({k: v for k, v in vars(truth).items() if k != "alternatives"}, indent=2))


@main.command("install-hooks")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
def install_hooks(dest: Path) -> None:
    """Write the Prolog, Epilog and EpilogSlurmctld wrappers into DEST, bound to this Python."""
    from slurm_attrib.capture.install import install

    for path in install(dest):
        click.echo(path)


# Controller-side commands (show, report, drain, undrain, analyze-job): slurm_attrib/commands.py
from slurm_attrib.commands import register  # noqa: E402

register(main)


if __name__ == "__main__":  # pragma: no cover
    main()
