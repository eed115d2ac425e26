"""contrib/nhc/sattrib.nhc run by bash with NHC's die/log stand-ins and a fake sattrib on PATH."""

from __future__ import annotations

import subprocess
from pathlib import Path

CHECK = Path(__file__).resolve().parents[1] / "contrib" / "nhc" / "sattrib.nhc"


def _run(tmp_path: Path, fake: str | None, node: str = "gpu07") -> tuple[int, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if fake is not None:
        script = bin_dir / "sattrib"
        script.write_text("#!/bin/sh\n" + fake)
        script.chmod(0o755)
    program = (
        'die() { echo "DIE $1 $2"; return 1; }\n'
        'log() { echo "LOG $*"; }\n'
        f'HOSTNAME_S={node}\n'
        f'. {CHECK}\n'
        'check_sattrib_drain; echo "RC $?"\n'
    )
    proc = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "SATTRIB_NHC_TIMEOUT": "2"})
    return int(proc.stdout.strip().rsplit("RC ", 1)[1]), proc.stdout


def test_a_pending_recommendation_fails_the_node(tmp_path):
    rc, out = _run(tmp_path, 'echo "$3" > "$(dirname "$0")/asked"; printf "gpu07\\tjob 4242\\tsattrib: Xid79 GPU 3b:00 job 4242\\n"')
    assert rc == 1 and "DIE 1 check_sattrib_drain:  sattrib: Xid79 GPU 3b:00 job 4242 (job 4242)" in out
    assert (tmp_path / "bin" / "asked").read_text().strip() == "gpu07"  # asked about this node only


def test_a_fleet_recommendation_fails_the_node(tmp_path):
    rc, out = _run(tmp_path, 'printf "gpu07\\tfleet 11,12\\tsattrib: repeat node fault in 2 jobs/14d\\n"')
    assert rc == 1 and "(fleet 11,12)" in out


def test_nothing_pending_passes(tmp_path):
    rc, out = _run(tmp_path, 'echo "no pending drain recommendations"')
    assert rc == 0 and "DIE" not in out


def test_another_node_s_line_passes(tmp_path):
    rc, out = _run(tmp_path, 'printf "gpu08\\tjob 1\\tsattrib: x\\n"')
    assert rc == 0 and "DIE" not in out


def test_sattrib_failing_slow_or_missing_never_fails_the_node(tmp_path):
    rc, out = _run(tmp_path, 'echo "sattrib: no results index" >&2; exit 2')
    assert rc == 0 and "LOG check_sattrib_drain:  sattrib failed (exit 2): sattrib: no results index" in out
    rc, out = _run(tmp_path, "sleep 10")
    assert rc == 0 and "failed (exit 124)" in out
    (tmp_path / "none").mkdir()
    rc, out = _run(tmp_path / "none", None)  # no sattrib on PATH at all
    assert rc == 0 and "not found; check skipped" in out
