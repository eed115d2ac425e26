"""Shared helpers for the prolog and epilog (stdlib only)."""

from __future__ import annotations

import glob
import json
import os
import pwd
import re
import stat
import subprocess
import sys
import time
from array import array
from dataclasses import dataclass

from slurm_attrib import atomic, hostlist

BUNDLE_FORMAT = "sattrib-node-bundle"
BUNDLE_VERSION = 1
PROLOG_FORMAT = "sattrib-prolog-record"
PROLOG_VERSION = 1

# Array jobs `123_4`, heterogeneous components `123+1`; Slurm itself gives plain numbers.
JOB_ID_RE = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,10}|\+[0-9]{1,4})?")  # with fullmatch: "1\n" fails
NODE_RE = re.compile(r"[A-Za-z0-9._-]{1,255}")

IB_COUNTERS = (
    "link_downed",
    "link_error_recovery",
    "symbol_error",
    "port_rcv_errors",
    "port_xmit_discards",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_rcv_constraint_errors",
    "port_xmit_constraint_errors",
    "VL15_dropped",
)


class CaptureError(Exception):
    pass


def valid_job_id(job_id: str | None) -> bool:
    return bool(job_id) and bool(JOB_ID_RE.fullmatch(job_id)) and ".." not in job_id


def valid_node(node: str | None) -> bool:
    return bool(node) and bool(NODE_RE.fullmatch(node)) and node not in (".", "..")


def sysfs_root() -> str:
    return os.environ.get("SATTRIB_SYSFS_ROOT") or "/sys"


def proc_root() -> str:
    return os.environ.get("SATTRIB_PROC_ROOT") or "/proc"


# --------------------------------------------------------------------------- syslog

_syslog_opened = False


def exit_zero() -> None:
    """Leave at once with status 0: a failing Prolog/Epilog drains the node.  Streams are
    flushed first (best effort); no atexit handler or stuck thread can delay or change it."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass
    os._exit(0)


def log_syslog(ident: str, message: str, error: bool = True) -> None:
    """Best effort: never raises."""
    global _syslog_opened
    try:
        import syslog

        if not _syslog_opened:
            syslog.openlog(ident, syslog.LOG_PID, syslog.LOG_DAEMON)
            _syslog_opened = True
        syslog.syslog(syslog.LOG_ERR if error else syslog.LOG_INFO, message[:2000])
    except Exception:
        pass


# --------------------------------------------------------------------------- kept lines

_encode_text = json.encoder.encode_basestring  # what json.dumps(ensure_ascii=False) writes for a str


class KeptLines:
    """A source's kept lines, the bundle's `lines` ([line number, text] pairs in line order), held
    as their JSON text in one buffer: a Python list would cost a list, an int and a str per line
    (about 150 bytes over the text) for up to a bundle's worth of lines.  The bundle writer
    (epilog.gzip_json) copies `json_parts()` as they are.  Iterating decodes the pairs."""

    def __init__(self, pairs=()):
        self.body = bytearray()  # `[n,"text"],[n,"text"]`: the array without its brackets
        self.starts = array("Q")  # where each pair starts in body (at its comma)
        self.last_lineno: int | None = None
        for lineno, text in pairs:
            self.append(lineno, text)

    def append(self, lineno: int, text: bytes) -> None:
        """The line numbered `lineno` (UTF-8, invalid bytes replaced), after the lines held; a
        repeat of the last line number is skipped."""
        if lineno == self.last_lineno:
            return
        self.last_lineno = lineno
        self.starts.append(len(self.body))
        quoted = _encode_text(text.decode("utf-8", "replace")).encode("utf-8")
        self.body += b"%s[%d,%s]" % (b"," if len(self.starts) > 1 else b"", lineno, quoted)

    def __len__(self) -> int:
        return len(self.starts)

    def __iter__(self):
        ends = [*self.starts[1:], len(self.body)]
        for start, end in zip(self.starts, ends):
            lineno, text = json.loads(self.body[start:end].lstrip(b","))
            yield lineno, text

    def without(self, start: int, stop: int) -> KeptLines:
        """These lines but the ones at positions start to stop-1 (0 < start <= stop < len)."""
        out = KeptLines()
        cut, resume = self.starts[start], self.starts[stop]
        out.body = self.body[:cut] + self.body[resume:]
        out.starts = self.starts[:start] + array("Q", (at - (resume - cut) for at in self.starts[stop:]))
        out.last_lineno = self.last_lineno
        return out

    def json_parts(self) -> tuple[bytes, bytearray, bytes]:
        return b"[", self.body, b"]"


# --------------------------------------------------------------------------- hostlists

def expand_hostlist(expr: str | None, timeout: float = 2.0) -> tuple[list[str], str]:
    """(hosts, method).  `scontrol show hostnames` (local, no RPC) first, else the stdlib expander."""
    if not expr:
        return [], "none"
    if "[" not in expr:
        return hostlist.expand(expr), "plain"
    for scontrol in ("/usr/bin/scontrol", "/usr/local/bin/scontrol", "/opt/slurm/bin/scontrol"):
        if os.access(scontrol, os.X_OK):
            try:
                done = subprocess.run(
                    [scontrol, "show", "hostnames", expr],
                    capture_output=True,
                    timeout=timeout,
                    start_new_session=True,
                )
                hosts = done.stdout.decode("utf-8", "replace").split()
                if done.returncode == 0 and hosts:
                    return hosts, "scontrol"
            except (OSError, subprocess.SubprocessError):
                pass
            break
    try:
        return hostlist.expand(expr), "python"
    except ValueError:
        return [], "failed"


# --------------------------------------------------------------------------- job context


def job_context_from_env(env: dict[str, str]) -> dict:
    """The job facts the node Epilog sees (Slurm 22.05: no START/END_TIME; the prolog record fills in)."""

    def num(name: str) -> float | None:
        try:
            return float(env[name])
        except (KeyError, ValueError):
            return None

    ctx = {
        "job_id": env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"),
        "user": env.get("SLURM_JOB_USER"),
        "uid": env.get("SLURM_JOB_UID"),
        "gid": env.get("SLURM_JOB_GID"),
        "nodelist": env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"),
        "exit_code": env.get("SLURM_JOB_EXIT_CODE2"),
        "exit_status_raw": env.get("SLURM_JOB_EXIT_CODE"),
        "derived_exit_code": env.get("SLURM_JOB_DERIVED_EC"),
        "start": num("SLURM_JOB_START_TIME"),
        "end": num("SLURM_JOB_END_TIME"),
        "partition": env.get("SLURM_JOB_PARTITION"),
        "account": env.get("SLURM_JOB_ACCOUNT"),
        "cluster": env.get("SLURM_CLUSTER_NAME"),
        "num_nodes": env.get("SLURM_JOB_NUM_NODES"),
        "restart_count": env.get("SLURM_JOB_RESTART_COUNT"),
        "het_job_id": env.get("SLURM_HET_JOB_ID") or env.get("SLURM_PACK_JOB_ID"),
        "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": env.get("SLURM_ARRAY_TASK_ID"),
        "job_name": env.get("SLURM_JOB_NAME"),
        "work_dir": env.get("SLURM_JOB_WORK_DIR"),
        "stdout": env.get("SLURM_JOB_STDOUT"),
        "stderr": env.get("SLURM_JOB_STDERR"),
        "gpus": env.get("SLURM_JOB_GPUS"),
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "script_context": env.get("SLURM_SCRIPT_CONTEXT"),
        "state": env.get("SATTRIB_JOB_STATE"),  # no job-state variable in the node Epilog
    }
    return {k: v for k, v in ctx.items() if v not in (None, "")}


_PATTERN_RE = re.compile(r"%(\d*)([%AajNnuxstJ])")


def expand_output_pattern(pattern: str, ctx: dict, node: str) -> str:
    """Expand Slurm's filename pattern (%j %u %x %N %n %A %a %%, optional zero padding like %4j).

    Raises CaptureError when the pattern needs a value the Epilog does not have (e.g. %x)."""
    job_id = str(ctx.get("job_id", ""))
    values = {
        "j": job_id,
        "J": job_id,
        "u": ctx.get("user"),
        "x": ctx.get("job_name"),
        "N": node,
        "n": "0",
        "A": ctx.get("array_job_id") or job_id,
        "a": ctx.get("array_task_id") or "4294967294",
        "s": "batch",
        "t": "0",
    }

    def sub(m: re.Match) -> str:
        width, key = m.group(1), m.group(2)
        if key == "%":
            return "%"
        value = values.get(key)
        if value is None:
            raise CaptureError(f"cannot expand %{key} in {pattern!r}: not known in the Epilog")
        if width and value.isdigit():
            return value.zfill(int(width))
        return value

    return _PATTERN_RE.sub(sub, pattern)


def expand_path_template(path: str, node: str, job_id: str) -> str:
    """%N = node name, %j = job id, %% = %, in configured source paths and command arguments."""
    out, i = [], 0
    while i < len(path):
        ch = path[i]
        if ch == "%" and i + 1 < len(path):
            nxt = path[i + 1]
            if nxt == "N":
                out.append(node)
                i += 2
                continue
            if nxt == "j":
                out.append(job_id)
                i += 2
                continue
            if nxt == "%":
                out.append("%")
                i += 2
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def boot_time() -> float | None:
    try:
        with open(os.path.join(proc_root(), "stat"), "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


# --------------------------------------------------------------------------- counters / identity


def _read_small(path: str, limit: int = 4096) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            return os.read(fd, limit).decode("utf-8", "replace").strip()
        finally:
            os.close(fd)
    except OSError:
        return None


def read_ib_ports(deadline: float | None = None) -> list[dict]:
    """Counters and state of every InfiniBand port under <sysfs>/class/infiniband."""
    base = os.path.join(sysfs_root(), "class", "infiniband")
    ports: list[dict] = []
    for port_dir in sorted(glob.glob(os.path.join(base, "*", "ports", "*")))[:256]:
        if deadline is not None and time.monotonic() > deadline:
            break
        device = os.path.basename(os.path.dirname(os.path.dirname(port_dir)))
        entry: dict = {
            "device": device,
            "port": os.path.basename(port_dir),
            "state": _read_small(os.path.join(port_dir, "state")),
            "phys_state": _read_small(os.path.join(port_dir, "phys_state")),
            "rate": _read_small(os.path.join(port_dir, "rate")),
            "counters": {},
        }
        counters_dir = os.path.join(port_dir, "counters")
        try:
            names = sorted(os.listdir(counters_dir))
        except OSError:
            names = []
        for name in names:
            if name not in IB_COUNTERS:
                continue
            raw = _read_small(os.path.join(counters_dir, name), 64)
            try:
                entry["counters"][name] = int(raw) if raw is not None else None
            except ValueError:
                entry["counters"][name] = None
        ports.append(entry)
    return ports


def ib_deltas(start: list[dict] | None, end: list[dict]) -> list[dict]:
    """Per port: {name: {start, end, delta}}; delta None without a prolog value (or a counter reset)."""
    before = {(p["device"], p["port"]): p for p in (start or [])}
    out = []
    for port in end:
        prev = before.get((port["device"], port["port"]), {}).get("counters", {})
        counters = {}
        for name, value in port["counters"].items():
            old = prev.get(name)
            delta = value - old if isinstance(value, int) and isinstance(old, int) and value >= old else None
            counters[name] = {"start": old, "end": value, "delta": delta}
        out.append({**{k: v for k, v in port.items() if k != "counters"}, "counters": counters})
    return out


def read_proc_gpus() -> list[dict]:
    """/proc/driver/nvidia/gpus/<pci>/information: PCI id <-> Device Minor (and model, UUID)."""
    base = os.path.join(proc_root(), "driver", "nvidia", "gpus")
    gpus = []
    for gpu_dir in sorted(glob.glob(os.path.join(base, "*")))[:64]:
        text = _read_small(os.path.join(gpu_dir, "information"), 8192)
        if text is None:
            continue
        entry: dict = {"pci": os.path.basename(gpu_dir)}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                continue
            key = key.strip().lower()
            value = value.strip()
            if key == "device minor":
                entry["minor"] = value
            elif key == "model":
                entry["model"] = value
            elif key == "gpu uuid":
                entry["uuid"] = value
            elif key == "bus location":
                entry["bus_location"] = value
        gpus.append(entry)
    return gpus


NVSMI_IDENTITY_ARGS = ("--query-gpu=index,minor_number,pci.bus_id,uuid,serial", "--format=csv,noheader")


def find_executable(name: str, extra: tuple[str, ...] = ()) -> str | None:
    """Absolute path of a tool: Slurm runs prolog/epilog without a PATH."""
    if os.path.isabs(name):
        return name if os.access(name, os.X_OK) else None
    dirs = list(extra) + (os.environ.get("PATH") or "").split(":") + [
        "/usr/bin",
        "/bin",
        "/usr/sbin",
        "/sbin",
        "/usr/local/bin",
    ]
    for d in dirs:
        if d and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


def nvidia_smi_identity(timeout: float) -> tuple[list[dict], str]:
    exe = find_executable("nvidia-smi")
    if exe is None:
        return [], "missing: nvidia-smi not found"
    try:
        done = subprocess.run(
            [exe, *NVSMI_IDENTITY_ARGS], capture_output=True, timeout=timeout, start_new_session=True
        )
    except subprocess.TimeoutExpired:
        return [], f"timeout after {timeout:g}s"
    except OSError as exc:
        return [], f"error: {exc}"
    if done.returncode != 0:
        return [], f"error: exit {done.returncode}: {done.stderr[:200].decode('utf-8', 'replace').strip()}"
    gpus = []
    for line in done.stdout.decode("utf-8", "replace").splitlines()[:64]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        index, minor, bus_id, uuid, serial = parts
        gpus.append({"index": index, "minor": minor, "pci_bus_id": bus_id, "uuid": uuid, "serial": serial})
    return gpus, "ok"


# --------------------------------------------------------------------------- spool access

# Bundles hold a job's stdout and kernel lines: readable by root and SlurmUser's group only.
SPOOL_FILE_MODE = 0o640
SPOOL_DIR_MODE = 0o750
SLURM_CONF_PATHS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/usr/local/etc/slurm.conf")


@dataclass(frozen=True)
class SpoolAccess:
    """Who besides root reads the spool: SlurmUser (the controller's worker runs as it), through
    its primary group; a job folder owned by anyone else is not written into."""

    user: str
    uid: int
    gid: int


ROOT_ONLY = SpoolAccess("root", 0, 0)


def slurm_user_from_conf(env: dict) -> str | None:
    """`SlurmUser=` of the first slurm.conf found ($SLURM_CONF first); None: not set there."""
    paths = [env["SLURM_CONF"]] if env.get("SLURM_CONF") else []
    for path in [*paths, *SLURM_CONF_PATHS]:
        try:
            with open(path, encoding="utf-8", errors="replace") as conf:
                text = conf.read(1 << 20)
        except OSError:
            continue
        for line in text.splitlines():
            key, sep, value = line.split("#", 1)[0].partition("=")
            if sep and key.strip().lower() == "slurmuser":
                return value.strip() or None
        return None
    return None


def spool_access(slurm_user: str, env: dict) -> tuple[SpoolAccess, str]:
    """(access, problem): SlurmUser from the config's `slurm_user`, else slurm.conf, else Slurm's
    default root.  A name unknown on this node gives root-only access and says so."""
    name = slurm_user or slurm_user_from_conf(env) or "root"
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return ROOT_ONLY, f"SlurmUser {name!r} is not a user on this node: spool files readable by root only"
    return SpoolAccess(name, entry.pw_uid, entry.pw_gid), ""


def _restrict(fd: int, st: os.stat_result, gid: int, mode: int) -> None:
    """Give an open file or folder the spool's group and mode.  Without the right (not root, or
    root squashed on the shared filesystem) the group stays; the mode is set when we own it."""
    if st.st_gid != gid:
        try:
            os.fchown(fd, -1, gid)
        except PermissionError:
            pass
    if stat.S_IMODE(st.st_mode) != mode:
        try:
            os.fchmod(fd, mode)
        except PermissionError:
            pass


# --------------------------------------------------------------------------- spool writes


def _open_subdir(parent_fd: int, name: str, create: bool, access: SpoolAccess, hand_over: bool = False) -> int:
    """Open (optionally create) a real subdirectory owned by us or SlurmUser, never following a
    symlink, and give it the spool's group and mode; with `hand_over`, SlurmUser gets it."""
    if create:
        try:
            os.mkdir(name, SPOOL_DIR_MODE, dir_fd=parent_fd)
        except FileExistsError:
            pass
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise CaptureError(f"{name} is not a directory")
    if st.st_uid not in (os.geteuid(), access.uid):
        os.close(fd)
        raise CaptureError(f"{name} is owned by uid {st.st_uid}, neither by us nor by SlurmUser {access.user}")
    _restrict(fd, st, access.gid, SPOOL_DIR_MODE)
    if hand_over and st.st_uid != access.uid:
        try:
            os.fchown(fd, access.uid, -1)
        except PermissionError:  # not root, or root squashed on the shared filesystem
            pass
    return fd


def atomic_write(
    root: str,
    subdirs: list[str],
    filename: str,
    data: bytes,
    create_root: bool = False,
    access: SpoolAccess = ROOT_ONLY,
) -> str:
    """Write <root>/<subdirs...>/<filename> atomically: temp file in the same directory, fsync,
    rename, fsync the directory.  Subdirectories are created, and must be real directories
    (O_NOFOLLOW) owned by us or SlurmUser; folders get mode 0750 and files 0640, both with
    SlurmUser's group.  A job's folder (subdirs [jobid, "nodes"]) is given to SlurmUser, so that the
    controller's worker, which runs as SlurmUser, can add the job record (job.json) next to the
    bundles.  The temp name starts with '.' and never ends in .json.gz.  Returns the path."""
    for part in [*subdirs, filename]:
        if not part or "/" in part or part in (".", ".."):
            raise CaptureError(f"invalid path component {part!r}")
    if create_root:
        os.makedirs(root, SPOOL_DIR_MODE, exist_ok=True)
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        job_folder = len(subdirs) == 2 and subdirs[1] == "nodes"
        for depth, part in enumerate(subdirs):
            fds.append(_open_subdir(fds[-1], part, create=True, access=access, hand_over=job_folder and depth == 0))
        atomic.write_in_dir(
            fds[-1], filename, data, mode=0o600,
            prepare=lambda fd: _restrict(fd, os.fstat(fd), access.gid, SPOOL_FILE_MODE),
        )
        return os.path.join(root, *subdirs, filename)
    finally:
        for fd in fds:
            os.close(fd)


def stranded_bundles(local_spool: str) -> list[tuple[str, str, str]]:
    """(job id, file name, path) of the bundles in the local spool (<local>/<jobid>/nodes/
    <node>.json.gz), oldest first; names that are no job id or node are left alone."""
    found = []
    try:
        jobs = [entry for entry in os.scandir(local_spool) if valid_job_id(entry.name) and entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    for job in jobs:
        try:
            for entry in os.scandir(os.path.join(job.path, "nodes")):
                node = entry.name[: -len(".json.gz")] if entry.name.endswith(".json.gz") else ""
                if valid_node(node) and entry.is_file(follow_symlinks=False):
                    found.append((entry.stat(follow_symlinks=False).st_mtime, job.name, entry.name, entry.path))
        except OSError:
            continue
    return [(job_id, name, path) for _, job_id, name, path in sorted(found)]


def read_nofollow(path: str, limit: int, ours: bool = False) -> bytes | None:
    """The bytes of a regular file (not through a symlink), at most `limit` of them; with `ours`,
    only a file this process' user owns.  None otherwise, or when the file is longer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (ours and info.st_uid != os.getuid()) or info.st_size > limit:
            return None
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def read_json_nofollow(path: str, limit: int = 4 * 1024 * 1024) -> dict | None:
    data = read_nofollow(path, limit)
    try:
        value = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
