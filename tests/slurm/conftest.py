"""A real single-machine Slurm 22.05 cluster for tests (contrib/testcluster/).

Fixtures
--------
``slurm_cluster`` (module scope; the cluster itself lives for the whole session)
    Runs ``contrib/testcluster/install.sh`` (the tests are skipped with one loud
    line when not root or apt-get is missing), then ``start.sh`` into a fresh
    state dir under /tmp on free ports, and yields a :class:`SlurmCluster`:

    - ``.conf``        path of slurm.conf (``SLURM_CONF``)
    - ``.state_dir``   the cluster's state dir (logs in ``state_dir/log``)
    - ``.jobs_dir``    world-writable dir where job scripts/outputs go
    - ``.env``         ``dict`` for ``subprocess`` (os.environ + SLURM_CONF)
    - ``.nodes``       ``("gpu01", "gpu02", "gpu03", "gpu04")``
    - ``.test_user``   ``"sattrib-user"`` (non-root Unix user with an account)
    - ``.start_seconds`` wall time start.sh took
    - ``.run(*argv, user=None, check=True, timeout=60)`` -> CompletedProcess (text)
    - ``.sbatch(script_text, user=None, **opts)`` -> int job id.  ``opts`` become
      ``--key=value`` (``_`` -> ``-``; ``True`` -> bare flag), e.g.
      ``nodes=4, job_name="x", output="/path/%j.out"``.  Defaults:
      ``--chdir=jobs_dir``, ``--output=jobs_dir/job-%j.out``.  A script without a
      ``#!`` line gets ``#!/bin/bash``.
    - ``.wait_job(jobid, timeout=60)`` -> final sacct State (first word, e.g.
      ``"COMPLETED"``, ``"FAILED"``, ``"NODE_FAIL"``, ``"CANCELLED"``).
    - ``.sacct(jobid, *fields)`` -> dict of the job's allocation line (``-X``).
    - ``.output(jobid)`` -> text of ``jobs_dir/job-<id>.out``.
    - ``.kill_slurmd(node)`` / ``.start_slurmd(node)``: simulate a node failure /
      bring the node back (ReturnToService=2 makes it idle again).

``slurm_cluster_config`` (module scope) -> :class:`ClusterConfig` or a ``dict``
    with the same keys (``prolog``, ``epilog``, ``epilog_ctld``,
    ``extra_slurm_conf``, ``extra_env``; paths may be ``Path``).
    What the cluster is started with (``private_etc``: a folder whose files every
    daemon and hook sees under /etc, in a private mount namespace; see _PRIVATE_ETC).
    The default comes from the environment
    variables ``SATTRIB_PROLOG``, ``SATTRIB_EPILOG``, ``SATTRIB_EPILOG_CTLD``
    (absolute paths of executables) and ``SATTRIB_EXTRA_SLURM_CONF`` (extra
    slurm.conf lines); none set = no Prolog/Epilog configured.  A test module
    (or a conftest below this one) overrides it to get its own cluster::

        @pytest.fixture(scope="module")
        def slurm_cluster_config():
            return {"epilog": REPO / "epilog/sattrib-epilog",
                    "epilog_ctld": REPO / "epilog/sattrib-epilog-ctld",
                    "extra_env": {"SATTRIB_SLURMD_TIMEOUT": "10"}}

    (A dict, because ``from conftest import ...`` is ambiguous with several
    conftest.py files in the tree.)

    Only one cluster runs at a time: modules with equal configs share it; a
    module with a different config stops the running one and starts a fresh one
    (~6 s).  Everything is stopped at session end.  Note that EpilogSlurmctld
    runs as the ``slurm`` user, Prolog/Epilog as root; every parent directory of
    the scripts must be traversable by them.

Set ``SATTRIB_KEEP_TESTCLUSTER=1`` to keep the state dir (logs) after the session.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TESTCLUSTER = REPO / "contrib" / "testcluster"
NODES = ("gpu01", "gpu02", "gpu03", "gpu04")
TEST_USER = "sattrib-user"
# sacct states after which a job will not change any more.
_RUNNING_STATES = {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING",
                   "SUSPENDED", "RESIZING", "STAGE_OUT", "SIGNALING", "REQUEUE_HOLD",
                   "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT", "STOPPED", ""}


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    prolog: str | None = None
    epilog: str | None = None
    epilog_ctld: str | None = None
    extra_slurm_conf: str = ""
    # Any further start.sh knobs (e.g. {"SATTRIB_SLURMD_TIMEOUT": "10"}).
    extra_env: tuple[tuple[str, str], ...] = ()
    # A folder whose files every daemon (and so every hook) sees under /etc: see _PRIVATE_ETC.
    private_etc: str | None = None

    @classmethod
    def from_env(cls) -> "ClusterConfig":
        return cls(
            prolog=os.environ.get("SATTRIB_PROLOG") or None,
            epilog=os.environ.get("SATTRIB_EPILOG") or None,
            epilog_ctld=os.environ.get("SATTRIB_EPILOG_CTLD") or None,
            extra_slurm_conf=os.environ.get("SATTRIB_EXTRA_SLURM_CONF", ""),
        )

    def start_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("SATTRIB_PROLOG", "SATTRIB_EPILOG", "SATTRIB_EPILOG_CTLD",
                            "SATTRIB_EXTRA_SLURM_CONF", "SLURM_CONF")}
        for key, val in (("SATTRIB_PROLOG", self.prolog), ("SATTRIB_EPILOG", self.epilog),
                         ("SATTRIB_EPILOG_CTLD", self.epilog_ctld),
                         ("SATTRIB_EXTRA_SLURM_CONF", self.extra_slurm_conf)):
            if val:
                env[key] = val
        env.update(dict(self.extra_env))
        return env


def _free_ports() -> dict[str, str]:
    """Pick free loopback ports: ctld, dbd, mariadb and 4 consecutive slurmd ports."""
    def free(port: int) -> bool:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                return False
        return True

    for base in range(20000 + (os.getpid() * 10) % 20000, 60000, 10):
        ports = list(range(base, base + 7))
        if all(free(p) for p in ports):
            return {"SATTRIB_CTLD_PORT": str(ports[0]), "SATTRIB_DBD_PORT": str(ports[1]),
                    "SATTRIB_DB_PORT": str(ports[2]), "SATTRIB_SLURMD_PORT_BASE": str(ports[3])}
    raise RuntimeError("no free port range found")


class SlurmCluster:
    def __init__(self, state_dir: Path, start_seconds: float):
        self.state_dir = state_dir
        self.conf = str(state_dir / "etc" / "slurm.conf")
        self.jobs_dir = state_dir / "jobs"
        self.log_dir = state_dir / "log"
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.nodes = NODES
        self.test_user = TEST_USER
        self.start_seconds = start_seconds
        self._n = 0

    def run(self, *argv: str, user: str | None = None, check: bool = True,
            timeout: float = 60, input: str | None = None) -> subprocess.CompletedProcess:
        cmd = [str(a) for a in argv]
        if user and user != "root":
            cmd = ["runuser", "-u", user, "--", *cmd]
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True,
                              timeout=timeout, input=input, cwd=self.jobs_dir)
        if check and proc.returncode != 0:
            raise AssertionError(f"{shlex.join(cmd)} exited {proc.returncode}\n"
                                 f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def sbatch(self, script_text: str, user: str | None = None, **opts) -> int:
        self._n += 1
        if not script_text.startswith("#!"):
            script_text = "#!/bin/bash\n" + script_text
        script = self.jobs_dir / f"script-{os.getpid()}-{self._n}.sh"
        script.write_text(script_text)
        script.chmod(0o755)
        opts.setdefault("chdir", str(self.jobs_dir))
        opts.setdefault("output", str(self.jobs_dir / "job-%j.out"))
        args = ["sbatch", "--parsable"]
        for key, val in opts.items():
            flag = "--" + key.replace("_", "-")
            if val is True:
                args.append(flag)
            elif val is not None and val is not False:
                args.append(f"{flag}={val}")
        args.append(str(script))
        out = self.run(*args, user=user).stdout.strip()
        return int(out.split(";")[0])

    def sacct(self, jobid: int, *fields: str) -> dict[str, str]:
        fields = fields or ("JobID", "State", "ExitCode", "User", "NodeList")
        proc = self.run("sacct", "-X", "-n", "-P", "-j", str(jobid),
                        "-o", ",".join(fields), check=False)
        line = next((ln for ln in proc.stdout.splitlines() if ln.strip()), "")
        vals = line.split("|") if line else [""] * len(fields)
        return dict(zip(fields, vals))

    def wait_job(self, jobid: int, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.sacct(jobid, "State")["State"].split(" ")[0]
            if state not in _RUNNING_STATES:
                return state
            time.sleep(0.5)
        raise TimeoutError(f"job {jobid} still {state or 'unknown'} after {timeout}s")

    def output(self, jobid: int) -> str:
        return (self.jobs_dir / f"job-{jobid}.out").read_text()

    def slurmd_pid(self, node: str) -> int | None:
        try:
            return int((self.state_dir / "run" / f"slurmd-{node}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def kill_slurmd(self, node: str, sig: int = 9) -> None:
        pid = self.slurmd_pid(node)
        if pid:
            os.kill(pid, sig)

    def start_slurmd(self, node: str) -> None:
        subprocess.run(["setsid", "slurmd", "-N", node], env=self.env, check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30)


# ClusterConfig.private_etc: the daemons are started in a private mount namespace whose /etc is an
# overlay of the machine's with the folder's files on top, and /etc/slurm/slurm.conf naming the
# cluster's, as a site that keeps its configs in /etc has them; the machine's own /etc is never
# written (the overlay's upper layer is a folder under /tmp).
_NO_PRIVATE_ETC = "private /etc:"
_PRIVATE_ETC = (
    'o=$1 src=$2 state=$3; shift 3; mkdir -p "$o/upper/slurm" "$o/work" && cp -a "$src/." "$o/upper/"'
    ' && ln -sfn "$state/etc/slurm.conf" "$o/upper/slurm/slurm.conf"'
    ' && mount -t overlay overlay -o "lowerdir=/etc,upperdir=$o/upper,workdir=$o/work" /etc'
    f' || {{ echo "{_NO_PRIVATE_ETC} cannot mount the overlay" >&2; exit 3; }}; exec "$@"'
)


class _Manager:
    """Keeps at most one cluster running; restarts it when the config changes."""

    def __init__(self):
        self.config: ClusterConfig | None = None
        self.cluster: SlurmCluster | None = None
        self.skip_reason: str | None = None
        self.installed = False

    def _install(self) -> None:
        if self.installed:
            return
        if os.geteuid() != 0:
            self.skip_reason = ("slurm test cluster: SKIPPED — needs root "
                                "(it installs packages and starts Slurm daemons)")
        elif not shutil.which("apt-get") and not shutil.which("slurmctld"):
            self.skip_reason = "slurm test cluster: SKIPPED — no apt-get (Debian/Ubuntu only)"
        else:
            proc = subprocess.run([str(TESTCLUSTER / "install.sh")], capture_output=True,
                                  text=True, timeout=900, stdin=subprocess.DEVNULL)
            if proc.returncode in (2, 3):
                self.skip_reason = proc.stderr.strip().splitlines()[-1]
            elif proc.returncode != 0:
                pytest.fail(f"contrib/testcluster/install.sh failed ({proc.returncode}):\n"
                            f"{proc.stdout}\n{proc.stderr}", pytrace=False)
        self.installed = True

    def get(self, config: ClusterConfig) -> SlurmCluster:
        self._install()
        if self.skip_reason:
            pytest.skip(self.skip_reason)
        if self.cluster is not None and self.config == config:
            return self.cluster
        self.stop()
        state_dir = Path(tempfile.mkdtemp(prefix="sattrib-testcluster-", dir="/tmp"))
        state_dir.chmod(0o755)
        env = config.start_env()
        env.update(_free_ports())
        t0 = time.monotonic()
        command = [str(TESTCLUSTER / "start.sh"), str(state_dir)]
        if config.private_etc:
            overlay = tempfile.mkdtemp(prefix="sattrib-etc-overlay-", dir="/tmp")
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _PRIVATE_ETC, "sh",
                       overlay, config.private_etc, str(state_dir), *command]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
        elapsed = time.monotonic() - t0
        if proc.returncode != 0 and config.private_etc and (_NO_PRIVATE_ETC in proc.stderr or proc.stderr.startswith("unshare:")):
            subprocess.run([str(TESTCLUSTER / "stop.sh"), str(state_dir)],
                           capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
            pytest.skip(f"no private mount namespace with an overlay of /etc here: {proc.stderr.strip()}")
        if proc.returncode != 0:
            subprocess.run([str(TESTCLUSTER / "stop.sh"), str(state_dir)],
                           capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
            pytest.fail(f"contrib/testcluster/start.sh failed ({proc.returncode}) after "
                        f"{elapsed:.1f}s; state dir {state_dir}\n{proc.stdout}\n{proc.stderr}",
                        pytrace=False)
        self.config, self.cluster = config, SlurmCluster(state_dir, elapsed)
        return self.cluster

    def stop(self) -> None:
        if self.cluster is None:
            return
        state_dir = self.cluster.state_dir
        subprocess.run([str(TESTCLUSTER / "stop.sh"), str(state_dir)],
                       capture_output=True, timeout=180, stdin=subprocess.DEVNULL)
        if not os.environ.get("SATTRIB_KEEP_TESTCLUSTER"):
            shutil.rmtree(state_dir, ignore_errors=True)
        self.cluster = self.config = None


@pytest.fixture(scope="session")
def slurm_cluster_manager():
    manager = _Manager()
    yield manager
    manager.stop()


@pytest.fixture(scope="module")
def slurm_cluster_config() -> ClusterConfig:
    return ClusterConfig.from_env()


def _as_config(value) -> ClusterConfig:
    if value is None:
        return ClusterConfig()
    if isinstance(value, ClusterConfig):
        return value
    value = dict(value)
    if isinstance(value.get("extra_env"), dict):
        value["extra_env"] = tuple(sorted(value["extra_env"].items()))
    for key in ("prolog", "epilog", "epilog_ctld", "private_etc"):
        if value.get(key) is not None:
            value[key] = str(value[key])
    return ClusterConfig(**value)


@pytest.fixture(scope="module")
def slurm_cluster(slurm_cluster_manager, slurm_cluster_config) -> SlurmCluster:
    return slurm_cluster_manager.get(_as_config(slurm_cluster_config))


def pytest_configure(config):
    config.addinivalue_line("markers", "slurm: needs the real local Slurm test cluster (root)")
