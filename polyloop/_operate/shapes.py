"""JSON shapes of records that several documents show (`inspect --json`, `ls --json`)."""

from __future__ import annotations

from typing import Any

from .._log.records import Resolution, RunFinished

#: The version of the JSON documents' shapes (docs/reference/json.md): every document carries it
#: as `"schema"`; raised when a field changes shape.
JSON_SCHEMA = 1


def resolution_json(r: Resolution) -> dict[str, Any]:
    """A resolution as `inspect --json` lists it."""
    return {"result_id": r.result_id, "outcome": r.outcome, "observation": r.observation, "by": r.by,
            "reason": r.reason, "source": r.source, "at": r.at}


def cancelled_json(f: RunFinished | None) -> dict[str, Any] | None:
    """Who cancelled a run, why and when (`{"by", "why", "at"}`); None unless it ended cancelled."""
    if f is None or f.reason != "cancelled":
        return None
    return {"by": f.by, "why": f.why, "at": f.at}
