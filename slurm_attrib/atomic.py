"""Atomic file replacement inside an already opened directory (standard library only).

Used by the epilog's bundle writer and by the results store: a temp file created with O_EXCL and
O_NOFOLLOW next to the target, written in full, fsynced, then renamed over the target, so readers
only ever see a complete file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable


def write_in_dir(
    dir_fd: int,
    name: str,
    data: bytes,
    mode: int = 0o644,
    prepare: Callable[[int], None] | None = None,
) -> None:
    """Replace `name` in the directory `dir_fd` with `data`; `prepare(fd)` may chown/chmod first."""
    tmp = f".{name}.tmp-{os.getpid()}"
    try:
        os.unlink(tmp, dir_fd=dir_fd)  # left by a killed writer with our pid
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{tmp}: not a regular file")
        if prepare is not None:
            prepare(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    os.close(fd)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    try:
        os.fsync(dir_fd)
    except OSError:
        pass


def write_file(path: os.PathLike | str, data: bytes, mode: int = 0o644) -> None:
    """Replace the file at `path` with `data` (its folder created when missing) the same way."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_in_dir(dir_fd, os.path.basename(path), data, mode=mode)
    finally:
        os.close(dir_fd)
