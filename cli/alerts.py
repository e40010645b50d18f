"""The alert line: every failed verification (or rollback) a command's run raised, on stderr.

The durable record is the alert (docs/explanation/human-oversight.md); this
line makes sure a person at the terminal sees it too, even when the run went
on after a successful rollback. The library tells it as the run raises each
alert (and, on resume, each failed verification still unsettled: told again,
so at least once), through `run_target`'s and `resume_run`'s `on_alert`; the
log is not read again for it.
"""

from __future__ import annotations

from typing import Any

from . import waits_view


class AlertLines:
    """An `on_alert` for `run_target` / `resume_run` that prints one line per alert, once each."""

    def __init__(self) -> None:
        self.shown: set[str] = set()

    def __call__(self, event: dict[str, Any]) -> None:
        rid = str(event.get("result_id"))
        if rid in self.shown:
            return
        self.shown.add(rid)
        reason = event.get("reason")
        if event.get("event") == "rollback_failed":
            why = f"rollback failed: {reason}"
        else:
            kind = event.get("rollback")
            then = f"; rollback: {kind}" if kind else "; no rollback: the run stops"
            why = f"verification failed: {reason or 'it returned False'}{then}"
        waits_view.alerts([(rid, str(event.get("tool", "?")), why)])
