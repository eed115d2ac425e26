"""`sattrib doctor`: what a deployment on a node or the controller gets wrong, one line per check.

Each check is `ok`, `warn`, `FAIL` (with what to do) or `skip` (not measured here, and why).
The hooks are checked as Slurm runs them: each configured hook is run with `--check` in an empty
environment as the user Slurm runs it as (Prolog and Epilog as root, EpilogSlurmctld as
SlurmUser), so a Python that SlurmUser cannot run or a config it cannot read shows here and not
as jobs that are never analysed.  Every outside command has its own time bound.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
COMMAND_TIMEOUT = 20.0
# Slurm's setting -> (our hook's name, the user Slurm runs it as: None = root, else SlurmUser)
HOOKS = {
    "Prolog": ("sattrib-prolog", False),
    "Epilog": ("sattrib-epilog", False),
    "EpilogSlurmctld": ("sattrib-epilog-ctld", True),
}
SAMPLE_JOBS = 20  # newest job folders of the spool whose modes are checked
SKEW_WARN, SKEW_FAIL = 2.0, 30.0  # seconds between the nodes' clocks (MUNGE refuses at 300)


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        return f"{self.status:<4}  {self.name}: {self.detail}" + (f" -- {self.fix}" if self.fix else "")


@dataclass
class Context:
    """What the checks share: this command's config and Slurm's (`scontrol show config`)."""

    config: object
    config_path: str
    slurm: dict[str, str] = field(default_factory=dict)
    slurm_text: str = ""
    slurm_user: pwd.struct_passwd | None = None


def run(argv: list[str], timeout: float = COMMAND_TIMEOUT, stdin: bytes | None = None) -> tuple[int, str]:
    """(exit status, stdout and stderr as text); 127 when the command is missing, 124 on timeout."""
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, timeout=timeout,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not installed"
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(argv[:3])}: no answer within {timeout:g} s"
    text = (done.stdout + done.stderr).decode("utf-8", "replace")
    return done.returncode, text


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


# --------------------------------------------------------------------------- config and Slurm


def check_config() -> tuple[list[Check], object, str]:
    from slurm_attrib.config import Config, ConfigError, config_path, load_config

    path = str(config_path())
    try:
        config = load_config()
    except ConfigError as exc:
        return [Check("config", FAIL, str(exc), "fix the file, or point $SATTRIB_CONFIG at the right one")], Config(), path
    where = path if Path(path).exists() else f"{path} does not exist: the defaults"
    return [Check("config", OK, where)], config, path


def check_scontrol(ctx: Context) -> list[Check]:
    from slurm_attrib.slurm.cli import missing_slurm_conf

    problem = missing_slurm_conf()
    if problem:
        return [Check("scontrol", FAIL, problem, "point SLURM_CONF at this cluster's slurm.conf, or unset it")]
    started = time.monotonic()
    code, text = run(["scontrol", "show", "config"])
    if code != 0:
        return [Check("scontrol", FAIL, f"scontrol show config: {last_line(text)}",
                      "start slurmctld, check SLURM_CONF and munge on this host")]
    ctx.slurm_text = text
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            ctx.slurm[key.strip()] = value.strip()
    name = ctx.slurm.get("SlurmUser", "root").split("(")[0] or "root"
    try:
        ctx.slurm_user = pwd.getpwnam(name)
    except KeyError:
        return [Check("scontrol", FAIL, f"SlurmUser {name!r} is not a user on this host", "create it, as on the controller")]
    return [Check("scontrol", OK, f"slurmctld answers ({time.monotonic() - started:.1f} s); SlurmUser {name}")]


def _setting(ctx: Context, key: str) -> list[str]:
    value = ctx.slurm.get(key, "")
    return [] if value in ("", "(null)") else [v.strip() for v in value.split(",") if v.strip()]


def _is_ours(path: str, hook: str) -> bool:
    """The script is our wrapper, or a site's wrapper that runs it (its text names the hook)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError:
        return False
    return re.search(re.escape(hook) + r"(?![\w-])", text) is not None


def check_slurm_settings(ctx: Context, keys: tuple[str, ...] = tuple(HOOKS)) -> list[Check]:
    checks = []
    for key in keys:
        hook = HOOKS[key][0]
        paths = _setting(ctx, key)
        ours = [p for p in paths if _is_ours(p, hook)]
        if ours:
            checks.append(Check(f"slurm {key}", OK, ours[0]))
        else:
            now = ", ".join(paths) or "not set"
            checks.append(Check(f"slurm {key}", FAIL, f"{now}: not our {hook}",
                                f"set {key}=<dir>/{hook} (sattrib install-hooks <dir>; contrib/slurm/slurm.conf.snippet), scontrol reconfigure"))
    if "Prolog" in keys and _setting(ctx, "Prolog"):
        flags = [f.strip().lower() for f in ctx.slurm.get("PrologFlags", "").split(",")]
        if "alloc" in flags:
            checks.append(Check("slurm PrologFlags", OK, ctx.slurm.get("PrologFlags", "")))
        else:
            checks.append(Check("slurm PrologFlags", FAIL,
                                f"{ctx.slurm.get('PrologFlags') or 'not set'}: no Alloc, so the prolog runs only on nodes that start a step",
                                "add PrologFlags=Alloc to slurm.conf, scontrol reconfigure"))
    return checks


# --------------------------------------------------------------------------- the hooks as their users


def check_hooks(ctx: Context, keys: tuple[str, ...] = tuple(HOOKS)) -> list[Check]:
    checks = []
    for key in keys:
        hook, as_slurm_user = HOOKS[key]
        paths = [p for p in _setting(ctx, key) if _is_ours(p, hook)]
        if not paths:
            continue
        user = ctx.slurm_user if as_slurm_user and ctx.slurm_user else pwd.getpwuid(0)
        checks.append(_run_hook_check(ctx, hook, paths[0], user))
    return checks


def _run_hook_check(ctx: Context, hook: str, path: str, user: pwd.struct_passwd) -> Check:
    name = f"{hook} as {user.pw_name}"
    if user.pw_uid != os.geteuid() and os.geteuid() != 0:
        return Check(name, SKIP, f"only root can run it as {user.pw_name}", "run sattrib doctor as root")
    argv = ["env", "-i", path, "--check"]
    if user.pw_uid != os.geteuid():
        argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", *argv]
    code, text = run(argv)
    facts: dict[str, str] = {}
    for line in text.splitlines():  # the wrapper's "interpreter X", "config X", then hookcheck's lines
        key, _, value = line.partition(" ")
        facts.setdefault(key, value)
    if code != 0:
        return Check(name, FAIL, f"{last_line(text)} (interpreter {facts.get('interpreter', '?')})",
                     f"make the interpreter and {facts.get('config', 'the config')} readable by {user.pw_name}, "
                     "or name another interpreter in /etc/sattrib/python")
    detail = f"interpreter {facts.get('interpreter', '?')}, config {facts.get('config', '?')}"
    differs = [f"{key} {facts[key]} (here: {getattr(ctx.config, key)})"
               for key in ("spool", "local_spool", "results") if key in facts and facts[key] != str(getattr(ctx.config, key))]
    if differs:
        return Check(name, WARN, f"{detail}; its config differs from this command's: {', '.join(differs)}",
                     f"run doctor with SATTRIB_CONFIG={facts.get('config', '?')}, or give the hook this config (sattrib-config next to it)")
    return Check(name, OK, detail)


# --------------------------------------------------------------------------- paths and modes


def _who(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _slurm_ids(ctx: Context) -> tuple[int, int, str]:
    """SlurmUser's (uid, gid, name): Slurm's answer, else the config's `slurm_user`, else root."""
    if ctx.slurm_user is not None:
        return ctx.slurm_user.pw_uid, ctx.slurm_user.pw_gid, ctx.slurm_user.pw_name
    from slurm_attrib.capture.common import spool_access

    access = spool_access(str(ctx.config.slurm_user or ""), dict(os.environ))[0]
    return access.uid, access.gid, access.user


def check_spool(ctx: Context, local: bool = True) -> list[Check]:
    uid, gid, user = _slurm_ids(ctx)
    checks = []
    spool = Path(ctx.config.spool)
    try:
        info = os.lstat(spool)
    except FileNotFoundError:
        return [Check("spool", FAIL, f"{spool} does not exist", f"install -d -m 0755 {spool} (on the shared filesystem)")]
    if not stat.S_ISDIR(info.st_mode):
        return [Check("spool", FAIL, f"{spool} is not a folder", f"install -d -m 0755 {spool}")]
    if info.st_uid not in (0, uid) or info.st_mode & stat.S_IWOTH:
        checks.append(Check("spool", FAIL, f"{spool} is owned by {_who(info.st_uid)}, mode {stat.S_IMODE(info.st_mode):04o}: "
                            "users could make job folders", f"chown root {spool}; chmod 0755 {spool}"))
    else:
        checks.append(Check("spool", OK, f"{spool} ({_who(info.st_uid)}, {stat.S_IMODE(info.st_mode):04o})"))
    checks.append(_check_bundles(spool, uid, gid, user))
    if not local:
        return checks
    local = Path(ctx.config.local_spool)
    try:
        info = os.lstat(local)
    except FileNotFoundError:
        checks.append(Check("local spool", OK, f"{local} (made by the first epilog that needs it)"))
        return checks
    if info.st_uid != 0 or not stat.S_ISDIR(info.st_mode) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        checks.append(Check("local spool", FAIL, f"{local} is owned by {_who(info.st_uid)}, mode {stat.S_IMODE(info.st_mode):04o}",
                            f"remove it (the epilog makes it root's, 0750), or set local_spool to a folder of root's"))
    else:
        checks.append(Check("local spool", OK, f"{local} ({_who(info.st_uid)}, {stat.S_IMODE(info.st_mode):04o})"))
    checks.append(_check_stranded(local))
    return checks


def _check_stranded(local: Path) -> Check:
    """Bundles left in the local spool: the shared spool did not answer at their jobs' end.  The
    node's next epilog forwards them once it does (capture/epilog.py); their jobs were analysed
    without them, and `sattrib batch` analyses them again once they arrive."""
    from slurm_attrib.capture.common import stranded_bundles

    stranded = stranded_bundles(str(local))
    if not stranded:
        return Check("stranded bundles", OK, f"none in {local}")
    jobs = sorted({job for job, _, _ in stranded}, key=lambda job: (len(job), job))
    shown = ", ".join(jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "")
    return Check("stranded bundles", WARN, f"{len(stranded)} in {local} (jobs {shown}): the shared spool did not answer at their end",
                 "make the shared spool writable from this node: its next epilog forwards them; then `sattrib batch` on the controller")


def _check_bundles(spool: Path, uid: int, gid: int, user: str) -> Check:
    """The newest job folders: folders 0750 and bundles 0640, SlurmUser's group, owners root or SlurmUser."""
    try:
        folders = sorted((p for p in spool.iterdir() if p.name[:1].isdigit() and p.is_dir()),
                         key=lambda p: p.stat().st_mtime, reverse=True)[:SAMPLE_JOBS]
    except OSError as exc:
        return Check("spool bundles", FAIL, f"{spool}: {exc.strerror or exc}", "")
    wrong, seen = [], 0
    for folder in folders:
        for path, mode in [(folder, 0o750), (folder / "nodes", 0o750), *((b, 0o640) for b in folder.glob("nodes/*.json.gz"))]:
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            seen += 1
            if stat.S_IMODE(info.st_mode) != mode or info.st_gid != gid or info.st_uid not in (0, uid):
                wrong.append(f"{path} ({_who(info.st_uid)}:{info.st_gid}, {stat.S_IMODE(info.st_mode):04o})")
    if wrong:
        return Check("spool bundles", FAIL, f"{len(wrong)} of {seen} path(s) of the newest jobs not as the epilog writes them, e.g. {wrong[0]}",
                     f"folders 0750 and bundles 0640, group of SlurmUser {user} (slurm_user in the config must name Slurm's SlurmUser)")
    return Check("spool bundles", OK, f"{seen} path(s) of the {len(folders)} newest job(s): folders 0750, bundles 0640, group of {user}")


def check_results(ctx: Context) -> list[Check]:
    uid, _, user = _slurm_ids(ctx)
    results = Path(ctx.config.results)
    try:
        info = os.lstat(results)
    except FileNotFoundError:
        return [Check("results", FAIL, f"{results} does not exist",
                      f"install -d -o {user} -m 0755 {results} (on the controller; the worker runs as {user})")]
    checks = []
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or mode & (stat.S_IWGRP | stat.S_IWOTH):
        checks.append(Check("results", FAIL, f"{results} is owned by {_who(info.st_uid)}, mode {mode:04o}: the worker runs as {user}",
                            f"chown {user} {results}; chmod 0755 {results}"))
    else:
        checks.append(Check("results", OK, f"{results} ({_who(info.st_uid)}, {mode:04o})"))
    if not ctx.config.index_url:
        checks.append(_check_index(ctx, results / "index.db"))
    return checks


def _check_index(ctx: Context, index: Path) -> Check:
    from slurm_attrib.slurm.cli import jobs_visible_to_all, private_data_of
    from slurm_attrib.slurm import SlurmError

    try:
        info = os.lstat(index)
    except FileNotFoundError:
        return Check("index", OK, f"{index} not written yet (made at the first diagnosis)")
    visibility = ctx.config.index_visibility
    if visibility == "auto":
        try:
            public = bool(ctx.slurm_text) and jobs_visible_to_all(private_data_of(ctx.slurm_text))
        except SlurmError:
            public = False
    else:
        public = visibility == "everyone"
    mode = stat.S_IMODE(info.st_mode)
    want = 0o644 if public else 0o640
    if mode & stat.S_IWOTH or mode & stat.S_IWGRP or (not public and mode & stat.S_IROTH):
        return Check("index", FAIL, f"{index} mode {mode:04o}; index_visibility {visibility} wants {want:04o}",
                     f"chmod {want:04o} {index}")
    return Check("index", OK, f"{index} ({mode:04o}, index_visibility {visibility})")


# --------------------------------------------------------------------------- munge, clocks, failures


def check_munge() -> list[Check]:
    code, text = run(["munge", "-n"])
    if code != 0:
        return [Check("munge", FAIL, f"munge -n: {last_line(text)}", "start munged with the cluster's key (/etc/munge/munge.key)")]
    code, decoded = run(["unmunge"], stdin=text.encode())
    if code != 0:
        return [Check("munge", FAIL, f"munge -n | unmunge: {last_line(decoded)}", "check munged and its key")]
    return [Check("munge", OK, "munge -n | unmunge")]


def check_clocks(ctx: Context, use_srun: bool) -> list[Check]:
    if not use_srun:
        return [Check("clock skew", SKIP, "not measured", "sattrib doctor --srun runs `date` on every idle node (a one-minute job)")]
    if not ctx.slurm:
        return [Check("clock skew", SKIP, "Slurm not reachable", "")]
    code, text = run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"])
    nodes = sorted(set(text.split())) if code == 0 else []
    if len(nodes) < 2:
        return [Check("clock skew", SKIP, f"{len(nodes)} idle node(s): nothing to compare", "run it when nodes are idle")]
    code, text = run(["srun", "--immediate=10", "--time=1", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}",
                      "--ntasks-per-node=1", "--job-name=sattrib-doctor", "sh", "-c", 'echo "clock $SLURMD_NODENAME $(date +%s.%N)"'],
                     timeout=40.0)
    clocks = {m[1]: float(m[2]) for m in re.finditer(r"^clock (\S+) ([0-9.]+)$", text, re.M)}
    if code != 0 or len(clocks) < 2:
        return [Check("clock skew", WARN, f"srun on {len(nodes)} idle node(s): {last_line(text)}", "")]
    spread = max(clocks.values()) - min(clocks.values())
    early, late = min(clocks, key=clocks.get), max(clocks, key=clocks.get)
    detail = f"{spread:.2f} s between {early} and {late} over {len(clocks)} node(s) (srun's launch spread included)"
    if spread > SKEW_FAIL:
        return [Check("clock skew", FAIL, detail, "run chrony or ntpd on every node: the timeline orders lines across nodes")]
    if spread > SKEW_WARN:
        return [Check("clock skew", WARN, detail, "check chrony/ntpd on the nodes")]
    return [Check("clock skew", OK, detail)]


def check_failures(ctx: Context, since: float, role: str = "all") -> list[Check]:
    """Failures the hooks recorded (slurm_attrib.store.status): the worker's in <results>, the
    node hooks' in <local_spool>."""
    from slurm_attrib.store.status import FAILURES_LOG, recent_failures

    checks = []
    logs = {"controller": [("analysis failures", Path(ctx.config.results))],
            "node": [("node hook failures", Path(ctx.config.local_spool))]}
    for name, folder in logs.get(role, logs["controller"] + logs["node"]):
        try:
            lines = recent_failures(folder, since)
        except OSError as exc:
            checks.append(Check(name, WARN, f"{folder / FAILURES_LOG}: {exc.strerror or exc}", "run sattrib doctor as root"))
            continue
        if not lines:
            checks.append(Check(name, OK, f"none recorded in {folder / FAILURES_LOG}"))
            continue
        jobs = sorted({m[1] for m in (re.search(r" job ([0-9_+]+) ", line) for line in lines) if m})
        fix = "fix what the line says" + (f", then: sattrib batch --force --jobs {','.join(jobs[:20])}" if name == "analysis failures" and jobs else "")
        checks.append(Check(name, WARN, f"{len(lines)} in {folder / FAILURES_LOG} (jobs {', '.join(jobs[:10]) or '?'}); last: {lines[-1][:400]}", fix))
    return checks


def is_controller(ctx: Context) -> bool:
    """This host is one of Slurm's SlurmctldHost entries (`localhost` included)."""
    names = {os.uname().nodename, os.uname().nodename.split(".")[0], "localhost"}
    hosts = [v.split("(")[0].strip() for k, v in ctx.slurm.items() if k.startswith(("SlurmctldHost", "ControlMachine"))]
    return any(h in names for h in hosts)


def diagnose(role: str = "auto", use_srun: bool = False, since_days: float = 7.0) -> list[Check]:
    """Every check of `role`: `controller` (the analysis: EpilogSlurmctld, results, index),
    `node` (capture: Prolog, Epilog, local spool), `all`; `auto` is `all` on a SlurmctldHost,
    else `node`."""
    checks, config, path = check_config()
    ctx = Context(config, path)
    checks += check_scontrol(ctx)
    if role == "auto":
        role = "all" if is_controller(ctx) else "node"
    hooks = {"node": ("Prolog", "Epilog"), "controller": ("EpilogSlurmctld",)}.get(role, tuple(HOOKS))
    if ctx.slurm:
        checks += check_slurm_settings(ctx, hooks)
        checks += check_hooks(ctx, hooks)
    checks += check_spool(ctx, local=role != "controller")
    if role != "node":
        checks += check_results(ctx)
    checks += check_munge()
    checks += check_clocks(ctx, use_srun)
    checks += check_failures(ctx, time.time() - since_days * 86400, role)
    return checks


def as_json(checks: list[Check]) -> list[dict]:
    return [asdict(c) for c in checks]
