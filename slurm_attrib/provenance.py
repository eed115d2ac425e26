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

Only trusted provenance may support a drain, a fleet strike or a `confirmed` hardware verdict.  In
a log a daemon keeps for others (syslog, the journal, rsyslog's kern.log) a line's header names
the program that sent it, as the sender said: a line filed under any program but `kernel` never
acts (a user's `logger` line, or a daemon quoting something), and a rule that reads kernel
messages counts only on the kernel's own log or on a line filed under `kernel`.  In a plain text
syslog a user's `logger -t kernel` line is filed under `kernel` too: the epilog therefore reads
root's journal lines only and never /var/log/syslog as the daemons'; an operator who hands over
a node's syslog file vouches for what it files under `kernel`.  In that journal of root's senders
(SourceFile.root_senders) a line filed under a root daemon that reports what it saw (ROOT_DAEMONS)
is that daemon's word too.  `supports_verdict` is that decision;
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


# Root services whose own lines report what they saw, never text a user handed them: in a log of
# root's senders only (the epilog's journal, `_UID=0`: SourceFile.root_senders) a line filed under
# one of them is the daemon's word.  Not sudo, sshd or systemd-coredump (they quote a user's
# command, name or stack frames), nor a container runtime (its log driver relays a job's output).
ROOT_DAEMONS = frozenset({
    "slurmd", "slurmstepd", "slurmctld", "slurmdbd",  # Slurm
    "systemd", "systemd-logind", "systemd-networkd", "systemd-oomd", "systemd-journald", "NetworkManager",
    "nvidia-persistenced", "nv-fabricmanager", "nv-hostengine",  # NVIDIA's root services
    "rasdaemon", "chronyd", "OpenSM", "mmfsd", "nhc",
})


def supports_verdict(provenance: Provenance, reads_kernel: bool, filed_under: str | None = None,
                     root_senders: bool = False) -> bool:
    """May a line of this provenance, matched by a rule that does (or does not) read kernel
    messages, support a drain, a fleet strike or a confirmed hardware verdict?  filed_under: the
    program the line's syslog header names (None: the line has no such header); root_senders:
    the log holds root's lines only (a journal read with `_UID=0`)."""
    if not provenance.trusted:
        return False
    if provenance is Provenance.DAEMON and filed_under not in (None, "kernel"):
        return not reads_kernel and root_senders and filed_under in ROOT_DAEMONS
    if reads_kernel:
        return provenance is Provenance.KERNEL or (provenance is Provenance.DAEMON and filed_under == "kernel")
    return True
