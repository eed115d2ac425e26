"""Attribution: events from rule hits, correlation across nodes, and the diagnosis."""
