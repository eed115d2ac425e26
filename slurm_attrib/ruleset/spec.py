"""The YAML rule format, and the form the scanner reads it in (plain frozen classes).

One rule turns one log line (or a short block starting at that line) into an event:

    id: gpu.xid                       # dotted, immutable
    title: NVIDIA Xid error
    description: ...
    sources: [kernel, syslog, app]    # file kinds it applies to (default: all)
    match:
      contains: ['NVRM: Xid']         # literal pre-filter: the line holds at least one
      regex: 'NVRM: Xid \\((?:PCI:)?(?P<pci>...)\\): (?P<xid>\\d+)'
      unless: ['regex', ...]          # near misses that must not match
      requires: ['regex', ...]        # the matched line must hold these too, anywhere on it
      capture: ['regex', ...]         # named groups read wherever they are on the matched line
                                      # (a rank printed before or after the message), when present
      following: 0                    # lines after the matched one the regex may also read
    fields: {xid: int, pci: pci}      # casts for named groups (int, float, str, lower, pci)
    event:
      type: gpu_xid
      domain: gpu
      category: gpu_hardware_other
      role: cause                     # cause | symptom | context | marker
      severity: critical
      strength: 3                     # 1 generic .. 3 specific, for ranking causes
      hook: xid                       # optional Python refinement (ruleset/hooks.py)
      decode:                         # optional: a code table decides what the line means
        families: [cuda_runtime, cuda_driver]   # of rules/_codes.yaml
        fields: [cuda_error, msg]     # read in this order: the first value a table knows decides
        note: cuda_error              # notes cuda_error_name, _number, _message, _points_at
      fallback: false                 # true: read only on a second look, when no other rule found
                                      # the origin (a lead, quality insufficient, never drained)
      collapse: [pci]                 # context only: a file's hits that agree on these fields (and
                                      # on the line's host, rank and program) are one event with a
                                      # count and a last time, not one event per line
      cascade: [pg, seq]              # symptoms and markers every rank prints (watchdog cascades):
                                      # a file's hits that agree on these fields, on the line's
                                      # host, srun task and program, are one event with the set of
                                      # ranks, a count and a last time
      ends: false                     # markers only: a file's first and last lines of the rule,
                                      # from its first and last window, not every line
      onset: node_last_seen           # causes only: the line reports the failure of the node it
                                      # names after the fact; the failure began when that node was
                                      # last seen (its logs' last stamped line), when that is earlier
      reports_on: named_node          # a controller's report on a node: the event is the node's its
                                      # `node` or `host` field names (else its `ip`, through the job's
                                      # IP maps), never the log's host's; `job`: a report on some
                                      # node of the job, or on a job it launched (a workflow's
                                      # task), never the log's host
      vendor: amd                     # domain gpu only: the accelerator's maker when not NVIDIA
                                      # (amd, intel, habana, aws_neuron): which diagnostics the
                                      # admin is told to run
    references: [https://...]
    examples:
      match: [{line: '...', fields: {...}}]
      no_match: ['...']

Every regex runs on RE2 (`google-re2`), in time linear in the line: job output is written by the
user, and a backtracking engine lets one line hang the analysis.  RE2 has no lookaround and no
backreference; `requires` and `capture` take the place of a lookahead, `unless` of a negative one.
A pattern RE2 cannot run is refused when the rule loads.  RE2's classes (`\\d`, `\\w`, `\\s`,
`\\b`) are ASCII, and `$` is the end of the text only (`\\z`; Python's `\\Z` is not RE2 syntax).

A rule file is validated by the pydantic models of ruleset/schema.py, and held as the classes
below: the user's cache (ruleset/cache.py) keeps these, so an analysis with a warm cache builds
no pydantic model of a rule (the classes cost ~7 ms to build, their pickled instances ~9 ms to load).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import re2

from slurm_attrib.ruleset.shapes import digit_blind
from slurm_attrib.vocab import SOURCE_KINDS

# A rule's sources by default: every kind of log; the metrics connector's change lines only for
# rules that name it.
DEFAULT_SOURCES = [k for k in SOURCE_KINDS if k != "metrics"]


@cache
def compiled(pattern: str, ignore_case: bool = False):
    """The pattern compiled by RE2, once per process: validating a rule and scanning with it share
    it.  Raises re2.error with RE2's one-line reason (e.g. `invalid perl operator: (?=`)."""
    options = re2.Options()
    options.log_errors = False  # the reason goes into our error, not to stderr
    options.case_sensitive = not ignore_case
    return re2.compile(pattern, options)


def group_names(capture: list[str], requires: list[str], regex: str) -> list[str]:
    """The named groups of every regex that gives fields: capture, requires, then regex."""
    return [name for pattern in [*capture, *requires, regex] for name in compiled(pattern).groupindex]


@cache
def anchored(pattern: str) -> bool:
    """Whether a `^` of the pattern ties a match to the line's start (one followed by `.*` does not)."""
    from re import _constants as sre_constants
    from re import _parser as sre_parser

    def ties(items) -> bool:
        items = list(items)
        for index, (op, value) in enumerate(items):
            if op is sre_constants.AT and value is sre_constants.AT_BEGINNING:
                after = items[index + 1] if index + 1 < len(items) else None
                if after is None or not (after[0] in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT)
                                         and list(after[1][2]) == [(sre_constants.ANY, None)]):
                    return True
            elif op is sre_constants.SUBPATTERN and ties(value[-1]):
                return True
            elif op is sre_constants.BRANCH and any(ties(branch) for branch in value[1]):
                return True
            elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT) and ties(value[2]):
                return True
        return False

    try:
        return ties(sre_parser.parse(pattern).data)
    except Exception:  # noqa: BLE001 - RE2 syntax Python's parser does not read: not tried again
        return False


@dataclass(frozen=True)
class Match:
    contains: list[str]
    regex: str
    unless: list[str] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    capture: list[str] = field(default_factory=list)
    following: int = 0
    ignore_case: bool = False

    def __post_init__(self) -> None:
        # regex_blind, blind: whether the regex, and every regex of a rule without following lines,
        # cannot tell digits apart (shapes.digit_blind).  Found when the pack is validated and kept
        # with it in the cache (parsing every pattern again would cost each run about 0.15 s); not
        # fields: no rule file states them, and asdict() gives what a file holds.
        object.__setattr__(self, "regex_blind", digit_blind(self.regex))
        object.__setattr__(self, "blind", not self.following and self.regex_blind and all(
            digit_blind(p) for p in (*self.unless, *self.requires, *self.capture)))

    def group_names(self) -> list[str]:
        return group_names(self.capture, self.requires, self.regex)

    @property
    def anchored(self) -> bool:
        """Whether the regex (or one of its branches) reads from the start of the program's line
        (`^`, not `^.*`): it reads the program's line, after the launchers' prefixes (scanner._read)."""
        return anchored(self.regex)


@dataclass(frozen=True)
class Decode:
    """The code the line names (a CUDA error, a cuBLAS status, an LSF reason) decides its domain,
    category, role and strength, as its entry in rules/_codes.yaml says (hooks.decode_fields);
    a value no table knows leaves the rule's own reading."""
    families: list[str]
    fields: list[str]
    note: str


@dataclass(frozen=True, kw_only=True)
class EventSpec:
    type: str
    domain: str
    category: str | None = None
    role: str
    severity: str = "error"
    strength: int = 2
    hook: str | None = None
    decode: Decode | None = None
    fallback: bool = False
    # A generic reading of a line (py.exception: any `<name>Error: <message>` line): it stands on a
    # line only when no other rule proper reads the line; a rule that knows the wording (what
    # raised it, what it means) reads it instead (scanner._one_reading_of_a_line).
    generic: bool = False
    # Noise a node prints all day (corrected PCIe/DRAM errors, NIC command errors): the judgement
    # reads how many, when first and when last, not each line; building one event per line cost
    # most of the analysis on realistic logs (issue 19).  Only context collapses: every cause,
    # symptom and marker line is read on its own.
    collapse: list[str] | None = None
    # What every rank of a job prints when a collective stalls (PyTorch's watchdog cascade: 17
    # lines per rank, 566,000 lines on a 32,768-rank job): the judgement reads which ranks and
    # nodes, how many lines, when first and when last.  The ranks of one srun task or host (one
    # node) that agree on these fields are one event with their ranks (Event.ranks); lines that
    # name no task or host join one event per file, split by node once ranks map to nodes
    # (events.resolve_nodes).  Symptoms and markers only: a cause line is read on its own.
    cascade: list[str] | None = None
    # A marker a run prints all through (training progress): the judgement reads where it began
    # and where it stopped, so only a file's first and last such lines are read, found by RE2 in
    # the file's first and last window (scanner.Scanner.ends), never line by line.  Markers only.
    ends: bool = False
    # Slurm and MPI notice a dead node late (SlurmdTimeout, a daemon's keepalive): a line that names
    # the failed node (`srun: error: Node failure on gpu04`) is printed minutes after the node went
    # silent, and the ranking reads the earliest cause.  "node_last_seen": the event's time is its
    # node's last stamped line when that is earlier (events.date_onsets).
    onset: str | None = None
    # A controller's or scheduler's report on a node (slurmctld's `Setting node gpu05 state to INVAL
    # ...`, `Killing JobId=... on failed node gpu05`, a kubelet's node going NotReady), kept in the log
    # of the host that runs it.  "named_node": the event is the node's its `node` or `host` field
    # names, not the node's whose log holds the line (events.resolve_nodes).  Only such rules: a
    # host another line names (a peer, a syslog header) never moves an event.  "job": a report that
    # some node of the job failed, printed by the nodes that did not (slurmstepd's `*** JOB 4242 ON
    # gpu01 CANCELLED ... DUE TO NODE FAILURE ***` in a survivor's slurmd.log): the event is on no
    # node, never the one whose log holds it.
    reports_on: str | None = None
    # The maker of the accelerator a GPU-domain line reports on, when not NVIDIA (vocab.GPU_VENDORS):
    # the admin's next step names that maker's diagnostics (engine/explain.py), not DCGM's.
    vendor: str | None = None


@dataclass(frozen=True)
class MatchExample:
    line: str
    fields: dict[str, Any] = field(default_factory=dict)
    kind: str | None = None


@dataclass(frozen=True)
class Examples:
    match: list[MatchExample]
    no_match: list[str]


@dataclass(frozen=True, kw_only=True)
class Rule:
    id: str
    title: str
    description: str = ""
    sources: list[str] = field(default_factory=DEFAULT_SOURCES.copy)
    match: Match
    fields: dict[str, str] = field(default_factory=dict)
    event: EventSpec
    references: list[str]
    examples: Examples
    status: str = "stable"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Rule":
        """The rule of a validated document (schema.RuleModel.model_dump())."""
        examples = data["examples"]
        return cls(**{
            **data,
            "match": Match(**data["match"]),
            "event": EventSpec(**{**data["event"], "decode": data["event"].get("decode") and Decode(**data["event"]["decode"])}),
            "examples": Examples([MatchExample(**m) for m in examples["match"]], examples["no_match"]),
        })
