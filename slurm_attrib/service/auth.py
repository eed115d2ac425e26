"""Who is asking.  Three ways in, nothing else:

- an admin token: `Authorization: Bearer <token>`, compared with the file `service_admin_token_file`
  (one line; the file must not be readable by others);
- MUNGE, the credential Slurm already trusts: `Authorization: MUNGE <credential>` (from `munge -n`),
  checked by running `unmunge` (which refuses expired and replayed credentials); the caller is the
  credential's UID;
- a trusted reverse proxy: the header `service_user_header` (default X-Remote-User), honoured only
  over a channel a local user cannot reach: the service's Unix socket (its mode and group say who
  may connect), or with the shared secret of `service_proxy_secret_file` in X-Sattrib-Proxy-Secret,
  or from an address in `service_trusted_proxies`.  A loopback address there is refused at start
  (every local user can reach it) unless a secret is set or `service_trust_loopback_proxy` is true.

A header that says who the caller is must come once: two answer 400.
A user sees only their own jobs; an admin (token, or a user in `admin_group`) sees all.
"""

from __future__ import annotations

import grp
import hmac
import ipaddress
import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path

UNMUNGE_TIMEOUT = 5.0
PROXY_SECRET_HEADER = "X-Sattrib-Proxy-Secret"


class Unauthorized(Exception):
    pass


class DuplicateHeader(Exception):
    pass


@dataclass(frozen=True)
class ProxyChannel:
    """How the proxy's user header may be trusted on this server."""

    over_socket: bool  # the server listens on a Unix socket only
    secret: str | None  # the proxy's shared secret, when configured


@dataclass(frozen=True)
class Caller:
    user: str | None
    uid: int | None
    admin: bool


def read_admin_token(path: str) -> str | None:
    """The admin token, or None when no file is configured."""
    return read_secret(path, "service_admin_token_file")


def read_secret(path: str, key: str) -> str | None:
    """The one line of a secret file, or None when `key` names no file.  A file others can read,
    or owned by someone but root and this service's user, is refused."""
    if not path:
        return None
    info = os.stat(path)
    if info.st_mode & 0o077:
        raise PermissionError(f"{key} {path}: must not be readable by group or others (chmod 600)")
    if info.st_uid not in (0, os.geteuid()):
        raise PermissionError(f"{key} {path}: must be owned by root or the service's user")
    secret = Path(path).read_text(encoding="utf-8").strip()
    return secret or None


def proxy_setup_problem(config, channel: ProxyChannel) -> str:
    """Why the proxy settings would let a local user pass for anyone ("" when they do not)."""
    for address in config.service_trusted_proxies:
        try:
            loopback = address == "localhost" or ipaddress.ip_address(address).is_loopback
        except ValueError:
            return f"service_trusted_proxies: {address!r} is not an IP address"
        if loopback and channel.secret is None and not config.service_trust_loopback_proxy:
            return (f"service_trusted_proxies: {address} is a loopback address every local user can reach; serve on a "
                    "Unix socket (--socket), set service_proxy_secret_file, or set service_trust_loopback_proxy: true")
    return ""


def identity_headers(raw: list[tuple[bytes, bytes]], config) -> dict[str, str]:
    """The request's headers by lower-case name; a header that names the caller must come once."""
    identity = {"authorization", config.service_user_header.lower(), PROXY_SECRET_HEADER.lower()}
    headers: dict[str, str] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        if key in identity and key in headers:
            raise DuplicateHeader(f"{name.decode('latin-1')} appears more than once")
        headers[key] = value.decode("latin-1")
    return headers


def identify(headers: dict[str, str], client_host: str | None, config, admin_token: str | None,
             channel: ProxyChannel = ProxyChannel(over_socket=False, secret=None)) -> Caller:
    authorization = headers.get("authorization", "")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value:
        if admin_token and hmac.compare_digest(value.strip().encode(), admin_token.encode()):
            return Caller(user=None, uid=None, admin=True)
        raise Unauthorized("unknown token")
    if scheme.upper() == "MUNGE" and value:
        return _caller(_unmunge(value.strip(), config), config)
    proxied = headers.get(config.service_user_header.lower())
    if proxied:
        if _from_trusted_proxy(headers, client_host, config, channel):
            return _caller(proxied, config)
        raise Unauthorized(f"{config.service_user_header} is honoured only from the configured proxies")
    raise Unauthorized("no credentials (Authorization: MUNGE <credential>, Bearer <admin token>, or a trusted proxy)")


def _from_trusted_proxy(headers: dict[str, str], client_host: str | None, config, channel: ProxyChannel) -> bool:
    if channel.secret is not None:
        given = headers.get(PROXY_SECRET_HEADER.lower(), "")
        if not hmac.compare_digest(given.encode(), channel.secret.encode()):
            return False
    if channel.over_socket:
        return True
    if config.service_trusted_proxies:
        return client_host in config.service_trusted_proxies
    return channel.secret is not None


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
