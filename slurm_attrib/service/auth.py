"""Who is asking.  Three ways in, nothing else:

- an admin token: `Authorization: Bearer <token>`, compared with the file `service_admin_token_file`
  (one line; the file must not be readable by others);
- MUNGE, the credential Slurm already trusts: `Authorization: MUNGE <credential>` (from `munge -n`),
  checked by running `unmunge` (which refuses expired and replayed credentials); the caller is the
  credential's UID;
- a trusted reverse proxy: the header `service_user_header` (default X-Remote-User), honoured only
  on connections from an address in `service_trusted_proxies`.

A user sees only their own jobs; an admin (token, or a user in `admin_group`) sees all.
"""

from __future__ import annotations

import grp
import hmac
import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

UNMUNGE_TIMEOUT = 5.0


class Unauthorized(Exception):
    pass


@dataclass(frozen=True)
class Caller:
    user: str | None
    uid: int | None
    admin: bool


def read_admin_token(path: str) -> str | None:
    """The admin token, or None when no file is configured.  A file others can read is refused."""
    if not path:
        return None
    info = os.stat(path)
    if info.st_mode & 0o077:
        raise PermissionError(f"{path}: the admin token file must not be readable by group or others (chmod 600)")
    token = Path(path).read_text(encoding="utf-8").strip()
    return token or None


def identify(headers: dict[str, str], client_host: str | None, config, admin_token: str | None) -> Caller:
    authorization = headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value:
        if admin_token and hmac.compare_digest(value.strip(), admin_token):
            return Caller(user=None, uid=None, admin=True)
        raise Unauthorized("unknown token")
    if scheme.upper() == "MUNGE" and value:
        return _caller(_unmunge(value.strip(), config), config)
    proxied = headers.get(config.service_user_header.lower())
    if proxied:
        if client_host in config.service_trusted_proxies:
            return _caller(proxied, config)
        raise Unauthorized(f"{config.service_user_header} is honoured only from the configured proxies")
    raise Unauthorized("no credentials (Authorization: MUNGE <credential>, Bearer <admin token>, or a trusted proxy)")


def _unmunge(credential: str, config) -> str:
    argv = ["unmunge"] + (["--socket", config.service_munge_socket] if config.service_munge_socket else [])
    try:
        proc = subprocess.run(argv, input=credential, capture_output=True, text=True, timeout=UNMUNGE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unauthorized(f"MUNGE credential not checked: {exc}") from None
    if proc.returncode != 0:
        raise Unauthorized(f"MUNGE credential refused: {(proc.stderr.strip().splitlines() or ['invalid'])[-1]}")
    for line in proc.stdout.splitlines():
        key, _, rest = line.partition(":")
        if key.strip() == "UID":
            return rest.split()[0]
    raise Unauthorized("MUNGE credential without a UID")


def _caller(user: str, config) -> Caller:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        if user.isdigit():
            try:
                entry = pwd.getpwuid(int(user))
            except KeyError:
                raise Unauthorized(f"unknown user {user!r}") from None
        else:
            raise Unauthorized(f"unknown user {user!r}") from None
    return Caller(user=entry.pw_name, uid=entry.pw_uid, admin=_in_admin_group(entry, config.admin_group))


def _in_admin_group(entry, group: str) -> bool:
    if not group:
        return entry.pw_uid == 0
    try:
        info = grp.getgrnam(group)
    except KeyError:
        return False
    return entry.pw_gid == info.gr_gid or entry.pw_name in info.gr_mem
