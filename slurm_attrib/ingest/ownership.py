"""Whether the operator vouches for a file of an evidence folder: by owning it.

A folder handed to `sattrib analyze` or `sattrib batch` may have been made by a user (a copy of
"their" node logs, a job's output directory).  Its files count as what their kind says (a kernel
log as the kernel's) only when the file and every folder from the evidence root down to it are
owned by root, by SlurmUser (the epilog gives it each job's spool folder, where the controller's
worker adds job.json) or by whoever runs the analysis, and nobody else may write them.  Anything
else, however it looks, is a user's claim.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class OwnerCheck:
    """Answers `vouches(path)` for paths below `root`, each folder looked at once."""

    def __init__(self, root: Path, enabled: bool = True):
        self.root = Path(root)
        self.enabled = enabled
        self.owners = {0, os.geteuid(), slurm_user_uid()}
        self._folders: dict[Path, bool] = {}

    def _owned(self, path: Path) -> bool:
        try:
            info = os.lstat(path)
        except OSError:
            return False
        return info.st_uid in self.owners and not info.st_mode & OTHERS_WRITE

    def _folder(self, folder: Path) -> bool:
        """The folder and each one above it up to the root are the operator's (no recursion: a
        hostile folder may be thousands deep)."""
        if folder != self.root and self.root not in folder.parents:
            return False
        chain = []
        while folder not in self._folders:
            chain.append(folder)
            if folder == self.root:
                break
            folder = folder.parent
        above_ok = self._folders.get(folder, True)
        for item in reversed(chain):
            above_ok = above_ok and self._owned(item)
            self._folders[item] = above_ok
        return above_ok

    def vouches(self, path: Path) -> bool:
        """The operator (root or the analysing user) alone could have written `path`."""
        path = self.root / path
        return self.enabled and self._folder(path.parent) and self._owned(path)


def slurm_user_uid() -> int:
    """SlurmUser's uid: `slurm_user` of the config, else SlurmUser= of slurm.conf, else root."""
    from slurm_attrib.capture.common import spool_access
    from slurm_attrib.config import load_config

    try:
        name = load_config().slurm_user
    except Exception:  # noqa: BLE001 - an unusable config is told by whoever loads it for its own use
        name = ""
    return spool_access(str(name or ""), dict(os.environ))[0].uid
