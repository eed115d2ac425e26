"""`sattrib install-hooks` writes the three Slurm wrappers bound to this Python."""

import os
import subprocess
import sys

from support import sattrib_argv


def test_install_hooks_writes_executable_wrappers(tmp_path):
    result = subprocess.run([*sattrib_argv(), "install-hooks", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["sattrib-epilog", "sattrib-epilog-ctld", "sattrib-prolog"]
    for name in names:
        path = tmp_path / name
        assert os.access(path, os.X_OK)
        # the console script's interpreter: this venv's python (python or python3, one binary)
        default_py = next(line for line in path.read_text().splitlines() if line.startswith("DEFAULT_PY="))[len("DEFAULT_PY="):]
        assert os.path.dirname(default_py) == os.path.dirname(sys.executable) and os.path.samefile(default_py, sys.executable)


def test_ctld_wrapper_exits_zero_without_a_job(tmp_path):
    subprocess.run([*sattrib_argv(), "install-hooks", str(tmp_path)], check=True, capture_output=True, timeout=60)
    env = {"PATH": "/usr/bin:/bin", "SATTRIB_CONFIG": str(tmp_path / "none.yaml")}
    done = subprocess.run([str(tmp_path / "sattrib-epilog-ctld")], env=env, capture_output=True, timeout=30)
    assert done.returncode == 0
