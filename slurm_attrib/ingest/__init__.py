"""Reading evidence: the logs layout and capture bundles, file kinds, timestamps, line origins."""
