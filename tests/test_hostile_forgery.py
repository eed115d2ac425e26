"""No text a user controls reaches a drain (issue 18): the example line of every rule that could
name hardware, wrapped as a user would print it, forged into every place a job's user can write
(see hostile_support), gives no drain, no `confirmed` hardware cause, and no fleet strike.

Each forged line is one job, analysed in-process (`analyze_path`, what `sattrib analyze` runs);
the line's wrapping rotates through hostile_support.WRAPPINGS, shifted per place, so every
wrapping meets every place.  benchmarks/fuzz_hostile.py runs the full product of lines and
wrappings; tests/service/test_upload_forgery.py uploads such folders to the service."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hostile_support import NODES, PLACES, WRAPPINGS, ask_fleet, forgeable_lines, hardware_verdict, positive_control, scratch, window

from slurm_attrib.engine.pipeline import analyze_path

LINES = forgeable_lines()
WRAPPING_NAMES = list(WRAPPINGS)


@dataclass
class Forged:
    rule: str
    wrapping: str
    diagnosis: object

    def __str__(self) -> str:
        d = self.diagnosis
        drains = ",".join(x.node for x in d.drain) or "-"
        return f"{self.rule} [{self.wrapping}] -> {d.domain}/{d.category} {d.quality} drain={drains}"


def forge(place: str, root: Path, now: float) -> list[Forged]:
    """One job per forgeable line, in `place`."""
    win = window(now)
    shift = list(PLACES).index(place)
    results = []
    for number, (rule, line) in enumerate(LINES):
        wrapping = WRAPPING_NAMES[(number + shift) % len(WRAPPING_NAMES)]
        job = root / str(number)
        PLACES[place](job, [WRAPPINGS[wrapping](line, win.when)], win)
        results.append(Forged(rule, wrapping, analyze_path(job)))
        shutil.rmtree(job)
    return results


@pytest.fixture(scope="module", params=list(PLACES))
def forged(request, tmp_path_factory):
    now = time.time()
    place = request.param
    with scratch(tmp_path_factory.mktemp(place)) as folder:
        yield place, now, forge(place, folder, now)


def _listing(bad: list[Forged], total: int, what: str) -> str:
    return f"{len(bad)} of {total} forged lines gave {what}, e.g.\n  " + "\n  ".join(map(str, bad[:8]))


def test_a_forged_line_never_drains_nor_confirms_hardware(forged):
    place, _, results = forged
    drained = [f for f in results if f.diagnosis.drain]
    confirmed = [f for f in results if hardware_verdict(f.diagnosis)]
    assert not drained, f"{place}: " + _listing(drained, len(results), "a drain")
    assert not confirmed, f"{place}: " + _listing(confirmed, len(results), "a confirmed hardware cause")


def test_forged_jobs_give_the_fleet_no_strike_and_no_drain(forged, tmp_path):
    place, now, results = forged
    with scratch(tmp_path) as folder:
        answer = ask_fleet([f.diagnosis for f in results], now, folder / "results")
    assert (answer.strikes, answer.offenders, answer.drains) == (0, [], []), (
        f"{place}: {answer.strikes} of {len(results)} forged jobs counted as fleet strikes; "
        f"offenders {answer.offenders[:6]}; `sattrib drain --recommend` would list {answer.drains[:6]}")


def test_the_instruments_see_a_real_kernel_fault(tmp_path):
    """The control: an Xid 79 in a node bundle's kernel source drains its node, and two such jobs
    make it a repeat offender, so the zeros above are not blindness."""
    now = time.time()
    diagnoses = []
    for job in ("a", "b"):
        positive_control(tmp_path / job, window(now))
        diagnoses.append(analyze_path(tmp_path / job))
    assert [d.node for d in diagnoses[0].drain] == [NODES[0]] and hardware_verdict(diagnoses[0])
    with scratch(tmp_path) as folder:
        answer = ask_fleet(diagnoses, now, folder / "results")
    assert answer.strikes == 2 and f"{NODES[0]} (fleet)" in answer.drains


def test_an_uploaded_node_folder_never_drains(tmp_path):
    """What the service analyses of an upload: the folder it extracted, owned by the service's own
    user (here: this test's), loaded with vouch=False (no file is the operator's, whoever owns it).
    Every forgeable line in a node folder: no drain, nothing confirmed.  The same folders loaded
    as the operator's own (vouch=True) do drain: the control that the lines would act."""
    from slurm_attrib.engine.pipeline import analyze_evidence, load_any

    win = window(time.time())
    bad, would_act = [], 0
    for number, (rule, line) in enumerate(LINES):
        wrapping = WRAPPING_NAMES[number % len(WRAPPING_NAMES)]
        job = tmp_path / str(number)
        PLACES["user-node-folder"](job, [WRAPPINGS[wrapping](line, win.when)], win)
        for path in (job / NODES[2], job / NODES[2] / "dmesg.txt"):
            os.chown(path, os.geteuid(), os.getegid())  # as the service extracted it
        diagnosis = analyze_evidence(load_any(job, vouch=False))
        if diagnosis.drain or hardware_verdict(diagnosis):
            bad.append(str(Forged(rule, wrapping, diagnosis)))
        would_act += bool(analyze_evidence(load_any(job, vouch=True)).drain)
        shutil.rmtree(job)
    assert not bad, f"{len(bad)} of {len(LINES)} uploads acted, e.g. {bad[:5]}"
    assert would_act >= 20, would_act  # 85 of 596 on the rule pack of 2026-12-05
