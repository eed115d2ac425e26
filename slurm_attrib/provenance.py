"""Who could have written a piece of evidence: the one thing that decides whether it may act.

A line's appearance proves nothing (`logger -t kernel 'NVRM: Xid ...'` looks like the kernel, a
job can print anything).  What a user cannot have written is known only from where a source was
read, so every source carries its provenance and every event inherits it:

  kernel  the kernel ring buffer: dmesg, /dev/kmsg, journald's `_TRANSPORT=kernel` (journalctl -k)
  daemon  Slurm's daemons and root-run system services: their own logs (journal lines of uid 0),
          Slurm's job record and accounting
  probe   root-run probes: nvidia-smi, sysfs counters, DCGM / node_exporter metrics
  user    anything a user could have written or whose origin is unknown: job output, NCCL debug
          files, syslog lines of other users (and /var/log/syslog, which `logger` writes), uploads,
          folders a user made

An operator asserts the provenance of the logs layout's node folders by owning them (see
ingest.layout): each file then counts as what its kind says it is (a kernel log as `kernel`).

Only trusted provenance may support a drain, a fleet strike or a `confirmed` hardware verdict, and
a rule that reads kernel messages is trusted only on the kernel's own log, or on a line that a
daemon-written log files under the program `kernel` (rsyslog's kern.log, the journal of root's
services, a node's syslog the operator vouches for): a root daemon's line that quotes an Xid is
not the kernel's report of one.  `supports_verdict` is that decision;
every path that acts (the diagnosis' drain list, the fleet, the NHC check, the service) goes
through it, directly or through the events and index rows it marked.
"""

from __future__ import annotations

from enum import Enum


class Provenance(str, Enum):
    KERNEL = "kernel"
    DAEMON = "daemon"
    PROBE = "probe"
    USER = "user"

    @property
    def trusted(self) -> bool:
        return self is not Provenance.USER


# What a source of each kind is, when a root-run capture or an operator vouches for where it was read.
PROVENANCE_OF_KIND: dict[str, Provenance] = {
    "kernel": Provenance.KERNEL,
    "syslog": Provenance.DAEMON,
    "job": Provenance.DAEMON,
    "nvidia_smi": Provenance.PROBE,
    "sysfs": Provenance.PROBE,
    "metrics": Provenance.PROBE,
    "app": Provenance.USER,
}


def vouched(kind: str) -> Provenance:
    """The provenance of a source of `kind` read from a place only root or the operator writes."""
    return PROVENANCE_OF_KIND.get(kind, Provenance.USER)


def supports_verdict(provenance: Provenance, reads_kernel: bool, filed_as_kernel: bool = False) -> bool:
    """May evidence of this provenance, matched by a rule that does (or does not) read kernel
    messages, support a drain, a fleet strike or a confirmed hardware verdict?  filed_as_kernel:
    the line's syslog header names the program `kernel`."""
    if reads_kernel:
        return provenance is Provenance.KERNEL or (provenance is Provenance.DAEMON and filed_as_kernel)
    return provenance.trusted
