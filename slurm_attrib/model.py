"""The diagnosis: pydantic models whose JSON is the `sattrib analyze` contract (plus optional fields)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from slurm_attrib.provenance import Provenance

SCHEMA_VERSION = "1.0"

Domain = Literal["gpu", "network", "host", "storage", "application", "scheduler", "none", "unknown"]
Quality = Literal["confirmed", "likely", "ambiguous", "insufficient"]
Role = Literal["cause", "symptom", "context"]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EvidenceLine(Model):
    node: str | None = Field(description="Node the line belongs to, when known")
    source: str = Field(description="File path relative to the analysed PATH")
    line: int = Field(description="1-based line number in that file")
    time: str | None = Field(description="ISO 8601 UTC time of the line, when known")
    text: str
    role: Role
    rule: str | None = Field(default=None, description="Id of the rule that matched the line")
    time_inferred: bool = Field(default=False, description="The line has no time of its own; taken from a nearby line")
    provenance: Provenance | None = Field(
        default=None, description="Who could have written the line: kernel, daemon, probe or user (user lines never act)")


class Drain(Model):
    node: str
    reason: str = Field(description="Reason string for scontrol, starting with 'sattrib:'")


class Gpu(Model):
    node: str | None
    pci_bus_id: str = Field(description="domain:bus:device, lower case, as in the Xid line")
    xid: int | None = None
    uuid: str | None = Field(default=None, description="GPU UUID from nvidia-smi output captured with the logs")
    serial: str | None = Field(default=None, description="Board serial number from nvidia-smi output")


class Link(Model):
    node: str | None
    device: str = Field(description="Network device as the line names it (mlx5_0, ib0, a PCI address)")
    port: int | None = None
    type: str = Field(description="Event type of the rule, e.g. ib_port_down, link_flap")
    rule: str
    time: str | None = None
    count: int = Field(default=1, description="Lines of this type for this device and port in the job")
    trusted: bool = Field(description="Read from a source the job's user cannot write")


class Cause(Model):
    domain: Domain
    category: str
    nodes: list[str]
    gpus: list[Gpu] = []
    time: str | None = None
    rule: str
    title: str
    trusted: bool = Field(description="Established by sources the job's user cannot write")
    detail: str = ""
    rank: int | None = Field(None, description="The global rank whose line shows the cause ([rankN], NCCL's rank)")
    rank_node: str | None = Field(None, description="The node that rank ran on, when the rank->node map knows it")


class SymptomGroup(Model):
    type: str
    rule: str
    count: int
    nodes: list[str]
    ranks: list[int]
    first: str | None
    last: str | None
    explained_by: str | None = Field(description="Rule id of the cause that explains the group")


class TimelineEntry(Model):
    time: str | None
    node: str | None
    what: str = Field(description="first_cause, first_symptom (per node) or last_event")
    text: str
    source: str
    line: int


class Action(Model):
    who: Literal["admin", "user"]
    text: str


class CoverageItem(Model):
    node: str | None
    source: str
    kind: str | None
    status: str
    detail: str = ""
    whole_node: bool = Field(default=False, description="A node of the job that left no logs at all")


class Outcome(Model):
    state: str | None = Field(description="Slurm job state when known")
    exit_code: str | None = None
    job_id: str | None = None
    start: str | None = None
    end: str | None = None
    nodes: list[str] = []


class Diagnosis(Model):
    # The contract's fields
    domain: Domain
    category: str
    culprit_nodes: list[str]
    quality: Quality
    drain: list[Drain]
    evidence: list[EvidenceLine]
    summary: str
    # Optional extensions
    schema_version: str = SCHEMA_VERSION
    outcome: Outcome
    cause: Cause | None = None
    alternatives: list[Cause] = []
    systemic: bool = False
    gpus: list[Gpu] = []
    links: list[Link] = []
    symptoms: list[SymptomGroup] = []
    timeline: list[TimelineEntry] = []
    actions: list[Action] = []
    coverage: list[CoverageItem] = []
    rules_fired: list[str] = []
    notes: list[str] = []
    # The relations (rules/relations) that decided the cause and its symptoms; `sattrib explain` shows how
    decided_by: list[str] = []
    # The policy rows (rules/policies) that decided the rest, "pol.quality: <row>": for `sattrib
    # explain`, not part of the diagnosis' JSON.
    _policy_rows: list[str] = PrivateAttr(default_factory=list)
    _second_look: bool = PrivateAttr(default=False)  # its outcome row wants the fallback rules' reading (Row.second_look)
