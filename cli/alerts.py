"""The alert line: every failed verification (or rollback) a command's run raised, on stderr.

The durable record is the alert (docs/explanation/human-oversight.md); this
line makes sure a person at the terminal sees it too, even when the run went
on after a successful rollback. It is read back from the log after the run,
so it covers `run` and `resume` alike; it never fails the command.
"""

from __future__ import annotations

import asyncio
import datetime as dt

from polyloop import ActionResult, GuardCheck, Intent, JsonlStore

from . import render


def now() -> str:
    """The log's timestamp format, to compare with the records' `at`."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def warn_since(store: JsonlStore, run_id: str | None, since: str) -> None:
    """Print one alert line per failed verification or rollback recorded at or after `since`."""
    if run_id is None:
        return
    try:
        records = asyncio.run(store.read_log(run_id))
    except Exception:  # a warning must not turn into a second failure: the record stays
        return
    tools: dict[str, str] = {}
    found: list[tuple[str, str, str]] = []
    for r in records:
        if isinstance(r, Intent) and r.tool is not None:
            tools[r.result_id] = r.tool
        elif isinstance(r, GuardCheck) and r.guard == "verify" and not r.passed and r.at >= since:
            then = f"; rollback: {r.rollback}" if r.rollback else "; no rollback: the run stops"
            found.append((r.result_id, tools.get(r.result_id, "?"), f"verification failed: "
                          f"{r.reason or 'it returned False'}{then}"))
        elif isinstance(r, ActionResult) and r.is_error and r.at >= since and "-r" in r.result_id:
            found.append((r.result_id, tools.get(r.result_id, "?"), f"rollback failed: {r.observation}"))
    render.alerts(found)
