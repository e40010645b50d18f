"""How `inspect` tells a run that stopped on an outage (log format 1.3): its reason and its `stopped` object."""

from __future__ import annotations

from typing import Any

from .._log.records import RunStopped
from .._log.unavailable import unavailable_sentence


def stop_reason(s: RunStopped) -> str:
    """The one-sentence `reason` of a run stopped, resumable, by `s`."""
    return f"stopped on an outage: {unavailable_sentence(s.endpoint, s.error, s.failures, s.since)}; resume tries again"


def stopped_json(s: RunStopped | None) -> dict[str, Any] | None:
    """The `stopped` object of `inspect --json`: the run's latest `run_stopped` while it stands, else None."""
    if s is None:
        return None
    return {"cause": s.cause, "step": s.step, "endpoint": s.endpoint, "error": s.error, "attempts": s.attempts,
            "failures": s.failures, "since": s.since, "at": s.at}
