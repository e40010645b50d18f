"""The cancel-request channel: how `polyloop cancel` asks a live run to stop.

A run that a live process holds cannot be ended by anyone else (only the
holder writes its log). `cancel` leaves a durable *request* instead, in the
store, beside the run's log; the holder looks for it at each safe point of
its loop (before every model call: between steps, never inside a tool
call) and, when it finds one, ends the run itself with a `run_finished` of
reason `cancelled` naming who asked and why. The request is not a record of
the log: the log says only what happened (the run was cancelled), and the
request is removed once it has.

Where the request lives is the store's business (docs/reference/stores.md):
the JSONL store writes `<directory>/.<run_id>.cancel`, the PostgreSQL store a
row of `polyloop_cancel_requests`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .records import utc_now


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRequest:
    """Who asked a run to stop, why, and when."""

    by: str
    why: str
    at: str = field(default_factory=utc_now)

    def to_json(self) -> dict[str, str]:
        return {"by": self.by, "why": self.why, "at": self.at}

    @classmethod
    def from_json(cls, value: Any) -> CancelRequest | None:
        """The request a store kept, or None when what it kept is not one (a torn or foreign file)."""
        if not isinstance(value, dict):
            return None
        by, why, at = value.get("by"), value.get("why"), value.get("at")
        if not (isinstance(by, str) and isinstance(why, str) and isinstance(at, str)) or not by or not why:
            return None
        return cls(by=by, why=why, at=at)


@runtime_checkable
class CancellingStore(Protocol):
    """A store that can carry a request to stop to a run's live holder (optional capability).

    Durability: `request_cancel` returns once the request survives a crash
    of the machine. Concurrency: any process may request; the holder reads
    with `cancel_request` at its safe points, which must be cheap (it may
    answer from a cache a second old: a request is then seen one step later)
    and must never block on the holder's own hold. `clear_cancel` removes the
    request once the run has finished (a request left by a crash in between
    is harmless: a finished run is never resumed, and `archive` moves it with
    the run). Without this capability `cancel` can still end a run that
    nobody holds, and refuses a held one.
    """

    async def request_cancel(self, run_id: str, request: CancelRequest) -> None:
        """Leave a request to stop the run (replacing an earlier one). Durable before it returns."""
        ...

    async def cancel_request(self, run_id: str) -> CancelRequest | None:
        """The run's pending request to stop, or None."""
        ...

    async def clear_cancel(self, run_id: str) -> None:
        """Remove the run's request to stop, if any."""
        ...
