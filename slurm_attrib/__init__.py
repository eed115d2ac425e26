"""slurm-attrib: failure attribution for distributed GPU jobs on Slurm."""

__version__ = "0.1.0"
