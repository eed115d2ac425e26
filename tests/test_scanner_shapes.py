"""A line's reading is kept for the lines of its shape (ruleset/shapes.py): only for rules that
cannot tell digits apart (shapes.digit_blind), and then it is the reading each line gets on its own."""

import random

import pytest

from slurm_attrib.ingest import origin
from slurm_attrib.ruleset import scanner as scanner_module
from slurm_attrib.ruleset.loader import load_rules
from slurm_attrib.ruleset.scanner import Scanner, _line_at, _one_reading_of_a_line
from slurm_attrib.ruleset.shapes import digit_blind, shape_of

RULES = load_rules()


def test_the_prefixes_a_rules_reading_skips_are_found_alike_on_every_line_of_a_shape():
    """scanner._read skips launchers' and relaying tools' prefixes and, for a second look, a header
    (origin.message_start): where they end must not depend on which digits a line holds."""
    patterns = [origin._LAUNCHER_PREFIX, origin._RELAY_PREFIX, origin._NCCL_HEADER, *origin._HEADERS]
    for pattern in patterns:
        assert digit_blind(pattern.pattern.decode()), pattern.pattern


def _with_other_digits(line: str, rng: random.Random) -> str:
    return "".join(rng.choice("0123456789") if c in "0123456789" else c for c in line)


def _direct_hits(scanner: Scanner, line: str, kind: str, literal_ids):
    """The hits of a line read rule by rule, as if no shape had been seen before."""
    text, line_bytes = _line_at(line.encode(), 0)
    hits = [scanner._match_rule(c, text, line_bytes, 1, 0) for c in scanner.rules_on(literal_ids, kind)]
    return _one_reading_of_a_line([h for h in hits if h is not None])


def _signature(hits):
    return [(h.rule.id, h.fields, h.role, h.category, h.strength, h.lines) for h in hits]


def test_every_line_of_a_shape_reads_as_it_does_alone():
    """Every rule example (matching and not), then copies with other digits in the same places:
    the scanner, which keeps the first line's reading for the others, reads each as it would
    alone.  The copies hit what the digits allow (`Xid 79` and `Xid 13` share a shape)."""
    scanner = Scanner(RULES, engine="hyperscan" if "hyperscan" in scanner_module.available_engines() else "ahocorasick")
    rng = random.Random(20261207)
    tried = kept = 0
    for rule in RULES:
        if rule.match.following:
            continue
        lines = [(e.line, e.kind or rule.sources[0]) for e in rule.examples.match]
        lines += [(line, rule.sources[0]) for line in rule.examples.no_match]
        for line, kind in lines:
            if "\n" in line or not any(c.isdigit() for c in line):
                continue
            for variant in [line, *(_with_other_digits(line, rng) for _ in range(3))]:
                data = variant.encode()
                candidates = scanner.candidate_lines(data)
                if not candidates:
                    continue
                got = scanner.match_at(data, 0, 1, kind, candidates[0][1])
                assert _signature(got) == _signature(_direct_hits(scanner, variant, kind, candidates[0][1])), (
                    rule.id, variant)
                tried += 1
                kept += shape_of(_line_at(data, 0)[1]) != data
    assert tried > 3000 and kept > 1000


def test_a_rule_that_tells_digits_apart_reads_every_line():
    """`NVRM: Xid (...): 79` and `...: 13` share a shape; a rule for one Xid only must not keep its
    reading of the first for the second."""
    rule = next(r for r in RULES if not r.match.following and not digit_blind(r.match.regex)
                and any(c.isdigit() for c in r.match.regex.replace(r"\d", "")) and r.examples.match)
    scanner = Scanner([rule])
    example = rule.examples.match[0]
    kind = example.kind or rule.sources[0]
    data = example.line.encode()
    candidates = scanner.candidate_lines(data)
    assert scanner.match_at(data, 0, 1, kind, candidates[0][1])
    rng = random.Random(1)
    for _ in range(50):
        variant = _with_other_digits(example.line, rng).encode()
        found = scanner.candidate_lines(variant)
        if found:
            got = scanner.match_at(variant, 0, 1, kind, found[0][1])
            assert _signature(got) == _signature(_direct_hits(scanner, variant.decode(), kind, found[0][1]))


def test_a_long_line_is_read_rule_by_rule_and_its_shape_not_kept():
    rule = next(r for r in RULES if r.id == "gpu.xid")
    scanner = Scanner([rule])
    long_line = b"NVRM: Xid (PCI:0000:3b:00): 79, " + b"x" * scanner_module.MAX_SHAPE_BYTES
    assert scanner.match_at(long_line, 0, 1, "kernel", scanner.candidate_lines(long_line)[0][1])
    assert not len(scanner._shapes)
