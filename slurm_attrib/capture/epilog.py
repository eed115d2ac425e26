"""The node Epilog: capture this node's evidence for the job into a node bundle.

    python -m slurm_attrib.capture.epilog        (run by epilog/sattrib-epilog)

Always exits 0 (a failing Epilog drains the node with "Epilog error"), within
`epilog_timeout` seconds (default 10): sources share a deadline that leaves time for the write,
the shared-spool write runs in a child process the epilog waits for until its write deadline and
then abandons (a hung network filesystem holds only that child), and a watchdog thread writes
what there is to the local spool and exits if the main thread is stuck anywhere.  Failures go to
syslog (ident sattrib-epilog) and into the bundle's `capture.errors`.

Bundle: <spool>/<jobid>/nodes/<node>.json.gz (gzip JSON, written atomically), or the same path
under `local_spool` when the shared spool is unwritable or hangs; mode 0640 with SlurmUser's group
(folders 0750), since a bundle holds the job's output.  See `build_bundle` for the format
(`format: sattrib-node-bundle`, `version: 1`).
"""

from __future__ import annotations

import json
import os
import select
import socket
import sys
import threading
import time
import warnings
import zlib

from slurm_attrib.capture import common
from slurm_attrib.capture.common import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    ROOT_ONLY,
    KeptLines,
    SpoolAccess,
    atomic_write,
    expand_hostlist,
    ib_deltas,
    job_context_from_env,
    log_syslog,
    read_ib_ports,
    read_json_nofollow,
    read_nofollow,
    read_proc_gpus,
    spool_access,
    stranded_bundles,
    valid_job_id,
    valid_node,
)

IDENT = "sattrib-epilog"
MAX_FORWARDED = 8  # stranded bundles one epilog run forwards to the shared spool


def node_name(env: dict) -> str:
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def prolog_record_path(local_spool: str, job_id: str) -> str:
    return os.path.join(local_spool, "prolog", f"{job_id}.json")


class Epilog:
    def __init__(self, env: dict | None = None, t0: float | None = None):
        self.env = dict(os.environ if env is None else env)
        self.t0 = time.monotonic() if t0 is None else t0
        self.wall0 = time.time()
        self.errors: list[str] = []
        self.results: list[dict] = []
        self.results_lock = threading.Lock()
        self.procs: list = []
        self.phase = "start"
        self.claimed = False
        self.claim_lock = threading.Lock()
        self.config = None
        self.access = ROOT_ONLY
        self.node = node_name(self.env)
        self.job_id = self.env.get("SLURM_JOB_ID") or self.env.get("SLURM_JOBID") or ""
        self.job: dict = {}
        self.prolog: dict | None = None
        self.ib: list[dict] = []
        self.gpus: dict = {}
        self.literal_info: dict = {}
        self.written: dict = {}

    # ---------------------------------------------------------------- helpers
    def error(self, message: str) -> None:
        self.errors.append(message)
        log_syslog(IDENT, f"job {self.job_id} node {self.node}: {message}")

    def claim(self) -> bool:
        with self.claim_lock:
            if self.claimed:
                return False
            self.claimed = True
            return True

    # ---------------------------------------------------------------- main flow
    def run(self) -> None:
        from slurm_attrib.config import Config, ConfigError, load_config

        try:
            self.config = load_config()
        except Exception as exc:  # noqa: BLE001 - never let config break capture
            self.config = Config()
            message = f"config: {exc if isinstance(exc, ConfigError) else f'{type(exc).__name__}: {exc}'}; using defaults"
            self.error(message)
            print(message, file=sys.stderr)  # the wrapper records it where `sattrib doctor` looks
        cfg = self.config
        self.access, problem = spool_access(str(cfg.slurm_user or ""), self.env)
        if problem:
            self.error(problem)
        timeout = float(cfg.epilog_timeout or 10.0)
        reserve = min(3.0, max(0.6, 0.2 * timeout))
        self.sources_deadline = self.t0 + timeout - reserve
        self.write_deadline = self.t0 + timeout - 0.35 * reserve
        self.hard_deadline = self.t0 + timeout - 0.1
        watchdog = threading.Timer(max(0.0, self.hard_deadline - time.monotonic()), self.emergency)
        watchdog.daemon = True
        watchdog.start()

        if not valid_job_id(self.job_id) or not valid_node(self.node):
            self.error(f"refusing to capture: invalid job id {self.job_id!r} or node name {self.node!r}")
            self.claim()
            return

        self.phase = "context"
        self.job = job_context_from_env(self.env)
        nodes, how = expand_hostlist(self.job.get("nodelist"), timeout=min(2.0, timeout / 5))
        self.job["nodes"] = nodes
        self.job["nodes_expanded_by"] = how
        if self.job.get("nodelist") and not nodes:
            self.error(f"cannot expand SLURM_JOB_NODELIST {self.job.get('nodelist')!r}")
        self.prolog = read_json_nofollow(prolog_record_path(cfg.local_spool, self.job_id))
        self._resolve_window()

        self.phase = "rules"
        literals = None
        try:
            from slurm_attrib.capture.literals import load_literals

            literals = load_literals(cfg.rule_dirs)
            for problem in literals.errors:
                self.error(f"rules: {problem}")
            self.literal_info = {
                "files": literals.files,
                "literals": len(literals.exact) + len(literals.folded),
                "ignore_case": bool(literals.folded),
                "following": literals.following,
            }
            if literals.empty:
                self.error("rules: no pre-filter literals found; sources are kept unfiltered (newest lines)")
        except Exception as exc:  # noqa: BLE001
            self.error(f"rules: {type(exc).__name__}: {exc}; sources are kept unfiltered")

        self.phase = "sources"
        self._capture_sources(literals)
        self.phase = "gpus"
        self._gpus()
        self.phase = "write"
        if self.claim():
            self.write(self.build_bundle())

    def _resolve_window(self) -> None:
        job = self.job
        if job.get("start") is not None:
            job["start_from"] = "SLURM_JOB_START_TIME"
        elif self.prolog and isinstance(self.prolog.get("start"), (int, float)):
            job["start"] = float(self.prolog["start"])
            job["start_from"] = "prolog"
        else:
            job["start"] = common.boot_time()
            job["start_from"] = "boot" if job["start"] else None
            self.error("no job start time (no SLURM_JOB_START_TIME and no prolog record): window starts at boot")
        if job.get("end") is not None:
            job["end_from"] = "SLURM_JOB_END_TIME"
        else:
            job["end"] = self.wall0
            job["end_from"] = "epilog"
        if self.prolog and self.prolog.get("job_id") not in (None, self.job_id):
            self.error("prolog record belongs to another job; ignored")
            self.prolog = None

    def _ib_source(self, src, res):
        self.ib = ib_deltas((self.prolog or {}).get("ib"), read_ib_ports(self.sources_deadline))
        res["origin"] = os.path.join(common.sysfs_root(), "class", "infiniband")
        res["filter"] = "none"
        lines = []
        for port in self.ib:
            parts = [f"infiniband {port['device']} port {port['port']}: state={port.get('state')} phys_state={port.get('phys_state')}"]
            for name, c in sorted(port["counters"].items()):
                delta = "?" if c["delta"] is None else f"+{c['delta']}"
                parts.append(f"{name}={c['end']} ({delta} since prolog)")
            lines.append(" ".join(parts))
        res["lines"] = [[i + 1, text] for i, text in enumerate(lines)]
        res["lines_total"] = res["lines_kept"] = len(lines)
        res["bytes_read"] = sum(len(t) + 1 for t in lines)
        res["counters"] = self.ib
        if not self.ib:
            res["status"], res["detail"] = "missing", "no InfiniBand ports"
        else:
            res["status"] = "ok"
            if not (self.prolog or {}).get("ib"):
                res["detail"] = "no prolog snapshot: no deltas"
        return res

    def _capture_sources(self, literals) -> None:
        from slurm_attrib.capture.sources import capture_group, effective_sources, kill_group, new_result

        cfg = self.config
        groups = effective_sources(cfg.sources)
        nodes = self.job.get("nodes") or []
        ctx = {
            **self.job,
            "node": self.node,
            "job_id": self.job_id,
            "batch_host": nodes[0] if nodes else None,
            "context_lines": int(cfg.context_lines),
            "ib_source": self._ib_source,
        }
        keep_budget = max(64 * 1024, int(cfg.bundle_max_bytes) // max(1, len(groups)))
        slots: list[list[dict] | None] = [None] * len(groups)

        def work(i: int, alts) -> None:
            out = capture_group(alts, ctx, literals, self.sources_deadline, self.procs, keep_budget)
            with self.results_lock:
                slots[i] = out

        threads = []
        for i, alts in enumerate(groups):
            t = threading.Thread(target=work, args=(i, alts), daemon=True, name=f"src-{alts[0].name}")
            t.start()
            threads.append(t)
        for t in threads:
            t.join(max(0.0, self.sources_deadline + 0.3 - time.monotonic()))
        if any(t.is_alive() for t in threads):
            for p in list(self.procs):
                if p.poll() is None:
                    kill_group(p)
            for t in threads:
                t.join(max(0.0, min(0.3, self.write_deadline - 0.5 - time.monotonic())))
        with self.results_lock:
            for i, alts in enumerate(groups):
                if slots[i] is None:
                    res = new_result(alts[0])
                    res["status"] = "timeout"
                    res["detail"] = "source did not finish within the epilog bound (blocked read?)"
                    slots[i] = [res]
                self.results.extend(slots[i])

    def _gpus(self) -> None:
        try:
            self.gpus = {
                "proc": read_proc_gpus(),
                "nvidia_smi": (self.prolog or {}).get("gpus", {}).get("nvidia_smi", []),
                "nvidia_smi_status": (self.prolog or {}).get("gpus", {}).get("nvidia_smi_status", "no prolog record"),
            }
        except Exception as exc:  # noqa: BLE001
            self.error(f"gpu identity: {type(exc).__name__}: {exc}")

    # ---------------------------------------------------------------- bundle
    def build_bundle(self, emergency: bool = False) -> dict:
        cfg = self.config
        with self.results_lock:
            sources = list(self.results)
        return {
            "format": BUNDLE_FORMAT,
            "version": BUNDLE_VERSION,
            "node": self.node,
            "job": self.job or {"job_id": self.job_id},
            "capture": {
                "started": self.wall0,
                "duration": round(time.monotonic() - self.t0, 3),
                "epilog_timeout": getattr(cfg, "epilog_timeout", None),
                "emergency": emergency,
                "phase": self.phase,
                "prolog_record": bool(self.prolog),
                "rules": self.literal_info,
                "errors": list(self.errors),
                "pid": os.getpid(),
                "python": sys.version.split()[0],
            },
            "sources": sources,
            "counters": {"ib": self.ib},
            "gpus": self.gpus,
        }

    def encode(self, bundle: dict) -> bytes:
        limit = int(getattr(self.config, "bundle_max_bytes", 16 * 1024 * 1024))
        for _ in range(12):
            raw_size, data = gzip_json(bundle)
            if raw_size <= limit:
                return data
            biggest = max(bundle["sources"], key=lambda r: len(r.get("lines") or []), default=None)
            if not biggest or len(biggest.get("lines") or []) <= 2:
                break
            lines, half = biggest["lines"], len(biggest["lines"]) // 2
            biggest["lines"] = lines.without(1, half) if isinstance(lines, KeptLines) else [lines[0], *lines[half:]]
            biggest["lines_kept"] = len(biggest["lines"])
            biggest["detail"] = (biggest.get("detail", "") + "; older kept lines dropped (bundle_max_bytes)").lstrip("; ")
            if biggest["status"] == "ok":
                biggest["status"] = "truncated"
        return gzip_json(bundle)[1]

    def write(self, bundle: dict, shared: bool = True) -> None:
        cfg = self.config
        name = f"{self.node}.json.gz"
        if shared:
            path, reason = write_from_child(cfg.spool, [self.job_id, "nodes"], name, self.encode(bundle),
                                            self.access, max(self.write_deadline, time.monotonic() + 0.05))
            if path:
                self.written = {"path": path, "spool": "shared"}
                self._cleanup_prolog()
                self._forward_stranded()
                return
            reason = reason or f"no answer within {max(0.0, self.write_deadline - self.t0):.1f}s"
            self.error(f"shared spool {cfg.spool} not writable ({reason}); writing to local spool {cfg.local_spool}")
        bundle["capture"]["errors"] = list(self.errors)
        bundle["capture"]["spool"] = "local"
        try:
            path = atomic_write(cfg.local_spool, [self.job_id, "nodes"], name, self.encode(bundle),
                                create_root=True, access=self.access)
            self.written = {"path": path, "spool": "local"}
            log_syslog(IDENT, f"job {self.job_id} node {self.node}: bundle written to local spool {path}")
        except BaseException as exc:  # noqa: BLE001
            log_syslog(IDENT, f"job {self.job_id} node {self.node}: cannot write the bundle anywhere: {exc}")

    def _forward_stranded(self) -> None:
        """Bundles an earlier epilog left in the local spool, when the shared one did not answer,
        go to the shared spool now that it does, oldest first, at most MAX_FORWARDED per run and
        only while the write deadline allows: nothing captured is lost.  Their jobs were analysed
        without them: `sattrib batch` analyses a job again when a bundle arrived after it was."""
        cfg = self.config
        for job_id, name, path in stranded_bundles(cfg.local_spool)[:MAX_FORWARDED]:
            if time.monotonic() >= self.write_deadline:
                return
            data = read_nofollow(path, int(cfg.bundle_max_bytes) * 2, ours=True)
            if data is None:
                continue
            written, reason = write_from_child(cfg.spool, [job_id, "nodes"], name, data, self.access, self.write_deadline)
            if not written:
                return  # the shared spool stopped answering: the next epilog tries again
            for leftover, remove in ((path, os.unlink), (os.path.dirname(path), os.rmdir),
                                     (os.path.dirname(os.path.dirname(path)), os.rmdir)):
                try:
                    remove(leftover)
                except OSError:
                    break  # a folder that still holds another node's bundle stays
            log_syslog(IDENT, f"job {job_id}: bundle {name} forwarded from the local spool to {written}", error=False)

    def _cleanup_prolog(self) -> None:
        if self.prolog is None:
            return
        try:
            os.unlink(prolog_record_path(self.config.local_spool, self.job_id))
        except OSError:
            pass

    def emergency(self) -> None:
        """Watchdog: the main thread overran the bound; write what there is locally and exit 0."""
        try:
            if self.claim():
                from slurm_attrib.capture.sources import kill_group

                for p in list(self.procs):
                    if p.poll() is None:
                        kill_group(p)
                self.error(f"epilog bound reached during phase {self.phase!r}; emergency bundle")
                if self.config is not None and valid_job_id(self.job_id) and valid_node(self.node):
                    self.write(self.build_bundle(emergency=True), shared=False)
            else:
                # the main thread is writing; give it until the bound plus a little, then leave
                time.sleep(0.5)
        finally:
            os._exit(0)


def gzip_json(value) -> tuple[int, bytes]:
    """(size of the JSON text, its gzip): encoded and compressed piece by piece, so the bundle's
    text (up to bundle_max_bytes) is never held whole, nor its UTF-8 copy; KeptLines are
    compressed from their own JSON."""
    gz = zlib.compressobj(5, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip framing, mtime 0
    out, pending, size, raw = [], [], 0, 0

    def compress(data) -> None:
        nonlocal raw
        raw += len(data)
        out.append(gz.compress(data))

    for piece in _json_pieces(value, json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))):
        if isinstance(piece, str):
            pending.append(piece)
            size += len(piece)
            if size < 1 << 16:
                continue
        if pending:
            compress("".join(pending).encode("utf-8", "replace"))
            pending, size = [], 0
        if not isinstance(piece, str):
            compress(piece)
    compress("".join(pending).encode("utf-8", "replace"))
    out.append(gz.flush())
    return raw, b"".join(out)


def _json_pieces(value, encoder: json.JSONEncoder):
    """The JSON text of `value`: str pieces, and the UTF-8 JSON that KeptLines hold, in order."""
    if isinstance(value, KeptLines):
        yield from value.json_parts()
    elif isinstance(value, dict) and all(isinstance(key, str) for key in value):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield ("," if i else "") + encoder.encode(key) + ":"
            yield from _json_pieces(item, encoder)
        yield "}"
    elif isinstance(value, list) and any(isinstance(item, dict) for item in value):
        yield "["
        for i, item in enumerate(value):
            if i:
                yield ","
            yield from _json_pieces(item, encoder)
        yield "]"
    else:
        yield from encoder.iterencode(value)


def write_from_child(root: str, subdirs: list[str], name: str, data: bytes, access: SpoolAccess,
                     deadline: float) -> tuple[str | None, str]:
    """atomic_write in a forked child, waited for until `deadline` (monotonic): (path, "") when it
    wrote, (None, why) when it failed, (None, "") when it did not answer in time.  A thread stuck
    in a hung filesystem would hold the whole process at exit; a child in its own session with
    no stdio (the wrapper waits for its stderr pipe) is left behind instead."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+): the child only writes
        pid = os.fork()
    if pid == 0:
        _child_write(write_end, root, subdirs, name, data, access)
    os.close(write_end)
    try:
        answer = _read_until(read_end, deadline)
    finally:
        os.close(read_end)
    try:
        os.waitpid(pid, os.WNOHANG)  # reaped when done; a stuck child is init's to reap
    except ChildProcessError:
        pass
    status, _, text = answer.decode("utf-8", "replace").partition(" ")
    if status == "ok":
        return text, ""
    return None, text if status == "error" else ""


def _child_write(report_fd: int, root: str, subdirs: list[str], name: str, data: bytes, access: SpoolAccess) -> None:
    """The forked writer: detach, write, report one line on `report_fd`, exit."""
    message = b"error child did not start"
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(3, report_fd)
        os.closerange(report_fd + 1, 1 << 16)
        message = b"ok " + atomic_write(root, subdirs, name, data, access=access).encode("utf-8", "replace")
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        message = f"error {type(exc).__name__}: {exc}".encode("utf-8", "replace")
    finally:
        try:
            os.write(report_fd, message[:4096])
        finally:
            os._exit(0)


def _read_until(fd: int, deadline: float) -> bytes:
    """What the child writes before it closes the pipe, or what came by the deadline."""
    chunks = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return b""
        chunk = os.read(fd, 4096)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def main() -> None:
    t0 = time.monotonic()
    epilog = None
    try:
        epilog = Epilog(t0=t0)
        epilog.run()
    except BaseException as exc:  # noqa: BLE001 - the epilog never fails
        try:
            msg = f"unexpected {type(exc).__name__}: {exc}"
            if epilog is not None:
                epilog.error(msg)
                if epilog.config is not None and epilog.claim() and valid_job_id(epilog.job_id) and valid_node(epilog.node):
                    epilog.write(epilog.build_bundle())
            else:
                log_syslog(IDENT, msg)
        except BaseException:  # noqa: BLE001
            pass
    finally:
        try:
            if epilog is not None and os.environ.get("SATTRIB_EPILOG_VERBOSE"):
                sys.stderr.write(json.dumps({"written": epilog.written, "errors": epilog.errors}) + "\n")
        except BaseException:  # noqa: BLE001
            pass
        common.exit_zero()


if __name__ == "__main__":
    main()
