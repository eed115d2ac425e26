"""contrib/dev/probe-presentation: how a diagnosis stands up to how its log is presented."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "contrib" / "dev" / "probe-presentation"
CASES = ["713-nccl1706-allreduce-perf-2gpu-ok-destroy-complete", "709-privategpt326-illegal-instruction-no-avx2"]


@pytest.mark.parametrize("how", ["label", "rank", "indent", "cri", "ray", "pdsh", "compose", "kubectl", "quote", "stamp",
                                 "tstamp", "ansi", "crlf", "startup", "harmless", "nccl_info"])
def test_a_log_reads_alike_however_it_is_presented(tmp_path, how):
    # nccl-tests' closing check and a shell's signal line are read from the start of the program's
    # line: a launcher's prefix or a post's indent before it changes nothing
    for name in CASES:
        shutil.copytree(ROOT / "tests" / "data" / "public_excerpts" / name, tmp_path / "set" / name)
    done = subprocess.run([sys.executable, str(PROBE), how, str(tmp_path)], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == f"{how}: 0 of 2 cases changed"


def test_a_changed_verdict_is_listed(tmp_path):
    case = tmp_path / "set" / "one"
    case.mkdir(parents=True)
    (case / "expected.yaml").write_text("domain: none\ncategory: success\n")
    # a syslog line pasted into job output does not come labelled: labelled, its header is not read
    # (and the rule, gpu.amdgpu_xgmi_link_error, reads kernel and syslog lines only)
    (case / "log.txt").write_text("Mar 24 09:53:55 cn110 kernel: amdgpu 0000:c1:00.0: amdgpu: XGMI PCS DataLossErr detected\n")
    done = subprocess.run([sys.executable, str(PROBE), "label", str(tmp_path)], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "label: 1 of 1 cases changed", done.stdout


def test_a_diagnosis_reads_alike_whatever_its_hosts_are_called(tmp_path):
    # a node called for its GPUs (`gpu001`) is no GPU: the header that names a host is no part of
    # what the second look's words read
    case = tmp_path / "set" / "one"
    (case / "debian").mkdir(parents=True)
    (case / "expected.yaml").write_text("domain: host\ncategory: pcie_error\n")
    (case / "debian" / "dmesg.txt").write_text(
        "Nov  9 11:20:38 debian kernel: [69300.887669] pcieport 0000:00:02.0: AER: Multiple Corrected error received: id=0010\n"
        "Nov  9 11:20:38 debian kernel: [69300.894370] pcieport 0000:00:02.0:    [12] Replay Timer Timeout\n")
    env = {**os.environ, "PROBE_HOST_NAMES": "gpu{:03d}"}
    done = subprocess.run([sys.executable, str(PROBE), "hosts", str(tmp_path)], capture_output=True, text=True,
                          check=True, env=env)
    assert done.stdout.splitlines()[-1] == "hosts: 0 of 1 cases changed", done.stdout
