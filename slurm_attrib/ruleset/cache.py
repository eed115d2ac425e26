"""The per-user cache of what the rule pack builds from its files (validated rules, code tables)
and of the scanner's compiled Hyperscan literal database (scanner._hyperscan_db, keyed by the
literals themselves through read/write).

Keyed by the bytes of the files a value is built from, so any change builds again.  Values are
pickles: only a file of this user that nobody else can write is read.  A few values per kind are
kept (the last ones used): two installs, or runs with and without a site rule folder, take turns
without validating the whole pack again each time (~150 ms).  `SATTRIB_CACHE_DIR` moves the cache;
empty turns it off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

CACHE_VARIABLE = "SATTRIB_CACHE_DIR"  # empty: no cache
KEPT_PER_KIND = 4


def cache_dir() -> Path | None:
    if CACHE_VARIABLE in os.environ:
        value = os.environ[CACHE_VARIABLE].strip()
        return Path(value) if value else None
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home (a daemon's user without one): no cache
            return None
    return Path(base) / "sattrib"


def files_key(files: list[Path]) -> str | None:
    """A digest of the files' paths and bytes; None when one cannot be read."""
    digest = hashlib.sha256()
    try:
        for path in files:
            digest.update(str(path).encode() + b"\0" + Path(path).read_bytes() + b"\0")
    except OSError:
        return None
    return digest.hexdigest()[:32]


def code_digest(files: list[Path]) -> str:
    """The digest of the code a cached value is built with, taken when that code is imported (call
    it at module level): a file changed on disk later, an upgrade under a running service, must not
    name the values this process builds with the code it loaded before."""
    return files_key(files) or "unreadable"


def cached(kind: str, files: list[Path], build: Callable[[], Any], valid: Callable[[Any], bool], code: str = "") -> Any:
    """build(), or the value cached for these files' bytes and this code (code_digest) when it
    passes valid()."""
    key = files_key(files)
    if key is None:
        return build()
    key = hashlib.sha256(f"{code}:{key}".encode()).hexdigest()[:32]
    value = read(kind, key)
    if value is not None and valid(value):
        return value
    value = build()
    write(kind, key, value)
    return value


def read(kind: str, key: str) -> Any:
    folder = cache_dir()
    if folder is None:
        return None
    try:
        with open(folder / f"{kind}-{key}.pickle", "rb") as handle:
            info = os.fstat(handle.fileno())
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return None
            value = pickle.load(handle)
    except (OSError, pickle.PickleError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        return None
    try:
        os.utime(folder / f"{kind}-{key}.pickle")  # the last used is kept longest
    except OSError:
        pass  # a cache we may read but not write
    return value


def write(kind: str, key: str, value: Any) -> None:
    folder = cache_dir()
    if folder is None:
        return
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        _drop_oldest(folder, kind, KEPT_PER_KIND - 1)
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{kind}-")
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, folder / f"{kind}-{key}.pickle")
    except OSError:
        pass  # no cache: the next run builds again


def _drop_oldest(folder: Path, kind: str, keep: int) -> None:
    """Remove the values of this kind but the `keep` last used."""
    by_age = []
    for path in folder.glob(f"{kind}-*.pickle"):
        try:
            by_age.append((path.stat().st_mtime, path))
        except OSError:
            continue
    for _, path in sorted(by_age, reverse=True)[keep:]:
        path.unlink(missing_ok=True)
