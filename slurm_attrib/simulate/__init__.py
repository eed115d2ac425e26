"""Scenario simulator: logs-layout job directories with known ground truth.

`write_scenario(name, out_dir, nodes, ranks_per_node, seed)` writes one job in the contract's
"logs layout" and returns what a correct analysis must say about it:

    out_dir/job.json              job context (job_id, user, state, exit_code, start, end, nodes)
    out_dir/slurm-<id>.out        job-level output: every rank's NCCL/PyTorch/torchrun lines,
                                  srun and slurmstepd messages (optionally `srun --label` prefixed)
    out_dir/<host>/dmesg.txt      kernel ring buffer (boot seconds, `dmesg -T` or `--time-format iso`)
    out_dir/<host>/syslog|messages|journal.txt
                                  RFC 3164 syslog or `journalctl -o short-iso` (some nodes have none)

Everything is drawn from a `random.Random` seeded with the scenario name, sizes and seed, and no
wall clock is read, so the same arguments always give the same bytes.  Each node's clock is skewed
by up to 2 s; kernel and syslog lines carry benign noise (cable events, corrected EDAC/AER errors,
systemd, slurmd, chrony, nvidia-peermem), and the job output carries NCCL init lines that map ranks
to hosts, GPUs (busId) and IPoIB addresses.
"""

from slurm_attrib.simulate.scenarios import SCENARIOS, write_scenario
from slurm_attrib.simulate.truth import Expectation, GroundTruth, Scenario

__all__ = ["SCENARIOS", "Expectation", "GroundTruth", "Scenario", "write_scenario"]
