"""The wordings catalogue (rules/wordings): every failure wording mined from a source of truth has a rule."""

from __future__ import annotations

import pytest

from slurm_attrib.ruleset.loader import load_rules
from slurm_attrib.ruleset.scanner import Scanner
from slurm_attrib.ruleset.wordings import catalogue_files, check_wording, format_regex, load_catalogue

RULES = load_rules()
RULES_BY_ID = {r.id: r for r in RULES}
SCANNER = Scanner(RULES, engine="re")
ENTRIES = [(path.name, i, w) for path in catalogue_files() for i, w in enumerate(load_catalogue(path).wordings)]


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{name}:{i}" for name, i, _ in ENTRIES])
def test_catalogued_wording_is_covered(entry):
    _, _, wording = entry
    problem = check_wording(wording, RULES_BY_ID, SCANNER)
    assert problem is None, f"{wording.format!r}: {problem}"


def test_catalogue_names_its_sources():
    projects = {load_catalogue(path).project for path in catalogue_files()}
    assert len(projects) == len(catalogue_files())
    for path in catalogue_files():
        catalogue = load_catalogue(path)
        assert catalogue.repository.startswith("https://"), path.name
        assert all(w.file and w.versions for w in catalogue.wordings), path.name


@pytest.mark.parametrize(
    "fmt, printed",
    [
        ("NET/IB : Got completion from peer %s with error %d, opcode %d", "NET/IB : Got completion from peer 10.0.0.1<5> with error 12, opcode 0"),
        ("%s: port %u link down", "mlx5_core 0000:3b:00.0: port 1 link down"),
        ("Watchdog caught collective operation timeout: {} ran for {} milliseconds", "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5) ran for 600000 milliseconds"),
        ("error: %s: %m", "slurmstepd: error: execve(): task: No such file or directory"),
        ("Out of memory: Killed process %d (%s) total-vm:%lukB", "Out of memory: Killed process 123 (python) total-vm:1024kB"),
        ("100%% done: %pI4 ... failed", "100% done: 10.1.2.3 and more failed"),
    ],
)
def test_format_regex_finds_what_the_format_prints(fmt, printed):
    assert format_regex(fmt).search(printed)


@pytest.mark.parametrize(
    "fmt, printed",
    [
        ("NET/IB : Got completion from peer %s with error %d", "NET/IB : Got completion from peer 10.0.0.1 with status=12"),
        ("%s: port %u link down", "mlx5_core 0000:3b:00.0: port 1 link up"),
    ],
)
def test_format_regex_rejects_other_wordings(fmt, printed):
    assert not format_regex(fmt).search(printed)
