"""A plain (non-editable) wheel carries the rule pack and the templates."""

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_wheel_ships_rules_and_templates(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(REPO)],
        check=True,
        timeout=300,
    )
    wheel = next(tmp_path.glob("slurm_attrib-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    rule_files = {p.name for p in (REPO / "rules").glob("*.yaml")}
    assert rule_files and all(f"slurm_attrib/_data/rules/{name}" in names for name in rule_files)
    assert "slurm_attrib/_data/templates/diagnosis.txt.j2" in names
    assert any(n.startswith("slurm_attrib/samples/demo/") for n in names)
