"""The realistic benchmark corpora (benchmarks/realistic_corpora.py) as an instrument: tiny
versions of every shape are deterministic, carry their truth outside the job folder, and hold the
lines the rules match (nothing filtered out).  No timings here."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from datetime import datetime
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from realistic_corpora import SCALING_NODES, SPECS, Spec, scaling_spec, write_corpus  # noqa: E402

from slurm_attrib.ruleset.loader import load_rules  # noqa: E402
from slurm_attrib.ruleset.scanner import Scanner  # noqa: E402

TINY_NODES = {"a_1024n_nccl_info": 4, "g_32768_rank_cascade": 8}


def tiny(spec: Spec) -> Spec:
    return spec.scaled(0.002, nodes=TINY_NODES.get(spec.name, min(spec.nodes, 4)))


SHAPES = [tiny(s) for s in SPECS.values()] + [scaling_spec(SCALING_NODES[0]).scaled(0.05)]


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def scanner() -> Scanner:
    return Scanner(load_rules())


@pytest.mark.parametrize("spec", SHAPES, ids=lambda s: s.name)
def test_corpus_is_deterministic_with_truth_outside(spec: Spec, tmp_path: Path) -> None:
    first, second = tmp_path / "one" / spec.name, tmp_path / "two" / spec.name
    truth = write_corpus(spec, first, tmp_path / "one" / "truth.json")
    write_corpus(spec, second, tmp_path / "two" / "truth.json")
    assert _digest(first) == _digest(second)
    assert (tmp_path / "one" / "truth.json").read_bytes() == (tmp_path / "two" / "truth.json").read_bytes()
    assert not list(first.rglob("*truth*"))  # the answer is not in the job folder
    assert truth["expectations"][0]["category"]
    job = json.loads((first / "job.json").read_text())
    assert len(job["nodes"]) == spec.nodes
    assert list(first.glob("slurm-*.out"))
    for host in job["nodes"]:
        assert (first / host / "dmesg.txt").is_file() or (first / host / "journal.txt").is_file()


@pytest.mark.parametrize("spec", SHAPES, ids=lambda s: s.name)
def test_corpus_lines_hit_the_rules(spec: Spec, tmp_path: Path, scanner: Scanner) -> None:
    """The bulk is made of what rules look at: many candidate lines, and real hits in both the
    job output and the node logs (a corpus that filtered matching lines would have almost none)."""
    folder = tmp_path / spec.name
    write_corpus(spec, folder, tmp_path / "truth.json")
    out = next(folder.glob("slurm-*.out")).read_bytes()
    assert len(scanner.scan(out, "app")) >= 5
    kernel = b"".join(p.read_bytes() for p in sorted(folder.glob("*/dmesg.txt")))
    assert scanner.scan(kernel, "kernel")


def test_formats_of_the_versions_in_use(tmp_path: Path) -> None:
    """The line shapes the issue names are in the corpora they belong to."""
    texts = {}
    for name in ("a_1024n_nccl_info", "b_16n_nccl_legacy", "e_64n_healthy_lustre", "g_32768_rank_cascade", "c_16n_journal_heavy"):
        folder = tmp_path / name
        write_corpus(tiny(SPECS[name]), folder, tmp_path / f"{name}.json")
        texts[name] = "".join(p.read_text() for p in sorted(folder.rglob("*.txt")) + sorted(folder.glob("*.out")))
    assert "via P2P/CUMEM/read" in texts["a_1024n_nccl_info"]
    assert "[send] via NET/IB/" in texts["a_1024n_nccl_info"]
    assert " - Init COMPLETE" in texts["a_1024n_nccl_info"]
    assert "NCCL INFO Ring 00 : " in texts["b_16n_nccl_legacy"] and " [send] via NET/IB/" in texts["b_16n_nccl_legacy"]
    assert "timed out for slow reply" in texts["e_64n_healthy_lustre"]
    assert "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=" in texts["g_32768_rank_cascade"]
    assert "To avoid data inconsistency, we are taking the entire process down." in texts["g_32768_rank_cascade"]
    for noise in ("audit: type=1400", "mlx5_cmd_out_err", "CE memory read error", "Connection restored to"):
        assert noise in texts["c_16n_journal_heavy"]


LUSTRE_CONNECTION = re.compile(r"^(\S+) \S+ kernel: Lustre: (\S+): Connection (?:to \S+ \(at [^)]+\) was (lost)|restored to)")


def test_a_lustre_client_restores_the_connections_it_lost(tmp_path: Path) -> None:
    """Each `Connection to <target> ... was lost` is followed 5-120 s later by `Connection restored
    to` of the same import (lustre/ptlrpc/import.c); no import restores what it did not lose."""
    folder = tmp_path / "c"
    write_corpus(SPECS["c_16n_journal_heavy"].scaled(0.01, nodes=2), folder, tmp_path / "truth.json")
    restored = 0
    for journal in sorted(folder.glob("*/journal.txt")):
        down: dict[str, float] = {}
        for line in journal.read_text().splitlines():
            m = LUSTRE_CONNECTION.match(line)
            if not m:
                continue
            stamp, device, lost = datetime.fromisoformat(m[1]).timestamp(), m[2], m[3]
            if lost:
                assert device not in down, line
                down[device] = stamp
            else:
                assert 5 <= stamp - down.pop(device) <= 121, line
                restored += 1
        assert len(down) <= 2  # a loss in the last two minutes may outlive the log
    assert restored >= 10
