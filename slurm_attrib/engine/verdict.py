"""The verdict: what the judgement concluded, before it is written as the diagnosis; shared by the
judgement (diagnose.py), its policies (policy.py, culprits.py) and the diagnosis' parts."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_attrib.engine.events import Event
from slurm_attrib.ingest.hangdumps import HangFinding


@dataclass
class Verdict:
    domain: str
    category: str
    quality: str
    culprits: list[str] = field(default_factory=list)
    primary: Event | None = None
    rivals: list[Event] = field(default_factory=list)
    systemic: bool = False
    notes: list[str] = field(default_factory=list)
    hang: HangFinding | None = None  # the rank a hang began from, read from stack or flight-recorder dumps
    rows: list[str] = field(default_factory=list)  # the policy rows that decided it: "pol.quality: <row name>"
    second_look: bool = False  # the outcome row wants the job read again with the fallback rules (Row.second_look)
