"""The second kind of rule: relations between events, the judgement's decisions as data.

An event rule turns a line into an event; a relation decides what events mean together.  Four
kinds, after Alertmanager's inhibit rules and Sigma's correlation rules:

    id: sup.outside_job_window        # dotted, immutable: sup. / agg. / rel. / org.
    kind: suppress                    # suppress | aggregate | explains | origin
    description: ...
    status: stable
    references: [https://...]
    # suppress: targets the check holds for lose their weight (demote only)
    target: {role: [cause, symptom, context], timed: true}
    check: {outside_job_window: {}}   # one named check (engine/checks.py) and its parameters
    set: {role: context}              # role (symptom, context) and/or strength: never raised
    note: outside_window              # the notes key the check's reason is kept under
    says: after the job completed     # optional: the reason kept, instead of the check's own
    after: [sup.recovered_storage_outage]  # optional: suppressions whose notes this one reads;
                                      # it reads the events once they applied (a later round);
                                      # after an origin relation: once the roots are ranked
    # aggregate: groups of events that together mean more than each (a count that promotes)
    events: {type: [host_memory_ce], role: [context], not_noted: [outside_window]}
                                      # matcher keys: rule, type, not_type, role, domain, category,
                                      # not_category, kind, strength (a list), trusted, timed, placed (has a
                                      # node), fallback (a
                                      # second-look lead), present (fields it has), noted,
                                      # not_noted, unnoted (carries no notes at all), fields (allowed values; null: absent),
                                      # not_fields (values it must not have), chosen (the cause
                                      # the ranking chose: an explains relation whose cause is
                                      # `chosen: true` runs once it is, the link stratum)
    group_by: [node]
    same: [pci]                       # optional: fields all of a group share (one GPU of the node)
    distinct: pid                     # optional: count the group's distinct values of this field
    at_least: 5                       # lines, a collapsed event's repeats included (or distinct values)
    only_if: [job_not_completed]      # checks on the job as a whole (aggregate and suppress)
    promote: {role: cause, category: host_hardware_other, strength: 1}
                                      # the category brings its domain; also `which:` (a matcher:
                                      # the group's first event it holds for is promoted) and
                                      # `clear:` (notes keys whose reason the promotion ends),
                                      # `keeps_reading: true` (the event's former reading stands
                                      # beside the promotion: ambiguous, listed as an alternative)
    note: inferred                    # kept with the text of `says`, which may name {count}, the
    says: '{count} corrected memory-error reports on {node}: a failing DIMM'
                                      # group's fields and the promoted event's fields
    last_resort: 2                    # read only when the judgement found no cause (its last inferences),
                                      # in tiers: tier 1 first, tier 2 only when tier 1 promoted nothing
                                      # (a pattern that says what went wrong before how the job ended);
                                      # within a tier the order does not matter. 0 (default): not last resort
    check: {repeated_ranks: {}}       # optional: one named group check (engine/checks.py): the group
                                      # promotes only when it holds; it may narrow the events promoted
                                      # and add values `says` may name
    yields_to_leads: false            # true: the fallback rules' leads (second look) outrank it
    # explains: an effect with an edge from a cause is its symptom
    cause: {type: [gpu_xid], role: [cause]}
    effect: {type: [gpu_xid], role: [symptom]}
    scope: [node]                     # what cause and effect must share: job, node, gpu, file,
                                      # category
    check: {same_burst: {silence: 180}}
    note: wrapper                     # optional: a notes key the effect gets, with `says`
    cause_set: {role: cause, strength: 2, time_from: effect}
                                      # optional: what the cause of an edge that explains its
                                      # effect becomes (a context line that says why: the origin;
                                      # `category:` with its domain, for a line whose rule names none);
                                      # time_from: an untimed cause takes the effect's time;
                                      # strength_from: effect (at least the effect's strength)
    copies: [what, jobid, step, at]   # optional: the edge also reaches every event of the effect's
                                      # type with the same values of these fields (the same line
                                      # copied into another log: slurmstepd's banner in slurmd.log)
    # origin (rank the roots): the first notice is the origin when no other cause may precede it
    notices:                          # which events are notices; the first reading that holds
      - {match: {type: [agent_signal], fields: {signal: [SIGHUP]}}, category: app_killed_signal}
      - {match: {type: [termination_notice]}}   # no category: the event's own
    prefer: {type: [termination_notice]}  # at the first notice's time (its file, SKEW), one this
                                      # holds for wins (it says why the job was ended)
    unless: {domain: [scheduler]}     # another cause this holds for: no origin (it decides)
    keeps: [{trusted: true, domain: [gpu, network, host]}]  # causes the origin leaves alone; every
                                      # other cause becomes its symptom (explained_by the origin)
    hints: {app_killed_signal: ...}   # category of the origin: its notes' `hint`
    note: termination                 # with `says`, on the origin
    tests:                            # input lines and what the relation decided (see below)
      - name: ...
        input: {gpu03/dmesg.txt: '...'}
        expect: {decided: ['gpu.xid@gpu03']}   # rule@node of each event it changed; [] = never fires

The evaluator (engine/relate.py) runs them in strata: suppress, then aggregate, then explains,
then origin and the suppressions after it (last-resort aggregates once the rest of the judgement
found no cause, tier by tier); within a kind (a tier) the order
of relations does not change the result: every relation reads the events as they entered its
stratum, and the changes apply after all have been read (an effect two edges reach is explained by
the earlier cause).  Every
change records the relation's id on the event (`decided_by`), which the diagnosis and `sattrib
explain` show.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from slurm_attrib.errors import RuleError
from slurm_attrib.paths import bundled_dir
from slurm_attrib.ruleset.cache import cached, code_digest
from slurm_attrib import vocab
from slurm_attrib.vocab import CATEGORIES_BY_DOMAIN, DOMAIN_OF_CATEGORY, SOURCE_KINDS

RELATIONS_FOLDER = "relations"  # inside each rule folder
ROLES = ("cause", "symptom", "context", "marker")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _known_category(value: str | None) -> str | None:
    if value is not None and value not in DOMAIN_OF_CATEGORY:
        raise ValueError(f"unknown category {value!r}")
    return value


KnownCategory = Annotated[str | None, AfterValidator(_known_category)]
KNOWN_VALUES = {"domain": CATEGORIES_BY_DOMAIN, "category": DOMAIN_OF_CATEGORY, "kind": SOURCE_KINDS}


class EventMatch(Strict):
    """Which events: every given key must hold (a list: any of its values)."""

    rule: list[str] = []
    type: list[str] = []
    not_type: list[str] = []  # of none of these types
    role: list[Literal["cause", "symptom", "context", "marker"]] = []
    domain: list[str] = []
    category: list[str] = []
    not_category: list[str | None] = []  # of none of these categories (null: with no category)
    kind: list[str] = []
    strength: list[int] = []
    trusted: bool | None = None
    timed: bool | None = None  # has a wall-clock time
    placed: bool | None = None  # has a node
    fallback: bool | None = None  # a second-look lead (rules/fallback.yaml)
    present: list[str] = []  # has each of these fields
    noted: list[str] = []  # carries every one of these notes keys
    not_noted: list[str] = []  # carries none of them
    unnoted: bool | None = None  # carries no notes at all (nothing read the line as more than it says)
    fields: dict[str, list[Any]] = {}  # field name: allowed values (null: the field is absent)
    not_fields: dict[str, list[Any]] = {}  # field name: values it must not have
    chosen: bool | None = None  # the cause the ranking chose (explains relations of the link stratum)

    @field_validator("domain", "category", "kind")
    @classmethod
    def _known_values(cls, value: list[str], info: ValidationInfo) -> list[str]:
        unknown = sorted(set(value) - set(KNOWN_VALUES[info.field_name]))
        if unknown:
            raise ValueError(f"unknown {info.field_name} value(s) {unknown}")
        return value

    @field_validator("not_category")
    @classmethod
    def _known_categories(cls, value: list[str | None]) -> list[str | None]:
        unknown = sorted(v for v in value if v is not None and v not in DOMAIN_OF_CATEGORY)
        if unknown:
            raise ValueError(f"unknown not_category value(s) {unknown}")
        return value


class Effect(Strict):
    role: Literal["cause", "symptom", "context", "marker"] | None = None
    category: KnownCategory = None  # its domain comes with it
    strength: int | None = Field(default=None, ge=1, le=3)
    which: EventMatch | None = None  # aggregate: the group's first event this holds for (default: its first)
    clear: list[str] = []  # aggregate: notes keys whose reason the promotion ends (no_culprit)
    # aggregate: the promotion is one reading of two: the event keeps its former category (notes
    # `other_reading`), the diagnosis is `ambiguous` and lists that reading as an alternative
    keeps_reading: bool = False


class CauseSet(Strict):
    """explains: what the cause of an edge that explains its effect becomes (the line that names
    why is the origin, though its rule alone calls it context)."""

    role: Literal["cause"] | None = None
    category: KnownCategory = None  # its domain comes with it (a line whose rule names none)
    strength: int | None = Field(default=None, ge=1, le=3)
    time_from: Literal["effect"] | None = None  # an untimed cause takes its effect's time (inherited)
    strength_from: Literal["effect"] | None = None  # the cause takes its effect's strength when higher


class Reading(Strict):
    """origin: which events are termination notices, and the category each stands for."""

    match: EventMatch
    category: KnownCategory = None  # null: the event's own category (none: no notice)


class RelationTest(Strict):
    name: str
    job: dict[str, Any] = {}  # job.json fields over the default (FAILED, 13:00-13:30 UTC, gpu01-04)
    input: dict[str, str] = Field(min_length=1)  # logs-layout path: content
    expect: dict[Literal["decided"], list[str]]


class Relation(Strict):
    id: str = Field(pattern=r"^(sup|agg|rel|org)\.[a-z0-9_]+$")
    kind: Literal["suppress", "aggregate", "explains", "origin"]
    description: str
    status: Literal["stable", "test", "experimental"] = "stable"
    references: list[str] = Field(min_length=1)
    # suppress
    target: EventMatch | None = None
    set: Effect | None = None
    # aggregate
    events: EventMatch | None = None
    group_by: list[str] = []
    same: list[str] = []  # fields every event of a group shares (else the group promotes nothing)
    distinct: str = ""  # count the group's distinct values of this field, not its lines
    at_least: int = Field(default=1, ge=1)
    only_if: list[str] = []
    # read only when no event is a cause after the whole judgement: its last inferences, in tiers
    # (1 first; the next only when the tiers before promoted nothing); 0: not a last resort
    last_resort: int = Field(default=0, ge=0, strict=True)
    promote: Effect | None = None
    says: str = ""
    # an inference from how the job ended (a failed task): a lead the fallback rules' second look
    # finds (engine/pipeline.py) outranks it, as it says why the task failed
    yields_to_leads: bool = False
    # explains
    cause: EventMatch | None = None
    effect: EventMatch | None = None
    scope: list[Literal["job", "node", "gpu", "file", "category"]] = []
    cause_set: CauseSet | None = None
    # the edge also reaches every event of the effect's type with the same values of these fields
    # (the same line copied into another log, e.g. slurmstepd's banner in the slurmd log)
    copies: list[str] = []
    # origin: the notices (first reading that holds), the one preferred at the first's time, the
    # causes that leave the order to the rest of the judgement, the causes the origin leaves alone
    notices: list[Reading] = []
    prefer: EventMatch | None = None
    unless: EventMatch | None = None
    keeps: list[EventMatch] = []
    hints: dict[str, str] = {}  # category of the origin: the hint noted with it
    # suppress: relations whose decisions this one reads (their notes); it runs once they applied
    after: list[str] = []
    # suppress, explains and aggregate: one named check and its parameters
    check: dict[str, dict[str, Any]] = {}
    note: str = ""
    tests: list[RelationTest] = Field(min_length=2)

    @model_validator(mode="after")
    def _parts_fit_the_kind(self) -> "Relation":
        wanted = {"suppress": ("target", "set"), "aggregate": ("events", "promote"), "explains": ("cause", "effect"),
                  "origin": ("notices",)}
        for part in wanted[self.kind]:
            if not getattr(self, part):
                raise ValueError(f"a {self.kind} relation needs `{part}`")
        if len(self.check) > 1:
            raise ValueError("one named check per relation")
        if self.kind == "suppress" and not self.check and not (self.only_if and self.says):
            raise ValueError("a suppress relation needs a `check`, or `only_if` and `says` (a fact of the whole job)")
        if self.kind == "explains" and not self.check:
            raise ValueError("an explains relation needs a `check`: how a cause and its effect lie together "
                             "(nearest_lines, near_in_time, any_time, same_burst, ...)")
        if self.only_if and self.kind not in ("suppress", "aggregate"):
            raise ValueError("only a suppress or aggregate relation reads `only_if`")
        if self.kind == "suppress" and (self.set.category is not None or self.set.role in ("cause", "marker")
                                        or self.set.which is not None or self.set.clear or self.set.keeps_reading):
            raise ValueError("a suppress relation only demotes: `set` takes role symptom or context, and strength")
        if (self.cause_set is not None or self.copies) and self.kind != "explains":
            raise ValueError("only an explains relation has `cause_set` or `copies`")
        if self.after and self.kind != "suppress":
            raise ValueError("only a suppress relation runs `after` others")
        if (self.notices or self.prefer or self.unless or self.keeps or self.hints) and self.kind != "origin":
            raise ValueError("only an origin relation has `notices`, `prefer`, `unless`, `keeps` or `hints`")
        if self.kind in ("suppress", "aggregate", "origin") and not self.note:
            raise ValueError(f"a {self.kind} relation names the `note` key its reason is kept under")
        if not any(not t.expect["decided"] for t in self.tests) or not any(t.expect["decided"] for t in self.tests):
            raise ValueError("tests need one case where the relation decides and one where it must not")
        return self


def relation_files(rule_dirs: list[Path]) -> list[Path]:
    files: list[Path] = []
    for folder in rule_dirs:
        files.extend(sorted((Path(folder) / RELATIONS_FOLDER).glob("*.yaml")))
    return files


def load_relations(extra_dirs: list[Path] | None = None) -> list[Relation]:
    """The bundled relations and those of the site's rule folders (each file: YAML documents
    separated by `---`), in id order; a site relation with a bundled id replaces it.  Cached like
    the rule pack, keyed by these files and this module."""
    files = relation_files([bundled_dir("rules"), *(extra_dirs or [])])
    return cached("relations", files, lambda: _read_relations(files), lambda value: isinstance(value, list), code=_CODE)


def _read_relations(files: list[Path]) -> list[Relation]:
    from slurm_attrib.ruleset.loader import yaml_and_loader

    yaml, loader = yaml_and_loader()
    by_id: dict[str, Relation] = {}
    for path in files:
        try:
            documents = [d for d in yaml.load_all(path.read_text(encoding="utf-8"), Loader=loader) if d is not None]
        except (OSError, yaml.YAMLError) as exc:
            raise RuleError(f"{path}: {' '.join(str(exc).split())}") from None
        for raw in documents:
            try:
                relation = Relation.model_validate(raw)
            except ValueError as exc:
                where = raw.get("id", "?") if isinstance(raw, dict) else "?"
                raise RuleError(f"{path}: relation {where}: {exc}") from None
            by_id[relation.id] = relation
    return [by_id[key] for key in sorted(by_id)]


# The code a cached list of relations is built with: this module's classes, and the vocabulary
# that validated their domains and categories (a change to either builds them again).
_CODE = code_digest([Path(__file__), Path(vocab.__file__)])
