"""The scanner finds the same hits with Hyperscan and with Python's re."""

import pytest

from slurm_attrib.ruleset.loader import load_rules
from slurm_attrib.ruleset.scanner import ENGINES, Scanner, hyperscan, normalise_pci
from slurm_attrib.simulate import write_scenario

RULES = load_rules()


def _signature(hits):
    return [(h.lineno, h.offset, h.rule.id, sorted(h.fields.items()), h.role, h.category) for h in hits]


@pytest.mark.parametrize("engine", [e for e in ENGINES if e != "re"])
@pytest.mark.parametrize("scenario", ["gpu_fell_off_bus", "link_down", "filesystem_error", "app_exception"])
def test_every_engine_finds_what_re_finds(tmp_path, scenario, engine):
    if engine == "hyperscan" and hyperscan is None:
        pytest.skip("hyperscan not installed")
    write_scenario(scenario, tmp_path, nodes=4, seed=1)
    fast, plain = Scanner(RULES, engine=engine), Scanner(RULES, engine="re")
    assert (fast.engine, plain.engine) == (engine, "re")
    for path in sorted(p for p in tmp_path.rglob("*") if p.is_file()):
        data = path.read_bytes() + b"\x00\xff binary tail NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x\n"
        for kind in ("kernel", "app"):
            assert _signature(fast.scan(data, kind)) == _signature(plain.scan(data, kind)), path


def test_lines_without_literals_are_never_decoded():
    scanner = Scanner(RULES, engine="re")
    data = b"step 1 loss 2.0\n" * 1000 + b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
    assert [start for start, _ in scanner.candidate_lines(data)] == [16 * 1000]
    assert [h.lineno for h in scanner.scan(data, "kernel") if h.rule.id == "gpu.xid"] == [1001]


def test_lines_at_both_ends_of_the_buffer():
    scanner = Scanner(RULES, engine="re")
    line = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    hits = [h for h in scanner.scan(line + b"\nnoise\n" + line, "kernel") if h.rule.id == "gpu.xid"]
    assert [h.lineno for h in hits] == [1, 3]


@pytest.mark.parametrize(
    "raw,expected",
    [("PCI:0000:3B:00", "0000:3b:00"), ("00000000:3B:00.0", "0000:3b:00"), ("3b:00.0", "0000:3b:00")],
)
def test_pci_ids_are_normalised(raw, expected):
    assert normalise_pci(raw) == expected
