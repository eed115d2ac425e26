"""A faulty GPU's UUID and serial come from nvidia-smi output captured with the logs."""

from __future__ import annotations

import shutil
from pathlib import Path

from slurm_attrib.engine.pipeline import analyze_path
from slurm_attrib.ingest.gpuids import pci_key

DEMO = Path(__file__).resolve().parents[1] / "slurm_attrib" / "samples" / "demo"
UUID = "GPU-c78acdf5-c35e-3259-0f06-f48f7f79eff9"  # the demo job's own kernel line names it too

QUERY_CSV = f"""00000000:18:00.0, GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9, 1321021000001
00000000:5D:00.0, {UUID}, 1321021000042
"""

QUERY_Q = f"""
==============NVSMI LOG==============

Timestamp                                 : Wed Dec  2 16:50:01 2026
Driver Version                            : 550.54.15
CUDA Version                              : 12.4

Attached GPUs                             : 2
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Serial Number                         : 1321021000001
    GPU UUID                              : GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9

GPU 00000000:5D:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Serial Number                         : 1321021000042
    GPU UUID                              : {UUID}
"""


def _demo_with(tmp_path: Path, name: str, text: str) -> Path:
    job = tmp_path / "job"
    shutil.copytree(DEMO, job)
    (job / "dgx004" / name).write_text(text, encoding="utf-8")
    return job


def test_pci_addresses_of_nvidia_smi_and_the_xid_line_compare_equal():
    assert pci_key("00000000:5D:00.0") == pci_key("0000:5d:00") == "0000:5d:00"


def test_query_gpu_csv_names_the_faulty_gpu(tmp_path):
    diagnosis = analyze_path(_demo_with(tmp_path, "nvidia-smi-gpus.csv", QUERY_CSV))
    [gpu] = [g for g in diagnosis.gpus if g.xid == 79]
    assert (gpu.node, gpu.pci_bus_id, gpu.uuid, gpu.serial) == ("dgx004", "0000:5d:00", UUID, "1321021000042")


def test_nvidia_smi_q_blocks_name_the_faulty_gpu(tmp_path):
    diagnosis = analyze_path(_demo_with(tmp_path, "nvidia-smi-q.txt", QUERY_Q))
    [gpu] = [g for g in diagnosis.gpus if g.xid == 79]
    assert (gpu.uuid, gpu.serial) == (UUID, "1321021000042")


def test_the_driver_kernel_line_names_the_uuid():
    """`NVRM: GPU at PCI:0000:5d:00: GPU-...` precedes the Xid in the demo's kernel log."""
    [gpu] = [g for g in analyze_path(DEMO).gpus if g.xid == 79]
    assert gpu.uuid == UUID and gpu.serial is None


def test_a_gpu_no_line_identifies_has_no_identity(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(DEMO, job)
    for log in job.glob("*/*"):
        log.write_text("".join(line for line in log.read_text().splitlines(True) if "NVRM: GPU at PCI" not in line))
    [gpu] = [g for g in analyze_path(job).gpus if g.xid == 79]
    assert gpu.uuid is None and gpu.serial is None


def test_a_large_kernel_log_still_names_the_uuid(tmp_path):
    """A node's kernel log above the held size (ingest.layout.HOLD_BYTES) is read again when
    analysed: the driver's line of the GPU that fell off the bus is read from it all the same."""
    job = tmp_path / "job"
    shutil.copytree(DEMO, job)
    (job / "dgx004" / "journal.txt").write_text(
        "".join(line for line in (job / "dgx004" / "journal.txt").read_text().splitlines(True) if "NVRM: GPU at PCI" not in line))
    dmesg = job / "dgx004" / "dmesg.txt"
    filler = "".join(f"[    0.{i:06d}] ACPI: PCI Interrupt Link [LNK{i % 10}] (IRQs 5 10 11) *0, disabled.\n" for i in range(4000))
    dmesg.write_text(filler + dmesg.read_text())
    assert dmesg.stat().st_size > 256 * 1024
    [gpu] = [g for g in analyze_path(job).gpus if g.xid == 79]
    assert gpu.uuid == UUID
