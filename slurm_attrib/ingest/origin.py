"""Where a log line came from, read from its prefixes: host, global rank, srun task.

Recognised prefixes (combinable in this order):
- what a container's output was read through: a CRI log file's `<time> stdout F `, `kubectl logs
  --prefix`'s `[pod/<pod>/<container>] `, Docker Compose's `<service>-<N>  | ` -> skipped
- `srun --label`: `12: ...` (possibly right-aligned: ` 3: ...`) -> task
- Open MPI `mpirun --tag-output`: `[1,3]<stdout>:` -> rank (the second number); horovodrun's
  Gloo launcher: `[3]<stderr>:` -> rank
- PyTorch: `[rank3]:...` -> rank
- NCCL: `host:pid:tid [dev] ...`, optionally after the NCCL 2.26+ WARN time `[2024-12-02 13:04:06] `
  -> host (NCCL prints the short hostname)
- syslog / journal headers: RFC 3164 `Dec  2 13:04:06 host prog[pid]: `, journalctl short,
  short-precise, short-iso(-precise), short-full, RFC 5424 `<pri>1 ts host app procid msgid ...`
  -> host
- `[Rank N]` inside PyTorch watchdog / WorkNCCL messages, `[PG 0 Rank N]` / `[PG ID 0 ... Rank N]`
  (the default process group, whose rank is the global rank) -> rank, when no `[rankN]:` prefix.

Hosts are returned as short hostnames (the part before the first `.`) unless they are IP
addresses, so that they compare equal to Slurm node names and NCCL's short names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Origin:
    host: str | None = None
    rank: int | None = None
    task: int | None = None
    program: str | None = None  # the syslog header's program (`kernel`, `slurmd`): who the line says it is


NO_ORIGIN = Origin()

# The prefixes launchers put before a program's own line, in the order they combine: srun --label,
# mpirun --tag-output, torchrun's [defaultN]: (a local rank), PyTorch's [rankN]:.
_LAUNCHER_PREFIXES = (r" {0,6}(\d{1,6}): ", r"\[(?:\d{1,6},)?(\d{1,7})\]<std(?:out|err)>:", r"\[default\d{1,5}\]:",
                      r"\[(?:rank|RANK)(\d{1,7})\]:")
_LABEL, _MPI_TAG, _DEFAULT_PREFIX, _RANK_PREFIX = map(re.compile, _LAUNCHER_PREFIXES)
# Before them, what a container's log was read through: the runtime's log file (Kubernetes' CRI
# format: `<RFC 3339 time> stdout F `), `kubectl logs --prefix` (`[pod/<pod>/<container>] `) or
# Docker Compose (`<service>-<N>  | `, Compose v1 `<project>_<service>_<N>  | `, the name padded);
# between the MPI tag and torchrun's, Ray's driver's name for the worker or daemon a line came from
# (`(RayTrainWorker pid=4242, ip=10.0.0.7) `, `(pid=4242) `, `(raylet, ip=10.0.0.7) `).  Where all
# of them end, the program's own line begins (launcher_prefix_end).
_CONTAINER_LOG = (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d) (?:stdout|stderr) [FP] "
                  r"|\[pod/[\w.-]{1,253}/[\w.-]{1,63}\] |[\w.-]{1,64}[-_]\d{1,4} {1,64}\| ")
_CONTAINER = re.compile(_CONTAINER_LOG)
_RAY_PREFIX = r"\((?:[\w.-]+ pid=\d+|pid=\d+|raylet)(?:, ip=[\d.]+)?\) "
_LAUNCHER_PREFIX = re.compile("".join(
    f"(?:{p})?" for p in (_CONTAINER_LOG, *_LAUNCHER_PREFIXES[:2], _RAY_PREFIX, *_LAUNCHER_PREFIXES[2:])).encode())
_NCCL_TIME = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\] ")
_NCCL = re.compile(r"([A-Za-z0-9][\w.-]*):(\d+):(\d+) \[-?\d+\] ")
_HOST = r"(?P<host>[A-Za-z0-9][\w.-]*)"
_PROG = r" (?P<prog>[A-Za-z_(][^\s\[:]*)(?:\[\d+\])?:"
_SYSLOG_STAMP = (
    # RFC 3164, journalctl short / short-precise (optional year)
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?(?: \d{4})?"
    # journalctl short-full
    r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z]{1,5})?"
    # ISO 8601 / journalctl short-iso(-precise) (dot fractions only: `,` is dmesg --time-format iso)
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?"
)
SYSLOG_HOST_AND_PROGRAM = " " + _HOST + _PROG  # after the stamp
_SYSLOG = re.compile(r"(?:<\d{1,3}>)?(?:" + _SYSLOG_STAMP + ")" + SYSLOG_HOST_AND_PROGRAM)
# RFC 5424: <pri>VERSION TIMESTAMP HOST APP PROCID MSGID ... (VERSION is 1 in every syslog of today;
# any digits are read as one, so that where a message starts is the same on every line of a shape:
# ruleset/shapes.py)
_RFC5424 = re.compile(r"<\d{1,3}>\d{1,2} (?:\S+) " + _HOST + r" ")
# talosctl dmesg (Talos Linux, Kubernetes nodes): `<node>: kern: warning: [<time>]: <message>`
_TALOS = re.compile(
    _HOST + r": (?:kern|user|daemon|syslog|auth|local\d): +(?:emerg|alert|crit|err|warning|notice|info|debug): +\["
)
_WORK_RANK = re.compile(r"\[(?:PG (?:ID )?0 [^\]]*?)?Rank (\d{1,7})\]")
_IP = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}")


def _short(host: str) -> str | None:
    if host in ("-", "localhost"):
        return None
    if _IP.fullmatch(host):
        return host
    return host.split(".", 1)[0] or None


def launcher_prefix_end(line: bytes) -> int:
    """Where the launchers' prefixes before the program's own line end (0: it has none)."""
    return _LAUNCHER_PREFIX.match(line).end()


# What may stand before the launchers' prefixes when a line was relayed: the time a logging handler
# or `ts` put first (`2024-05-01 10:00:00,123 `, `[10:00:00] `), then the host pdsh, clush or
# DeepSpeed's multi-node runner names (`worker-1: `, `gr064: `: a name with a digit, unlike the
# programs that name themselves so, `redis: `, `srun: `), a post's quote marker (`> `) or pytest's
# mark before the lines of a failure it reports (`E       AttributeError: ...`).  Unlike
# the launchers' prefixes they may be a program's own words (`HDF5-DIAG: `, a daemon's stamp), so
# a rule reads past them only when it does not match before (scanner._read).
_RELAYED_AT = rb"\[?(?:\d{4}[-/]\d\d[-/]\d\d[ T])?\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?\]?:? "
_RELAYED_BY = rb"[A-Za-z](?=[\w.-]{0,62}?\d)[\w.-]{0,62}: |> ?|E {3,8}"
_RELAY_PREFIX = re.compile(rb"(?:" + _RELAYED_AT + rb"(?:" + _RELAYED_BY + rb")?|" + _RELAYED_BY + rb")")


def relay_prefix(line: bytes) -> bytes:
    """The prefix a relaying tool or a logger may have put before the line (b"": none)."""
    m = _RELAY_PREFIX.match(line)
    return b"" if m is None else m.group()


def relay_prefix_end(line: bytes) -> int:
    """Where a relaying tool's prefix and the launchers' prefixes after it end (0: it has none)."""
    relayed = len(relay_prefix(line))
    if not relayed:
        return 0
    return relayed + launcher_prefix_end(line[relayed:])


# The headers that name a line's host before its message (syslog and journal, RFC 5424, talosctl,
# NCCL's `host:pid:tid [dev] `), as bytes for the scanner (message_start).
_HEADERS = [re.compile(pattern.pattern.encode()) for pattern in (_SYSLOG, _RFC5424, _TALOS)]
_NCCL_HEADER = re.compile(("(?:" + _NCCL_TIME.pattern + ")?" + _NCCL.pattern).encode())


def message_start(line: bytes) -> int:
    """Where the line's message begins: after the launchers' prefixes and a header that names the
    host it came from (its words are no words of the message: a host `gpu001` names no GPU)."""
    position = launcher_prefix_end(line)
    for header in (*_HEADERS, _NCCL_HEADER):
        m = header.match(line, position)
        if m is not None:
            return m.end()
    return position


def line_origin(text: str) -> Origin:
    """Host, rank and srun task read from the prefixes of one line (None when absent)."""
    if not text:
        return NO_ORIGIN
    if len(text) > 1024:
        text = text[:1024]
    container = _CONTAINER.match(text)
    pos = 0 if container is None else container.end()
    task = rank = host = program = None
    if text[pos:pos + 1] == " " or text[pos:pos + 1].isdecimal():  # what _LABEL may start with (\d: any decimal digit)
        m = _LABEL.match(text, pos)
        if m is not None:
            task = int(m.group(1))
            pos = m.end()
    if text.startswith("[", pos):  # the three bracketed prefixes: most lines have none
        m = _MPI_TAG.match(text, pos) if text[pos + 1:pos + 2].isdigit() else None
        if m is not None:
            rank = int(m.group(1))
            pos = m.end()
        m = _DEFAULT_PREFIX.match(text, pos) if text.startswith("[default", pos) else None
        if m is not None:  # torchrun's [defaultN]: is a local rank: skipped
            pos = m.end()
        m = _RANK_PREFIX.match(text, pos) if text.startswith(("[rank", "[RANK"), pos) else None
        if m is not None:
            rank = int(m.group(1))
            pos = m.end()
    first = text[pos:pos + 1]
    if first == "[":
        m = _NCCL_TIME.match(text, pos)
        if m is not None:
            m = _NCCL.match(text, m.end())
            if m is not None:
                host = _short(m.group(1))
    elif first == "<":
        m = _RFC5424.match(text, pos) or _SYSLOG.match(text, pos)
        if m is not None:
            host = _short(m["host"])
            program = m.groupdict().get("prog")
    elif first:
        m = _SYSLOG.match(text, pos) if (first.isupper() or first.isdigit()) else None
        if m is not None:
            host = _short(m["host"])
            program = m["prog"]
        else:
            m = _NCCL.match(text, pos) or _TALOS.match(text, pos)
            if m is not None:
                host = _short(m.group(1))
    if rank is None and "Rank " in text:
        m = _WORK_RANK.search(text, pos)
        if m is not None:
            rank = int(m.group(1))
    if task is None and rank is None and host is None:
        return NO_ORIGIN
    return Origin(host, rank, task, program)
