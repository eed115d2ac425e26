"""IP address -> hostname pairs from name-service output pasted or captured with the logs.

Recognised: `/etc/hosts` and `getent hosts` lines (`10.0.0.5  gpu05.cluster gpu05`), reverse
lookups (`5.0.0.10.in-addr.arpa  name = gpu05.cluster.` from nslookup, `... domain name pointer
gpu05.cluster.` from host(1), dig's `... PTR gpu05.cluster.`) and forward nslookup answers
(`Name: gpu05.cluster` followed by `Address: 10.0.0.5`).  These lines hold no literal the rule
scanner could look for, so only small job-level files (pastes, command output) are read.
"""

from __future__ import annotations

import re

from slurm_attrib.ingest.types import Evidence

MAX_BYTES = 256 * 1024  # name-service output is short; job logs larger than this are not read

_HOSTNAME = r"[A-Za-z][\w-]*(?:\.[\w-]+)*"
_IPV4 = r"(?:\d{1,3}\.){3}\d{1,3}"
_HOSTS_LINE = re.compile(rf"^[ \t]*({_IPV4})[ \t]+({_HOSTNAME})\.?(?:[ \t]+{_HOSTNAME})*[ \t]*$", re.M)
_REVERSE = re.compile(
    rf"^[ \t]*(\d{{1,3}})\.(\d{{1,3}})\.(\d{{1,3}})\.(\d{{1,3}})\.in-addr\.arpa\.?[ \t]+"
    rf"(?:name = |domain name pointer |(?:\d+[ \t]+)?IN[ \t]+PTR[ \t]+|PTR[ \t]+)({_HOSTNAME})\.?[ \t]*$",
    re.M,
)
_FORWARD = re.compile(rf"^Name:[ \t]+({_HOSTNAME})\.?[ \t]*\r?\nAddress(?:es)?:[ \t]+({_IPV4})", re.M)


def ip_host_pairs(evidence: Evidence) -> dict[str, str]:
    """IP -> short hostname, first mapping wins (files in evidence order)."""
    pairs: dict[str, str] = {}
    for source in evidence.files:
        if source.kind != "app" or len(source.data) > MAX_BYTES:
            continue
        text = source.data.decode("utf-8", errors="replace")
        if "." not in text:
            continue
        for ip, host in _pairs(text):
            if _valid_ip(ip):
                pairs.setdefault(ip, host.split(".", 1)[0])
    return pairs


def _pairs(text: str) -> list[tuple[str, str]]:
    found = [(m.group(1), m.group(2)) for m in _HOSTS_LINE.finditer(text)]
    found += [(".".join(m.group(i) for i in (4, 3, 2, 1)), m.group(5)) for m in _REVERSE.finditer(text)]
    found += [(m.group(2), m.group(1)) for m in _FORWARD.finditer(text)]
    return [(ip, host) for ip, host in found if host.lower() not in ("localhost", "ip6-localhost")]


def _valid_ip(ip: str) -> bool:
    octets = [int(part) for part in ip.split(".")]
    return all(o <= 255 for o in octets) and octets[0] not in (0, 127)
