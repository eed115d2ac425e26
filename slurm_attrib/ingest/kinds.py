"""Recognise a source file's kind from its content (names are only tie-breaking hints).

Kinds (vocab.SOURCE_KINDS except 'job'):
  kernel      dmesg output in any time format (`[  123.456789]`, `-T`, `--time-format iso`, delta
              `[  +0.000316]`, `-x` facility prefixes, raw `<4>[...]`), kern.log and
              `journalctl -k` (syslog-shaped lines whose program is `kernel`)
  syslog      RFC 3164 / RFC 5424 / journalctl lines of system daemons (may carry kernel lines
              too), and slurmd/slurmctld daemon logs (`[2024-12-02T13:04:06.123] ...`)
  nvidia_smi  nvidia-smi output: the table, `-q`, `-L`, `--query-gpu` CSV, its error messages
  sysfs       `path: value` / `name: value` counter and state dumps (`grep -H . /sys/...`), ibstat
  app         everything else: the job's own output

The first ~200 and last ~50 lines are sampled; each part stops early once its lines decide the
kind (_settled).  Each sampled line is classified; blank lines, indented continuation lines, `...`
and shell prompt lines (`root@node1:~# dmesg -T`) are neutral, though a prompt's command (`dmesg`,
`nvidia-smi`, `journalctl -k`) is itself a hint.
"""

from __future__ import annotations

import re

from slurm_attrib.ingest.timestamps import UNIX_TIME_DIGITS

HEAD_BYTES = 64 * 1024
TAIL_BYTES = 16 * 1024
HEAD_LINES = 200
TAIL_LINES = 50
MAX_SAMPLE_LINE = 400

_KERNEL_LINE = re.compile(
    # [  123.45], [ +0.0003], -d; from UNIX_TIME_DIGITS digits on, a UNIX time (UCX), not an uptime
    rf"(?:<\d>)?\[\s*(?:\d{{1,{UNIX_TIME_DIGITS - 1}}}\.\d+(?: <\s*\d+\.\d+>)?|[+-]\d+\.\d+)\]"
    r"|\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
    r" +\d{1,2} \d\d:\d\d:\d\d \d{4}\]"  # dmesg -T
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{6}[+-]\d\d:\d\d "  # dmesg --time-format iso
    r"|(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local\d) *:"
    r"(?:emerg|alert|crit|err|warn|notice|info|debug) *: "  # dmesg -x
)
_SYSLOG_LINE = re.compile(
    r"(?:<\d{1,3}>)?(?:"
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?(?: \d{4})?"
    r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z]{1,5})?"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?"
    r") [A-Za-z0-9][\w.-]* (?P<prog>[A-Za-z_(][^\s\[:]*)(?:\[\d+\])?:"
)
_RFC5424_LINE = re.compile(r"<\d{1,3}>1 \S+ \S+ (?P<prog>\S+) ")
# a Slurm daemon's own log line (slurmd.log, slurmctld.log): `[2024-12-02T13:04:06.123] ...`
SLURM_DAEMON_LINE = re.compile(r"\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?\] ")
# ... or slurmstepd's error in a job's own output: since Slurm 25.05 (log.c, commit 2ee5b6b760) the
# step daemon writes `[<time>] error: ...` there, without its name, so only a daemon log's other
# levels (info, debug, its plug-ins' lines) tell the daemon's log from a job's output
_STEPD_OUTPUT_LEVEL = re.compile(r"(?:error|fatal|warning): ")
_JOURNAL_MARKER = re.compile(r"-- (?:Logs begin at|Journal begins at|Boot [0-9a-f]+|No entries|Reboot)")

# anywhere in the line
_SMI_MARKER = re.compile(
    r"NVIDIA-SMI|NVSMI LOG|Unable to determine the device handle for GPU|No devices were found"
    r"|Failed to initialize NVML|couldn't communicate with the NVIDIA driver|\(UUID: GPU-"
    r"|GPU requires reset|pci\.bus_id|memory\.total|temperature\.gpu|clocks_(?:event|throttle)_reasons"
    r"|retired_pages|remapped_rows|ecc\.errors"
)
# A substring of every _SMI_MARKER alternative: the search (an alternation, slow in `re` on a
# long line) runs only on the few lines holding one (_may_be_smi_marker).
_SMI_MARKER_PARTS = ("NV", "GPU", "devices", "pci.", "memory.", "temperature.", "ecc.", "_reasons",
                     "retired_pages", "remapped_rows")


def _may_be_smi_marker(line: str) -> bool:
    # Spelled out: any() over _SMI_MARKER_PARTS cost a third of reading a 4,096-node job's layout.
    return ("NV" in line or "GPU" in line or "devices" in line or "pci." in line or "memory." in line
            or "temperature." in line or "ecc." in line or "_reasons" in line or "retired_pages" in line
            or "remapped_rows" in line)
# at the start of the line
_SMI_START = re.compile(
    r"GPU [0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$"
    r"|(?:Driver Version|CUDA Version|Attached GPUs|Timestamp)\s+: "
)
_SMI_TABLE = re.compile(r"\+[-=+]{8,}\+\s*$|\|.*\|\s*$")
_SMI_KV = re.compile(r"\s{4,}[A-Z][\w ()/.-]*?\s+: ")
# table rows, -q key/values and CSV rows count only next to a strong marker (an app may print a
# table of its own)
_SMI_CSV_ROW = re.compile(r"\d+, .*(?:NVIDIA|00000000:[0-9A-Fa-f]{2}:|GPU-[0-9a-f]{8}-)")

_SYSFS_STRONG = re.compile(r"/(?:sys|proc)/\S*?[:= ]\s*\S|CA '[\w-]+'\s*$")
_SYSFS_KV = re.compile(r"(?:[\w.+@-]+/)*[\w.+@-]+\s*[:=]\s*(?P<v>\S+)\s*$")
_IBSTAT_KV = re.compile(r"\s+[A-Z][\w ]*: \S")
_NUMERIC = re.compile(r"(?:-?\d+(?:\.\d+)?|0x[0-9a-fA-F]+)$")

_PROMPT = re.compile(
    r"(?:\([\w.-]+\)\s+)?[\w.-]+@[\w.-]+(?::[^\s#$%]*)?(?:\s+[^\s#$%]+)?\s*[#$%>]\s?(?P<cmd>.*)$"
    r"|\[[\w.-]+@[\w.-]+(?: [^\]]*)?\][#$]\s?(?P<cmd2>.*)$"
    r"|[#$%] +(?P<cmd3>(?:sudo +)?(?:dmesg|journalctl|nvidia-smi|cat|zcat|grep|zgrep|tail|head|less)\b.*)$"
)
_ELLIPSIS = re.compile(r"(?:\.{3,}|…|\[\.\.\.\]|<snip>|\[snip\])\s*$")

_NAME_HINTS = (
    ("nvidia_smi", ("nvidia_smi", "nvidia-smi", "nvsmi")),
    ("kernel", ("dmesg", "kern.log", "kernel", "kmsg")),
    ("syslog", ("syslog", "messages", "journal", "daemon.log", "slurmd", "slurmctld")),
    ("sysfs", ("sysfs", "counters", "aer_dev")),
)


def name_hint(name: str) -> str | None:
    """The kind a file name suggests (a hint only), or None."""
    lowered = name.rsplit("/", 1)[-1].lower()
    for kind, needles in _NAME_HINTS:
        if any(n in lowered for n in needles):
            return kind
    return None


def _command_hint(cmd: str) -> str | None:
    cmd = cmd.strip()
    if not cmd:
        return None
    if "nvidia-smi" in cmd:
        return "nvidia_smi"
    journalctl = re.search(r"journalctl\b", cmd)
    # the flag searched from the first `journalctl` on: `journalctl\b.*\s-\w*k` is quadratic in the line
    if "dmesg" in cmd or "kern.log" in cmd or (journalctl and re.search(r"\s-\w*k", cmd[journalctl.end():])):
        return "kernel"
    if "journalctl" in cmd or "/var/log/syslog" in cmd or "/var/log/messages" in cmd:
        return "syslog"
    if "/sys/" in cmd:
        return "sysfs"
    return None


def _decode(raw: bytes) -> str:
    return raw[: MAX_SAMPLE_LINE * 2].decode("utf-8", errors="replace")[:MAX_SAMPLE_LINE].rstrip("\r\n\x00")


def _sample(data: bytes) -> tuple[list[bytes], list[bytes]]:
    """(head lines, tail lines), undecoded; the tail is empty when the head covers the file."""
    head = data[:HEAD_BYTES]
    lines = head.split(b"\n", HEAD_LINES)[:HEAD_LINES]
    covered = len(data) <= HEAD_BYTES and head.count(b"\n") < HEAD_LINES
    tail_lines: list[bytes] = []
    if not covered:
        tail = data[-TAIL_BYTES:]
        cut = tail.find(b"\n")
        tail_lines = tail[cut + 1:].split(b"\n")[-TAIL_LINES:] if cut >= 0 else []
    return lines, tail_lines


# what a blank line or an indented one starts with (bytes.strip's whitespace); b"" for an empty line
_BLANK_STARTS = frozenset((b"", b" ", b"\t", b"\r", b"\n", b"\x0b", b"\x0c"))


def _dedented(lines: list[bytes]) -> list[bytes]:
    """The lines without the blanks all of them start with (a block pasted indented: a post's code
    block, a quoted file), which would leave every line neutral but a rare marker."""
    if any(line[:1] not in _BLANK_STARTS for line in lines):
        return lines  # a line starts with text: nothing in common (most files, read at no cost)
    indents = [len(line) - len(line.lstrip(b" \t")) for line in lines if line.strip()]
    common = min(indents, default=0)
    return [line[common:] for line in lines] if common else lines


# A part of the sample stops early once this many lines were classified and one class holds
# DECIDED_SHARE of them (keeps 10,000-file directories fast).
DECIDED_AFTER = 40
DECIDED_SHARE = 0.9
# detect_kind's bounds for system lines (kernel and daemons' lines together)
DAEMONS_KERNEL = 0.1  # system lines with at most this share of daemons' lines: a kernel log
DAEMONS_SYSLOG = 0.5  # at least this share: a syslog; between: as the name or a prompt hints
DAEMONS_MARGIN = 0.1


_KERNEL_FIRST = frozenset("[<0123456789kumdalnscf")
_SYSLOG_FIRST = frozenset("<0123456789JFMASONDTW")


def _classify(line: str) -> tuple[str | None, str | None]:
    """(class, command hint) of one sampled line; class None for neutral lines.

    Classes: kernel, syslog, smi (strong nvidia-smi marker), smi_weak (table row, -q key/value,
    CSV row), sysfs_strong, sysfs_num, sysfs, app.  Cheap first-character checks keep the
    number of regexes tried per line small.
    """
    if not line or line.isspace():
        return None, None
    if (_may_be_smi_marker(line) and _SMI_MARKER.search(line)) or _SMI_START.match(line):
        return "smi", None
    first = line[0]
    if first in "|+ \t0123456789" and (_SMI_TABLE.match(line) or _SMI_KV.match(line) or _SMI_CSV_ROW.match(line)):
        return "smi_weak", None
    if first in " \t":
        if _IBSTAT_KV.match(line):
            return "sysfs", None
        return None, None  # continuation / indented output: neutral
    if first in _KERNEL_FIRST and _KERNEL_LINE.match(line):
        return "kernel", None
    if first in _SYSLOG_FIRST:
        found = _SYSLOG_LINE.match(line) or (_RFC5424_LINE.match(line) if first == "<" else None)
        if found is not None:
            return ("kernel" if found["prog"] == "kernel" else "syslog"), None
    if first == "[":
        daemon = SLURM_DAEMON_LINE.match(line)
        if daemon is not None:
            return (None if _STEPD_OUTPUT_LEVEL.match(line, daemon.end()) else "syslog"), None
    if first in "/C" and _SYSFS_STRONG.match(line):
        return "sysfs_strong", None
    if "@" in line or first in "#$%":
        prompt = _PROMPT.match(line)
        if prompt is not None:
            return None, _command_hint(prompt["cmd"] or prompt["cmd2"] or prompt["cmd3"] or "")
    if first in ".…[<-#" and (_ELLIPSIS.match(line) or _JOURNAL_MARKER.match(line) or line.startswith("# ")):
        return None, None
    if ":" in line or "=" in line:
        kv = _SYSFS_KV.match(line)
        if kv is not None:
            return ("sysfs_num" if _NUMERIC.match(kv["v"]) else "sysfs"), None
    return "app", None


def _settled(counts: dict[str, int], hint: str | None) -> bool:
    """Whether the lines classified so far already decide the kind: one class holds DECIDED_SHARE
    of them, or system lines do and the share of daemons' lines among them is DAEMONS_MARGIN
    away from the bound the decision turns on (0.1, or with a kernel hint 0.5; detect_kind): a
    journal mixes kernel and daemon lines, and without this its whole sample was read."""
    total = sum(counts.values())
    if max(counts.values()) >= DECIDED_SHARE * total:
        return True
    system = counts["kernel"] + counts["syslog"]
    if system < DECIDED_SHARE * total:
        return False
    bound = DAEMONS_SYSLOG if hint == "kernel" else DAEMONS_KERNEL
    return abs(counts["syslog"] / system - bound) >= DAEMONS_MARGIN


def detect_kind(data: bytes, name: str) -> str:
    """One of 'kernel', 'syslog', 'app', 'nvidia_smi', 'sysfs', recognised from content."""
    counts = dict.fromkeys(("kernel", "syslog", "smi", "smi_weak", "sysfs_strong", "sysfs_num", "sysfs", "app"), 0)
    hints: list[str] = []
    by_name = name_hint(name)
    for part in _sample(data):
        classified = 0
        for raw in _dedented(part):
            cls, command = _classify(_decode(raw))
            if command:
                hints.append(command)
            if cls is None:
                continue
            counts[cls] += 1
            classified += 1
            if classified % DECIDED_AFTER == 0 and _settled(counts, hints[-1] if hints else by_name):
                break
    kernel, syslog, app = counts["kernel"], counts["syslog"], counts["app"]
    smi_strong = counts["smi"]
    sysfs_strong = counts["sysfs_strong"]
    sysfs_numeric = counts["sysfs_num"] + sysfs_strong
    sysfs = counts["sysfs"] + counts["sysfs_num"] + sysfs_strong
    hint = hints[-1] if hints else by_name
    # -q key/value rows are nvidia-smi's beside a marker of its own, or in a file named for it
    # (an excerpt of `nvidia-smi -q` without its header)
    if smi_strong or hint == "nvidia_smi":
        smi = smi_strong + counts["smi_weak"]
    else:
        smi = 0
        app += counts["smi_weak"]

    total = kernel + syslog + smi + sysfs + app
    if total == 0:
        return hint or "app"

    def share(count: int) -> float:
        return count / total

    system = kernel + syslog
    if share(system) >= 0.5 or (share(system) >= 0.3 and hint in ("kernel", "syslog")):
        daemons = syslog / system
        if daemons <= DAEMONS_KERNEL:
            return "kernel"
        if daemons >= DAEMONS_SYSLOG:
            return "syslog"
        return "kernel" if hint == "kernel" else "syslog"
    if smi and (share(smi) >= 0.5 or (share(smi) >= 0.3 and hint == "nvidia_smi")):
        return "nvidia_smi"
    if sysfs and share(sysfs) >= 0.8 and (sysfs_strong or sysfs_numeric * 2 >= sysfs or hint == "sysfs"):
        return "sysfs"
    return "app"
