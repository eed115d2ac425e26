"""Which switch port each host port is cabled to, from InfiniBand topology dumps as the tools print them.

`iblinkinfo` (infiniband-diags iblinkinfo.c; default output): a block per switch,

    Switch: 0x7cfe900300a1b2c3 leaf-07:
               3    1[  ] ==( 4X       25.78125 Gbps Active/  LinkUp)==>       5    1[  ] "gpu01 mlx5_0" ( )

(switch lid, switch port, link, remote lid, remote port, remote node description).

`ibnetdiscover` (infiniband-diags ibnetdiscover.c): a block per switch,

    Switch	36 "S-7cfe900300a1b2c3"		# "leaf-07" enhanced port 0 lid 3 lmc 0
    [1]	"H-0002c903000f6d21"[1](2c903000f6d22) 		# "gpu01 mlx5_0" lid 5 4xHDR

A host channel adapter's node description is `<hostname> <hca>` (the rdma-core default, e.g.
`gpu01 mlx5_0`; older stacks `gpu01 HCA-1`).  Lines that fit neither shape are skipped; a file with
no switch block in either format is an error naming the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from slurm_attrib.errors import SattribError

_IBLINK_SWITCH = re.compile(r"^Switch:\s+0x(?P<guid>[0-9a-fA-F]+)\s+(?P<name>.*?):?\s*$")
_IBLINK_PORT = re.compile(
    r"^\s*\d+\s+(?P<port>\d+)\[[^\]]*\]\s+==\((?P<link>[^)]*)\)==>\s+\d+\s+(?P<rport>\d+)\[[^\]]*\]\s+\"(?P<desc>[^\"]*)\""
)
_NETDISC_SWITCH = re.compile(r'^Switch\s+\d+\s+"S-(?P<guid>[0-9a-fA-F]+)"\s+#\s+"(?P<name>[^"]*)"')
_NETDISC_PORT = re.compile(r'^\[(?P<port>\d+)\]\s+"H-[0-9a-fA-F]+"\[(?P<rport>\d+)\](?:\([0-9a-fA-F]+\))?\s+#\s+"(?P<desc>[^"]*)"')
_BLOCK_START = re.compile(r"^(?:Switch|Ca|CA|Rt|vendid|devid|sysimgguid|caguid|switchguid)\b")


class TopologyError(SattribError):
    pass


@dataclass(frozen=True)
class SwitchPort:
    switch: str  # the switch's node description (its name), else its GUID
    guid: str
    port: int


@dataclass
class Topology:
    ports: dict[tuple[str, str, int], SwitchPort] = field(default_factory=dict)  # (host, hca, port) -> switch port

    def add(self, desc: str, host_port: int, switch_port: SwitchPort) -> None:
        host, _, hca = desc.strip().partition(" ")
        if host:
            self.ports.setdefault((host, hca.strip(), host_port), switch_port)

    def switch_of(self, host: str, device: str | None, port: int | None) -> SwitchPort | None:
        """The switch port a host's HCA port is cabled to.  The HCA named differently in the logs
        (mlx5_0) than in the node description (HCA-1) still matches when the host has only one
        candidate on that port number, or only one port at all."""
        names = {host, host.split(".", 1)[0]}
        mine = {k: v for k, v in self.ports.items() if k[0] in names or k[0].split(".", 1)[0] in names}
        for (_, hca, number), switch_port in mine.items():
            if hca == device and (port is None or number == port):
                return switch_port
        same_port = [v for (_, _, number), v in mine.items() if port is None or number == port]
        if len(set(same_port)) == 1:
            return same_port[0]
        return next(iter(mine.values())) if len(set(mine.values())) == 1 else None


def load_topology(paths: list[Path]) -> Topology:
    topology = Topology()
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise TopologyError(f"{path}: cannot read the topology file: {exc.strerror or exc}") from None
        if not _parse(text, topology):
            raise TopologyError(f"{path}: neither iblinkinfo nor ibnetdiscover output (no switch block found)")
    return topology


def _parse(text: str, topology: Topology) -> bool:
    """Add the file's host ports; False when it holds no switch block at all."""
    switch: tuple[str, str] | None = None  # (name, guid)
    switches = 0
    for line in text.splitlines():
        head = _IBLINK_SWITCH.match(line) or _NETDISC_SWITCH.match(line)
        if head:
            guid = head["guid"].lower()
            switch, switches = (head["name"].strip() or guid, guid), switches + 1
            continue
        if _BLOCK_START.match(line):
            switch = None  # a CA or router block: its lines are not a switch's ports
            continue
        if switch is None:
            continue
        port_line = _IBLINK_PORT.match(line) or _NETDISC_PORT.match(line)
        if port_line and port_line["desc"].strip():
            topology.add(port_line["desc"], int(port_line["rport"]), SwitchPort(switch[0], switch[1], int(port_line["port"])))
    return switches > 0
