"""People's tools over a log: inspect, decide, ls, verify, and what resume would do next."""
