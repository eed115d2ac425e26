"""Install the Prolog/Epilog wrappers with this interpreter baked in.

    sattrib install-hooks /etc/slurm   # writes sattrib-prolog, sattrib-epilog, sattrib-epilog-ctld
    python -m slurm_attrib.capture.install /etc/slurm    # the same without click

The wrappers (epilog/sattrib-*) pick their interpreter from DEFAULT_PY, which this replaces with
sys.executable (the venv python the package is installed in); see the wrapper's header.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from slurm_attrib.paths import bundled_dir

NAMES = ("sattrib-epilog", "sattrib-prolog", "sattrib-epilog-ctld")


def wrapper_dir() -> Path:
    return bundled_dir("epilog")


def install(dest: Path, python: str = sys.executable) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for name in NAMES:
        text = (wrapper_dir() / name).read_text(encoding="utf-8")
        text = text.replace("DEFAULT_PY=@SATTRIB_PYTHON@", f"DEFAULT_PY={python}")
        target = dest / name
        tmp = dest / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in install(Path(args[0])):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
