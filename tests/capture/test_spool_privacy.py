"""Spool bundles hold a job's output: readable by root and SlurmUser's group only, and the
shared copy is written by a child the epilog abandons when the shared filesystem hangs.

The checks of who can read run `cat` as other users (setpriv), so they need root; the hung
filesystem is a real one: an ext4 image on a loop device, frozen with fsfreeze."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, source_of

BOUND = 4  # epilog_timeout in the test config
SLACK = 1.5

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="reading as other users needs root (setpriv)")


def _user(*names: str) -> pwd.struct_passwd:
    for name in names:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    pytest.skip(f"no user among {', '.join(names)} on this host")


def _can_read(user: str, path: Path) -> bool:
    done = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={pwd.getpwnam(user).pw_gid}", "--init-groups",
                           "cat", str(path)], capture_output=True, timeout=10)
    return done.returncode == 0


@pytest.fixture
def open_dir():
    """A folder every user can traverse (pytest's own tmp folders are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="sattrib-privacy-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _kernel_source(node) -> None:
    log = node.tmp / "kernel.log"
    log.write_text("2024-04-09T01:21:38,000000+00:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    node.source(name="kernel", kind="kernel", path=str(log))


@as_root
def test_bundle_readable_by_slurm_user_only(node, open_dir):
    slurm, other = _user("slurm"), _user("nobody")
    node.config["spool"] = str(open_dir / "spool")
    (open_dir / "spool").mkdir(mode=0o755)
    node.config["slurm_user"] = slurm.pw_name
    _kernel_source(node)
    rc, _ = node.run()
    assert rc == 0
    bundle = Path(node.config["spool"]) / "4242" / "nodes" / "gpu01.json.gz"
    job_folder = bundle.parent.parent
    for path, mode, owner in ((bundle, 0o640, 0), (bundle.parent, 0o750, 0), (job_folder, 0o750, slurm.pw_uid)):
        st = path.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (mode, owner, slurm.pw_gid), path
    assert _can_read(slurm.pw_name, bundle)  # the controller's worker
    assert not _can_read(other.pw_name, bundle)  # any other user


@as_root
def test_the_worker_as_slurm_user_adds_job_json_to_the_folder_the_epilog_made(node, open_dir):
    """The epilog (root) makes <spool>/<jobid> and gives it to SlurmUser: the worker, which runs as
    SlurmUser, writes the job record there; root's re-analysis still reads the bundles as the kernel's."""
    slurm = _user("slurm")
    node.config["spool"] = str(open_dir / "spool")
    (open_dir / "spool").mkdir(mode=0o755)
    node.config["slurm_user"] = slurm.pw_name
    _kernel_source(node)
    assert node.run()[0] == 0
    job_folder = Path(node.config["spool"]) / "4242"
    code = ("import sys; from pathlib import Path; from slurm_attrib.slurm import JobInfo; from slurm_attrib.worker import _write_job_json; "
            "_write_job_json(Path(sys.argv[1]), JobInfo(job_id='4242', user='alice', uid=1000, state='FAILED', "
            "exit_code='1:0', start=None, end=None, nodes=('gpu01',)))")
    done = subprocess.run(["setpriv", f"--reuid={slurm.pw_uid}", f"--regid={slurm.pw_gid}", "--init-groups",
                           sys.executable, "-c", code, str(job_folder)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, cwd="/")
    assert done.returncode == 0 and "cannot write" not in done.stderr, done.stderr
    assert json.loads((job_folder / "job.json").read_text())["state"] == "FAILED"
    analysed = subprocess.run([sys.executable, "-m", "slurm_attrib", "analyze", str(job_folder)], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "SATTRIB_CONFIG": str(node.write_config()),
                                                           "PYTHONPATH": str(REPO)})
    diagnosis = json.loads(analysed.stdout)
    assert (diagnosis["category"], diagnosis["culprit_nodes"], diagnosis["outcome"]["state"]) == (
        "gpu_fell_off_bus", ["gpu01"], "FAILED"), analysed.stderr
    assert diagnosis["drain"], "the bundle in SlurmUser's job folder is still the kernel's evidence"


@as_root
def test_slurm_user_from_slurm_conf(node, open_dir):
    slurm = _user("slurm")
    conf = node.tmp / "slurm.conf"
    conf.write_text("ClusterName=test  # a comment\n#SlurmUser=root\nSlurmUser=slurm\n")
    node.env["SLURM_CONF"] = str(conf)
    _kernel_source(node)
    rc, _ = node.run()
    assert rc == 0
    assert node.bundle_path().stat().st_gid == slurm.pw_gid
    assert not any("SlurmUser" in e for e in node.bundle()["capture"]["errors"])


@as_root
def test_unknown_slurm_user_leaves_the_bundle_to_root(node):
    node.config["slurm_user"] = "no-such-user-sattrib"
    _kernel_source(node)
    rc, _ = node.run()
    assert rc == 0
    st = node.bundle_path().stat()
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o640, 0)
    assert any("no-such-user-sattrib" in e and "root only" in e for e in node.bundle()["capture"]["errors"])


@as_root
def test_job_folder_made_by_a_user_is_not_written_into(node):
    """A user who could make <spool>/<jobid> first would own it: the bundle goes to the local spool."""
    other = _user("nobody")
    squat = node.spool / "4242"
    squat.mkdir()
    os.chown(squat, other.pw_uid, other.pw_gid)
    _kernel_source(node)
    rc, _ = node.run()
    assert rc == 0
    assert list(squat.iterdir()) == []
    bundle = node.bundle(local=True)
    assert any("owned by uid" in e for e in bundle["capture"]["errors"])


def _loop_mount(where: Path, image: Path) -> bool:
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("mkfs.ext4", "mount", "fsfreeze")):
        return False
    subprocess.run(["truncate", "-s", "16M", str(image)], check=True)
    if subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True).returncode != 0:
        return False
    where.mkdir()
    return subprocess.run(["mount", "-o", "loop", str(image), str(where)], capture_output=True).returncode == 0


def test_frozen_shared_spool_cannot_hold_the_epilog(node, tmp_path):
    """The shared spool's filesystem is frozen (every write blocks, uninterruptibly): the epilog
    still exits 0 within its bound with the bundle in the local spool, and the abandoned writer
    completes the shared copy once the filesystem thaws."""
    shared = tmp_path / "shared"
    if not _loop_mount(shared, tmp_path / "shared.img"):
        pytest.skip("needs root, a loop device, mkfs.ext4 and fsfreeze")
    try:
        node.config["spool"] = str(shared)
        _kernel_source(node)
        subprocess.run(["fsfreeze", "-f", str(shared)], check=True)
        try:
            rc, elapsed = node.run()
            assert rc == 0 and elapsed < BOUND + SLACK
            bundle = node.bundle(local=True)
            assert bundle["capture"]["spool"] == "local"
            assert any("shared spool" in e and "no answer" in e for e in bundle["capture"]["errors"])
            assert "NVRM: Xid" in source_of(bundle, "kernel")["lines"][0][1]
        finally:
            subprocess.run(["fsfreeze", "-u", str(shared)], check=True)
        shared_bundle = shared / "4242" / "nodes" / "gpu01.json.gz"
        for _ in range(100):
            if shared_bundle.exists():
                break
            time.sleep(0.05)
        assert shared_bundle.exists()  # the child finished after the thaw
    finally:
        for _ in range(50):
            if subprocess.run(["umount", str(shared)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)


def test_slurm_conf_parsing():
    from slurm_attrib.capture.common import slurm_user_from_conf

    with tempfile.NamedTemporaryFile("w", suffix=".conf") as conf:
        conf.write("SlurmctldHost=ctl\n  slurmuser = slurm  # who runs slurmctld\n")
        conf.flush()
        assert slurm_user_from_conf({"SLURM_CONF": conf.name}) == "slurm"
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as conf:
        conf.write("SlurmctldHost=ctl\n# SlurmUser=slurm\n")
        conf.flush()
        assert slurm_user_from_conf({"SLURM_CONF": conf.name}) is None  # Slurm's default: root
