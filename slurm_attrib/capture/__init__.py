"""Capture on the compute nodes: the Slurm Prolog/Epilog hot path.

Everything under this package is imported by `epilog/sattrib-epilog` and `epilog/sattrib-prolog`
on every node at every job end, so it uses only the standard library (plus PyYAML to read the
rule literals and, when one exists, the site config).  No pydantic, jinja2 or click: a test
enforces it.

Modules:
  common   validation, hostlists, the job context from the environment, atomic spool writes,
           syslog, sysfs/procfs roots, IB counters and GPU identity
  literals the rule pack's `match.contains` literals (read straight from the YAML files)
  sources  the capture sources: built-in defaults, bounded command/file reading, pre-filter
  epilog   `python -m slurm_attrib.capture.epilog`: writes the node bundle
  prolog   `python -m slurm_attrib.capture.prolog`: records start time and counter snapshot
"""
