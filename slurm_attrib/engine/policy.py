"""The policies (rules/policies, ruleset/policies.py) applied to a verdict: the first row whose
condition holds decides (for culprits: the first whose finder, engine/culprits.py, names nodes
or that may not pass on; for the outcome of a job no line names a cause for: the first whose
finder, engine/outcome.py, finds what it looks for or that may not pass on)."""

from __future__ import annotations

from pathlib import Path

from slurm_attrib.engine import outcome
from slurm_attrib.engine.checks import said_it_finished
from slurm_attrib.engine.culprits import FINDERS, CulpritContext, blamed_peer
from slurm_attrib.engine.events import Event
from slurm_attrib.engine.explain import drain_reason
from slurm_attrib.engine.reconcile import job_state
from slurm_attrib.engine.relate import fill, matches
from slurm_attrib.engine.verdict import Verdict
from slurm_attrib.errors import RuleError
from slurm_attrib.ingest.types import Evidence, JobContext
from slurm_attrib.model import Drain
from slurm_attrib.ruleset.policies import Policy, Row, When, load_policy
from slurm_attrib.ruleset.spec import compiled
from slurm_attrib.vocab import DOMAIN_OF_CATEGORY


def systemic_of(verdict: Verdict, candidates: list[Event], job: JobContext, events: list[Event],
                rule_dirs: tuple[Path, ...] = ()) -> bool:
    """What pol.systemic says of the chosen cause: one shared by many nodes (a switch, a filesystem,
    a configuration every rank shares) rather than one node's; `candidates` are the causes the
    ranking chose among."""
    row = _first_row_that_holds("systemic", verdict, job, events, rule_dirs)
    if row.spread is None:
        shared = bool(row.systemic)
    else:
        primary = verdict.primary
        nodes = {c.node for c in candidates if c.category == primary.category and c.node and (
            primary.time is None or (c.time is not None and abs(c.time - primary.time) <= row.spread.within))}
        shared = len(nodes) >= row.spread.nodes
    verdict.rows.append(_named("systemic", row, rule_dirs, "shared" if shared else "not shared"))
    return shared


def quality_row(verdict: Verdict, job: JobContext, events: list[Event], rule_dirs: tuple[Path, ...] = ()) -> Row:
    """The row of pol.quality that decides the verdict's quality (its cause chosen, culprits named)."""
    row = _first_row_that_holds("quality", verdict, job, events, rule_dirs)
    verdict.rows.append(_named("quality", row, rule_dirs, row.quality))
    return row


def _first_row_that_holds(name: str, verdict: Verdict, job: JobContext, events: list[Event],
                          rule_dirs: tuple[Path, ...]) -> Row:
    # the last row of a policy always holds (ruleset/policies.py)
    return next(row for row in policy(name, rule_dirs).rows if holds(row.when, verdict, job, events))


def _named(name: str, row: Row, rule_dirs: tuple[Path, ...], gave: str) -> str:
    """How `sattrib explain` names a row that decided: its policy's id, the row's name, what it gave."""
    return f"{policy(name, rule_dirs).id}: {row.name or 'otherwise'} -> {gave}"


def drains_of(verdict: Verdict, job: JobContext, events: list[Event], rule_dirs: tuple[Path, ...] = ()) -> list[Drain]:
    """The culprit nodes pol.drain says to drain, each for its own fault (the cause's or a rival's),
    never a node outside the job.  The trust floor is code, not the table a site may replace: a
    fault only lines a user could have written report drains nothing (provenance)."""
    faults = [verdict.primary, *verdict.rivals] if verdict.primary is not None else []
    if not faults:
        return []
    if not all(f.trusted for f in faults):
        verdict.rows.append("pol.drain: not read: a fault only lines a user could have written report -> no drain")
        return []
    row = _first_row_that_holds("drain", verdict, job, events, rule_dirs)
    by_node = {e.node: e for e in faults if e.node and (not job.nodes or e.node in job.nodes)}
    drains = [Drain(node=node, reason=drain_reason(by_node[node], job)) for node in verdict.culprits if node in by_node]
    drains = drains if row.drain else []
    verdict.rows.append(_named("drain", row, rule_dirs, ", ".join(d.node for d in drains) or "no drain"))
    return drains


def culprits_of(found: CulpritContext, rule_dirs: tuple[Path, ...] = ()) -> list[str]:
    """The nodes pol.culprits names for the verdict (its cause chosen, rivals and systemic known);
    the notes of the rows read on the way go to the verdict."""
    verdict = found.verdict
    for row in policy("culprits", rule_dirs).rows:
        if not holds(row.when, verdict, found.job, found.events):
            continue
        if row.note:
            verdict.notes.append(fill(row.note, {"node": verdict.primary.node}))
        if row.by is None:
            continue
        nodes = FINDERS[row.by](found)
        if nodes or not row.or_next:
            verdict.rows.append(_named("culprits", row, rule_dirs, ", ".join(nodes) or "no node"))
            return nodes
    return []


def outcome_of(events: list[Event], evidence: Evidence, rule_dirs: tuple[Path, ...] = ()) -> Verdict:
    """What pol.outcome says of a job no line names a cause for: how it ended, from its state and
    its own story (hang dumps, collective timeouts, failing lines, progress, a positive end)."""
    context = outcome.OutcomeContext(events, evidence)
    nothing = Verdict(domain="unknown", category="no_evidence", quality="insufficient")
    for row in policy("outcome", rule_dirs).rows:
        if not holds(row.when, nothing, evidence.job, events):
            continue
        found = outcome.FINDERS[row.by](context) if row.by is not None else outcome.Found()
        if found is None and row.or_next:
            continue
        found = found or outcome.Found()
        verdict = Verdict(domain=DOMAIN_OF_CATEGORY[row.outcome.category], category=row.outcome.category,
                          quality=row.outcome.quality, culprits=found.nodes, hang=found.hang,
                          rows=[_named("outcome", row, rule_dirs, f"{row.outcome.category}/{row.outcome.quality}")],
                          second_look=row.second_look)
        verdict.notes += found.notes
        if row.note:
            verdict.notes.append(fill(row.note, found.values))
        return verdict
    raise AssertionError("the last row of a policy always holds")


def policy(name: str, rule_dirs: tuple[Path, ...] = ()) -> Policy:
    """The policy in force, its finders known."""
    loaded = load_policy(name, tuple(rule_dirs))
    known = outcome.FINDERS if loaded.decides == "outcome" else FINDERS
    unknown = sorted({row.by for row in loaded.rows if row.by is not None} - set(known))
    if unknown:
        raise RuleError(f"policy {loaded.id}: unknown finder(s) {unknown} (known: {', '.join(sorted(known))})")
    return loaded


def holds(when: When | None, verdict: Verdict, job: JobContext, events: list[Event]) -> bool:
    if when is None:
        return True
    primary = verdict.primary
    return (
        (when.primary is None or (primary is not None and matches(when.primary, primary)))
        and (when.rivals is None or bool(verdict.rivals) == when.rivals)
        and (when.systemic is None or verdict.systemic == when.systemic)
        and (when.culprits is None or bool(verdict.culprits) == when.culprits)
        and (when.job_started is None or (job.start is not None) == when.job_started)
        and (job_state(job) not in when.job_state_not)
        and (not when.job_state or job_state(job) in when.job_state)
        and (when.job_nodes is None or len(job.nodes) == when.job_nodes)
        and (when.text is None or (primary is not None and compiled(when.text).search(primary.text) is not None))
        and (when.other_causes is None or _other_causes(primary, events) == when.other_causes)
        and (when.blamed_peer is None or bool(blamed_peer(events, job.nodes)) == when.blamed_peer)
        and (when.any is None or any(matches(when.any, e) for e in events))
        and (when.said_it_finished is None or said_it_finished(events) == when.said_it_finished)
        and (not when.quality or verdict.quality in when.quality)
        and (when.every_rival is None or all(matches(when.every_rival, r) for r in verdict.rivals))
    )


def _other_causes(primary: Event | None, events: list[Event]) -> bool:
    """Another cause, of another domain, that the chosen one does not explain: evidence in the
    bundle that points elsewhere."""
    return primary is not None and any(
        e.role == "cause" and e is not primary and e.explained_by is None and e.domain != primary.domain for e in events)
