"""GPU identities (UUID, serial number) by node and PCI bus id, from nvidia-smi output captured with
the logs, so the fleet can follow a GPU that moves to another slot or node.

Recognised: `nvidia-smi --query-gpu=pci.bus_id,uuid,serial --format=csv[,noheader]` lines
(`00000000:3B:00.0, GPU-8f6d..., 1321021034567`, the epilog's `gpu_identity` source) and `nvidia-smi
-q` blocks (`GPU 00000000:3B:00.0` followed by `Serial Number : ...` and `GPU UUID : GPU-...`), and
the driver's own kernel line before an Xid, `NVRM: GPU at PCI:0000:3b:00: GPU-<uuid>`.
Read from the files of the nodes whose GPUs a rule named: nvidia-smi output (kind `nvidia_smi`), or
command output that the kind detector took for application text (a headerless CSV has no
nvidia-smi marker), and the kernel's lines; the patterns are strict, and an identity only labels a
GPU that a rule already named.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from slurm_attrib.ingest.types import Evidence, SourceFile

MAX_BYTES = 1024 * 1024
_PCI = r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?"
_UUID = r"(?P<uuid>GPU-[0-9a-fA-F]{8}-[0-9a-fA-F-]{27})"
_CSV = re.compile(rf"^\s*{_PCI}\s*,\s*{_UUID}\s*,\s*(?P<serial>[\w-]+|\[N/A\]|\[Not Supported\])\s*$", re.M)
_Q_BLOCK = re.compile(rf"^GPU {_PCI}\s*$", re.M)
_Q_SERIAL = re.compile(r"^\s+Serial Number\s+:\s+(\S+)\s*$", re.M)
_Q_UUID = re.compile(rf"^\s+GPU UUID\s+:\s+{_UUID}\s*$", re.M)
_KERNEL = re.compile(rf"NVRM: GPU at PCI:{_PCI}: {_UUID}")


def pci_key(pci: str) -> str:
    """`00000000:3B:00.0` and `0000:3b:00` name the same GPU: domain as 4 hex digits, lower case,
    no function."""
    parts = pci.lower().split(".")[0].split(":")
    domain = parts[-3] if len(parts) >= 3 else "0"
    try:
        return f"{int(domain, 16):04x}:{':'.join(parts[-2:])}"
    except ValueError:
        return pci.lower()


def identity_csv(rows) -> bytes:
    """(pci bus id, uuid[, serial]) rows as nvidia-smi `--query-gpu=pci.bus_id,uuid,serial` CSV
    lines, the form gpu_identities reads: how GPUs known from elsewhere (the prolog's capture,
    DCGM's labels) join the evidence."""
    lines = [f"{row[0]}, {row[1]}, {(row[2] if len(row) > 2 else '') or '[N/A]'}" for row in rows]
    return ("\n".join(dict.fromkeys(lines)) + "\n").encode("utf-8", "replace") if lines else b""


def gpu_identities(evidence: Evidence, nodes: Collection[str]) -> dict[tuple[str, str], dict[str, str]]:
    """(node, pci_key) -> {"uuid": ..., "serial": ...} (keys present when known), from the files
    of `nodes`.  The kernel's and the journal's lines are read whatever their size, held or not (a
    node's dmesg above the held size keeps the driver's line of the GPU that failed); nvidia-smi
    and command output up to MAX_BYTES."""
    found: dict[tuple[str, str], dict[str, str]] = {}
    for source in evidence.files:
        if source.kind in ("nvidia_smi", "app", "kernel", "syslog") and source.node in nodes:
            for pci, identity in _identities_in(source):
                found.setdefault((source.node, pci_key(pci)), {}).update(identity)
    return found


def _identities_in(source: SourceFile) -> list[tuple[str, dict]]:
    if source.kind in ("kernel", "syslog"):
        return [found for block in source.blocks() if b"NVRM: GPU at PCI:" in block
                for found in _from_kernel(block.decode("utf-8", errors="replace"))]
    if source.content_size() > MAX_BYTES:
        return []
    text = source.data.decode("utf-8", errors="replace")
    return [*_from_kernel(text), *_from_csv(text), *_from_query(text)]


def _from_kernel(text: str) -> list[tuple[str, dict]]:
    return [(m["pci"], {"uuid": m["uuid"]}) for m in _KERNEL.finditer(text)] if "NVRM: GPU at PCI:" in text else []


def _from_csv(text: str) -> list[tuple[str, dict]]:
    out = []
    for match in _CSV.finditer(text):
        identity = {"uuid": match["uuid"]}
        if not match["serial"].startswith("["):
            identity["serial"] = match["serial"]
        out.append((match["pci"], identity))
    return out


def _from_query(text: str) -> list[tuple[str, dict]]:
    blocks = list(_Q_BLOCK.finditer(text))
    out = []
    for block, following in zip(blocks, [*blocks[1:], None]):
        body = text[block.end(): following.start() if following else len(text)]
        identity = {}
        if serial := _Q_SERIAL.search(body):
            if not serial[1].startswith(("N/A", "[")):
                identity["serial"] = serial[1]
        if uuid := _Q_UUID.search(body):
            identity["uuid"] = uuid["uuid"]
        if identity:
            out.append((block["pci"], identity))
    return out
