"""The relations evaluator: rules/relations/*.yaml applied to a job's events, in strata.

1. suppress: targets a check holds for lose weight (role, strength); demotion only.  A relation
   that reads what others decided names them in `after` and runs in a later round.
2. aggregate: groups that reach a count (and hold for the relation's group check) promote their
   first event (read after suppression); last-resort aggregates run apart, once the rest of the
   judgement found no cause, tier by tier (the first tier that promotes decides).
3. explains: edges from causes to effects; an effect with an edge is its cause's symptom.
   The explains relations whose cause is `chosen: true` run apart, once the ranking chose the
   cause (the link stratum: engine/diagnose.py).
4. rank the roots: an origin relation makes the first termination notice the origin when no
   other cause may have come before it, and the causes after it its symptoms; then the suppress
   relations `after` it (Slurm's job state overrules what it promoted).

Within a stratum (a round) every relation reads the events as they entered it, and the changes apply after
all have been read: the order of relations does not change the result (tests/test_relations.py
runs every case with the relations reversed).

Each change appends the relation's id to the event's `decided_by`; suppress and aggregate keep
their reason under the relation's `note` key, as the passes they replace did.
"""

from __future__ import annotations

import heapq
import re
from array import array
from collections import defaultdict
from functools import cache, cached_property
from pathlib import Path
from typing import Callable

from slurm_attrib.engine.checks import AGGREGATE_CHECKS, EXPLAINS_CHECKS, JOB_CHECKS, SUPPRESS_CHECKS, JudgeContext, check_problem
from slurm_attrib.engine.correlate import SKEW
from slurm_attrib.engine.events import Event
from slurm_attrib.errors import RuleError
from slurm_attrib.ruleset.relations import Effect, EventMatch, Reading, Relation, load_relations
from slurm_attrib.vocab import DOMAIN_OF_CATEGORY, OTHER_READING


@cache
def relations(rule_dirs: tuple[Path, ...] = ()) -> tuple[Relation, ...]:
    """The relations in force, their checks verified (once per process)."""
    loaded = tuple(load_relations(list(rule_dirs)))
    for relation in loaded:
        problem = check_problem(relation.kind, relation.check, relation.only_if)
        if problem:
            raise RuleError(f"relation {relation.id}: {problem}")
    suppress_rounds(loaded)  # `after` names known suppress or origin relations, without a cycle
    suppress_rounds(loaded, after_roots=True)
    return loaded


def matches(match: EventMatch, event: Event) -> bool:
    return (
        (match.chosen is None or event.chosen == match.chosen)  # first: one event of a job is chosen
        and (not match.rule or event.rule_id in match.rule)
        and (not match.type or event.type in match.type)
        and event.type not in match.not_type
        and (not match.role or event.role in match.role)
        and (not match.domain or event.domain in match.domain)
        and (not match.category or event.category in match.category)
        and event.category not in match.not_category
        and (not match.kind or event.kind in match.kind)
        and (not match.strength or event.strength in match.strength)
        and (match.fallback is None or event.fallback == match.fallback)
        and (match.trusted is None or event.trusted == match.trusted)
        and (match.timed is None or (event.time is not None) == match.timed)
        and (match.placed is None or (event.node is not None) == match.placed)
        # the lists are empty for most matchers: not even a generator is built for them
        and (not match.present or all(event.fields.get(name) is not None for name in match.present))
        and (not match.noted or all(key in event.notes for key in match.noted))
        and (not match.not_noted or not any(key in event.notes for key in match.not_noted))
        and (match.unnoted is None or (not event.notes) == match.unnoted)
        and (not match.fields or all(event.fields.get(name) in allowed for name, allowed in match.fields.items()))
        and (not match.not_fields or not any(event.fields.get(name) in barred for name, barred in match.not_fields.items()))
    )


class _Candidates:
    """The events a matcher can hold for, by the types, rules or roles it names (relations read every
    event of a 32,768-rank job once each otherwise), in the events' own order.  Roles are those the
    events had when indexed: while an index is in use only _demote changes a role, and only down
    DEMOTION, so a role's candidates are the events that had it or a stronger one.  Each index is
    built when first asked for."""

    def __init__(self, events: list[Event]):
        self.events = events

    def _index(self, key: Callable[[Event], str]) -> dict[str, array]:
        """Per key, the positions of its events, ascending; machine ints, not int objects (the
        three indexes of a 4,096-node job held 230,000 of those, 9 MB)."""
        found: dict[str, array] = {}
        for position, event in enumerate(self.events):
            positions = found.get(name := key(event))
            if positions is None:
                positions = found[name] = array("q")
            positions.append(position)
        return found

    @cached_property
    def by_type(self) -> dict[str, array]:
        return self._index(lambda e: e.type)

    @cached_property
    def by_rule(self) -> dict[str, array]:
        return self._index(lambda e: e.rule_id)

    @cached_property
    def by_role(self) -> dict[str, array]:
        return self._index(lambda e: e.role)

    @cached_property
    def chosen(self) -> array:
        return array("q", (position for position, event in enumerate(self.events) if event.chosen))

    def of(self, *matchers: EventMatch) -> list[Event]:
        runs: list[array] = []  # each ascending; a position may be in several (one per matcher at most)
        for match in matchers:
            if match.chosen:
                runs.append(self.chosen)
            elif match.rule:
                runs += [self.by_rule[rule] for rule in match.rule if rule in self.by_rule]
            elif match.type:
                runs += [self.by_type[kind] for kind in match.type if kind in self.by_type]
            elif match.role and set(match.role) <= set(DEMOTION):
                weakest = min(DEMOTION.index(role) for role in match.role)
                runs += [self.by_role[role] for role in DEMOTION[weakest:] if role in self.by_role]
            else:
                return self.events
        events, last = self.events, -1
        if len(runs) == 1:
            return [events[position] for position in runs[0]]
        found = []
        for position in heapq.merge(*runs):  # in the events' order, each once, without a set of them all
            if position != last:
                found.append(events[position])
                last = position
        return found


def _apply(effect: Effect, event: Event, relation: Relation) -> None:
    if effect.role is not None:
        event.role = effect.role
    if effect.keeps_reading and event.category is not None:
        event.note(OTHER_READING, event.category)
    if effect.category is not None:
        event.domain, event.category = DOMAIN_OF_CATEGORY[effect.category], effect.category
    if effect.strength is not None:
        event.strength = effect.strength
    for key in effect.clear:
        event.drop_note(key)
    event.decide(relation.id)


def suppress(events: list[Event], context: JudgeContext, rule_dirs: tuple[Path, ...] = ()) -> None:
    """In rounds: a relation runs in the round after those it is `after`.  Within a round every
    relation reads the events as they entered it, and the demotions apply after all have been
    read, so their order does not matter."""
    _suppress_in_rounds(events, context, suppress_rounds(relations(rule_dirs)))


def _suppress_in_rounds(events: list[Event], context: JudgeContext, rounds: list[list[Relation]]) -> None:
    candidates = _Candidates(events)
    for round_ in rounds:
        context.memo.clear()  # what the checks computed over the events held for the last round
        decisions = []
        for relation in round_:
            if not all(JOB_CHECKS[name](context) for name in relation.only_if):
                continue
            (name, parameters), = relation.check.items() or [(None, {})]
            for event in candidates.of(relation.target):
                if matches(relation.target, event):
                    reason = SUPPRESS_CHECKS[name](event, context, **parameters) if name else relation.says
                    if reason is not None:
                        decisions.append((relation, event, reason))
        for relation, event, reason in decisions:
            event.note(relation.note, relation.says or reason)
            _demote(relation.set, event, relation)
    context.memo.clear()


def suppress_rounds(loaded: tuple[Relation, ...], after_roots: bool = False) -> list[list[Relation]]:
    """The suppress relations by round: 0 for one after none, else one more than the latest of those
    it is after (each known, a suppress or origin relation, no cycle: checked when the relations load).
    after_roots: those after an origin relation instead (and after those), which run once the
    roots are ranked."""
    origins = {r.id for r in loaded if r.kind == "origin"}
    suppressions = [r for r in loaded if r.kind == "suppress"]
    late: set[str] = set()
    while True:  # after an origin, or after a suppression that is
        more = {r.id for r in suppressions if r.id not in late and set(r.after) & (origins | late)}
        if not more:
            break
        late |= more
    by_id = {r.id: r for r in suppressions if (r.id in late) == after_roots}
    known = origins | {r.id for r in suppressions}
    level: dict[str, int] = {}

    def level_of(relation: Relation, seen: tuple[str, ...] = ()) -> int:
        if relation.id in seen:
            raise RuleError(f"relation {relation.id}: `after` makes a cycle ({' -> '.join(seen + (relation.id,))})")
        if relation.id not in level:
            for other in relation.after:
                if other not in known:
                    raise RuleError(f"relation {relation.id}: `after` names {other!r}, no suppress or origin relation")
            level[relation.id] = 1 + max((level_of(by_id[o], seen + (relation.id,)) for o in relation.after if o in by_id),
                                         default=-1)
        return level[relation.id]

    rounds: dict[int, list[Relation]] = defaultdict(list)
    for relation in by_id.values():
        rounds[level_of(relation)].append(relation)
    return [rounds[k] for k in sorted(rounds)]


def rank_roots(events: list[Event], context: JudgeContext, rule_dirs: tuple[Path, ...] = ()) -> None:
    """The origin relations, each reading the events as they entered the stratum, then the
    suppress relations after them."""
    loaded = relations(rule_dirs)
    candidates = _Candidates(events)
    origins = [_origin(r, events, candidates) for r in loaded if r.kind == "origin"]
    for relation, first, category, demoted in (o for o in origins if o is not None):
        first.role, first.domain, first.category = "cause", DOMAIN_OF_CATEGORY[category], category
        first.note(relation.note, relation.says)
        if category in relation.hints:
            first.note("hint", relation.hints[category])
        first.decide(relation.id)
        for event in demoted:
            event.role, event.explained_by = "symptom", first
            event.decide(relation.id)
    _suppress_in_rounds(events, context, suppress_rounds(loaded, after_roots=True))
    context.memo.clear()


def _origin(relation: Relation, events: list[Event], candidates: _Candidates) -> tuple[Relation, Event, str, list[Event]] | None:
    """The first notice (one saying why preferred at its time), its category and the causes it
    explains; None when another cause `unless` holds for, or one that may have come before it."""
    notices = [(e, c) for e in candidates.of(*(r.match for r in relation.notices))
               for c in [_reading(relation.notices, e)] if c is not None]
    if not notices:
        return None
    first = min(notices, key=lambda notice: notice[0].sort_key)
    first = _preferred(relation.prefer, first, notices)
    causes = [e for e in events if e.role == "cause" and e is not first[0]]
    if any((relation.unless is not None and matches(relation.unless, e)) or _maybe_before(e, first[0]) for e in causes):
        return None
    demoted = [e for e in causes if not any(matches(kept, e) for kept in relation.keeps)]
    return relation, first[0], first[1], demoted


def _reading(readings: list[Reading], event: Event) -> str | None:
    for reading in readings:
        if matches(reading.match, event):
            return reading.category or event.category
    return None


def _preferred(prefer: EventMatch | None, first: tuple[Event, str], notices: list[tuple[Event, str]]) -> tuple[Event, str]:
    """A notice `prefer` holds for, printed at the first one's time in its file, wins over it: srun's
    `Job step aborted` printed just before `*** JOB ... CANCELLED ... DUE TO JOB REQUEUE ***` is
    the same ending, and the banner gives its reason."""
    event = first[0]
    if prefer is None or matches(prefer, event):
        return first
    same_time = [n for n in notices if matches(prefer, n[0]) and n[0].order[0] == event.order[0]
                 and (n[0].time is None or event.time is None or abs(n[0].time - event.time) <= SKEW)]
    return min(same_time, key=lambda n: n[0].order) if same_time else first


def _maybe_before(event: Event, notice: Event) -> bool:
    """Whether an event may have come before the notice (unknown order counts as maybe)."""
    if event.order[0] == notice.order[0] and (event.time is None or notice.time is None or event.time_inherited):
        return event.order < notice.order
    if event.time is None or notice.time is None:
        return True
    return event.time < notice.time + (0.0 if event.time_inherited or notice.time_inherited else SKEW)


DEMOTION = ("context", "symptom", "cause")  # weakest first


def _demote(effect: Effect, event: Event, relation: Relation) -> None:
    """Lower the event's role and strength to the relation's, never raise them: two suppressions
    of one event give the same result in either order."""
    if effect.role is not None and event.role in DEMOTION and DEMOTION.index(effect.role) < DEMOTION.index(event.role):
        event.role = effect.role
    if effect.strength is not None:
        event.strength = min(event.strength, effect.strength)
    event.decide(relation.id)


def aggregate(events: list[Event], context: JudgeContext, rule_dirs: tuple[Path, ...] = (),
              last_resort: int = 0) -> list[Event]:
    """The events the aggregate relations of this last-resort tier (0: none) promoted (each its
    group's first).  Every relation reads the events as they entered the stratum; the promotions
    apply after all have been read."""
    promotions = []
    candidates = _Candidates(events)
    for relation in relations(rule_dirs):
        if (relation.kind != "aggregate" or relation.last_resort != last_resort
                or not all(JOB_CHECKS[name](context) for name in relation.only_if)):
            continue
        promotions += _promotions(relation, candidates.of(relation.events), context)
    for relation, first, says in promotions:
        _apply(relation.promote, first, relation)
        first.note(relation.note, says)
    return [first for _, first, _ in promotions]


def last_resort_causes(events: list[Event], context: JudgeContext, rule_dirs: tuple[Path, ...] = ()) -> list[Event]:
    """With no cause after the whole judgement: the last-resort aggregates tier by tier, the first
    tier that promotes anything decides (a pattern that says what went wrong before how the job
    ended)."""
    for tier in sorted({r.last_resort for r in relations(rule_dirs) if r.kind == "aggregate" and r.last_resort}):
        promoted = aggregate(events, context, rule_dirs, last_resort=tier)
        if promoted:
            return promoted
    return []


def _lines_of(members: list[Event]) -> int:
    """The lines the events stand for.  A kernel message is in a node's dmesg and in its journal
    or syslog alike: of a node's system logs, only the one that holds most of them counts."""
    lines = 0
    per_log: dict[tuple[str | None, str], int] = defaultdict(int)
    for event in members:
        if event.kind in ("kernel", "syslog"):
            per_log[(event.node, event.source)] += event.repeats
        else:
            lines += event.repeats
    most: dict[str | None, int] = {}
    for (node, _source), count in per_log.items():
        most[node] = max(most.get(node, 0), count)
    return lines + sum(most.values())


def _promotions(relation: Relation, events: list[Event], context: JudgeContext) -> list[tuple[Relation, Event, str]]:
    groups: dict[tuple, list[Event]] = defaultdict(list)
    for event in events:
        if matches(relation.events, event):
            groups[tuple(_group_value(event, key) for key in relation.group_by)].append(event)
    found = []
    for key, members in groups.items():
        if any(len({e.fields.get(name) for e in members}) > 1 for name in relation.same):
            continue
        if relation.distinct:
            count = len({e.fields[relation.distinct] for e in members if e.fields.get(relation.distinct)})
        else:
            count = _lines_of(members)
        checked: dict = {}
        if relation.check:
            (name, parameters), = relation.check.items()
            held = AGGREGATE_CHECKS[name](members, context, **parameters)
            if held is None:
                continue
            members, checked = held
        which = relation.promote.which
        eligible = [e for e in members if which is None or matches(which, e)]
        if count < relation.at_least or not eligible:
            continue
        first = min(eligible, key=lambda e: e.sort_key)
        values = {**first.fields, **{name: members[0].fields.get(name) for name in relation.same},
                  **dict(zip(relation.group_by, key)), "count": count, **checked}
        found.append((relation, first, _says(relation, values)))
    return found


def explain(events: list[Event], context: JudgeContext, rule_dirs: tuple[Path, ...] = (), link: bool = False) -> None:
    """Every explains relation reads the events as they entered the stratum; the edges apply after
    all have been read.  An effect several edges reach is explained by the earliest cause (then
    the relation id), and records every relation that reached it.  link: the relations whose
    cause is the chosen one (`chosen: true`), once the ranking chose it; else the others."""
    first: dict[int, tuple[Event, Event, Relation]] = {}  # per effect, its first edge ...
    more: dict[int, list[tuple[Event, Event, Relation]]] = {}  # ... and all, when several reach it
    candidates = _Candidates(events)
    for relation in relations(rule_dirs):
        if relation.kind != "explains" or bool(relation.cause.chosen) != link:
            continue
        for cause, effect in _edges(relation, candidates.of(relation.cause, relation.effect)):
            edge, key = (cause, effect, relation), id(effect)
            if key not in first:
                first[key] = edge
            else:
                more.setdefault(key, [first[key]]).append(edge)
    for key, edge in first.items():
        edges = more.get(key)
        if edges is not None:
            edges.sort(key=lambda e: (e[0].sort_key, e[2].id))
            edge = edges[0]
        cause, effect, chosen = edge
        if chosen.cause_set is not None:
            _set_cause(chosen, cause, effect)
        effect.explained_by = cause
        if effect.role == "cause":  # an effect with an incoming edge is its cause's symptom
            effect.role = "symptom"
        reached = [chosen] if edges is None else sorted({e[2].id: e[2] for e in edges}.values(), key=lambda r: r.id)
        for relation in reached:
            if relation.note:
                effect.note(relation.note, relation.says)
            effect.decide(relation.id)


def _set_cause(relation: Relation, cause: Event, effect: Event) -> None:
    """The relation's `cause_set` on the cause of an edge that explains its effect."""
    change = relation.cause_set
    if change.role is not None:
        cause.role = change.role
    if change.category is not None:
        cause.domain, cause.category = DOMAIN_OF_CATEGORY[change.category], change.category
    if change.strength is not None:
        cause.strength = change.strength
    if change.strength_from == "effect":
        cause.strength = max(cause.strength, effect.strength)
    if change.time_from == "effect" and cause.time is None and effect.time is not None:
        cause.time, cause.time_inherited = effect.time, True
    if relation.id not in cause.decided_by:
        cause.decide(relation.id)


def _edges(relation: Relation, events: list[Event]) -> list[tuple[Event, Event]]:
    (name, parameters), = relation.check.items()
    # Each event's matchers read once: the checks ask again for every pair they weigh.
    causes = {id(e) for e in events if matches(relation.cause, e)}
    effects = {id(e) for e in events if matches(relation.effect, e)}
    is_cause: Callable[[Event], bool] = lambda e: id(e) in causes
    is_effect: Callable[[Event], bool] = lambda e: id(e) in effects
    groups: dict[tuple, list[Event]] = defaultdict(list)
    for event in events:
        if id(event) in causes or id(event) in effects or _among(relation, event):
            groups[tuple(_group_value(event, key) for key in relation.scope)].append(event)
    found = []
    for members in groups.values():
        members.sort(key=lambda e: e.sort_key)
        found += EXPLAINS_CHECKS[name](members, is_cause, is_effect, **parameters)
    return found + _copies(relation, events, found)


def _copies(relation: Relation, events: list[Event], edges: list[tuple[Event, Event]]) -> list[tuple[Event, Event]]:
    """Edges from each edge's cause to the copies of its effect: events of its type with the same
    values of the relation's `copies` fields."""
    if not relation.copies:
        return []
    reached = {id(effect) for _, effect in edges}
    found = []
    for cause, effect in edges:
        for other in events:
            if (id(other) not in reached and other.type == effect.type
                    and all(other.fields.get(k) == effect.fields.get(k) for k in relation.copies)):
                reached.add(id(other))
                found.append((cause, other))
    return found


def _among(relation: Relation, event: Event) -> bool:
    """Events an explains check orders besides causes and effects: those of the same types (an Xid
    that is neither still marks time in its burst)."""
    types = set(relation.cause.type) | set(relation.effect.type)
    return bool(types) and event.type in types


def _group_value(event: Event, key: str):
    if key == "job":
        return None
    if key == "node":
        return event.node
    if key == "gpu":
        return (event.node, event.fields.get("pci"))
    if key == "file":
        return event.source
    if key == "category":
        return event.category
    return event.fields.get(key)


_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")


def _says(relation: Relation, values: dict) -> str:
    """The relation's `says` with {count}, the group's values and the promoted event's fields."""
    return fill(relation.says, values)


def fill(template: str, values: dict) -> str:
    """The template with its {names} filled; a [bracketed part] is left out when a value it names
    is unknown ('{count} reports[ on {node}]')."""
    def part(found: re.Match) -> str:
        names = re.findall(r"\{(\w+)\}", found.group(1))
        return "" if any(values.get(name) is None for name in names) else found.group(1)

    return _OPTIONAL.sub(part, template).format_map(values)
