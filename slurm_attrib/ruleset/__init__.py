"""Rule pack: the YAML format, its loader, the line scanner and the Python hooks."""
