"""`sattrib-<hook> --check` runs this with the hook's own interpreter, as the user Slurm runs the
hook as: it proves that interpreter imports slurm_attrib and reads the hook's config, and prints
the folders that config names.  Exit 0, or 2 with one line saying what is wrong (stdlib + PyYAML,
as the hooks)."""

from __future__ import annotations

import sys


def main() -> int:
    from slurm_attrib.config import ConfigError, config_path, load_config

    try:
        config = load_config()
    except Exception as exc:  # noqa: BLE001 - whatever stops the hook, said in one line
        print(f"config: {exc if isinstance(exc, ConfigError) else f'{type(exc).__name__}: {exc}'}")
        return 2
    print(f"config ok: {config_path()}")
    for key in ("spool", "local_spool", "results"):
        print(f"{key} {getattr(config, key)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
