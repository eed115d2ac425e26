"""Fleet analysis over stored diagnoses: batch re-analysis, the fleet report, repeat offenders, fabric patterns."""
