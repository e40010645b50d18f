"""`cancel`: end a run on the record, with who and why (log format 1.3).

A run nobody holds (it stopped resumable, or waits for a person) is ended
at once: under the run's lock, a durable `run_finished` of reason
`cancelled` naming who and why. A run a live process holds (a `polyloop
run`, a resume, a worker's lease) cannot be written by anyone else: it is
asked to stop instead, through the store's cancel-request channel
(polyloop/_log/cancel_port.py), and ends itself the same way at its next
safe point — before its next model call, never inside a tool call. With
`wait`, `cancel` then waits until the run has ended; should the holder
stop (or die) before it reaches a safe point, `cancel` takes the run and
ends it itself. See docs/how-to/operate-runs-day-to-day.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any, Literal

from .._log.cancel_port import CancelRequest
from .._log.errors import PolyLoopError, RunActiveError, StoreError
from .._log.ids import check_run_id
from .._log.records import RunFinished, representable
from .._log.store_port import Store
from .._log.who import REASON, said, settled_by
from .._run.cancelling import cancel_channel
from .._run.hold import read_or_none, walked, write_settlement
from .shapes import JSON_SCHEMA

Outcome = Literal["cancelled", "requested", "already_finished"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CancelOutcome:
    """What `cancel` did.

    Attributes:
        run_id: the run.
        outcome: `cancelled` (the run has ended: its `run_finished` says
            `cancelled`), `requested` (a live process holds it: it was asked
            to stop at its next safe point and has not yet), or
            `already_finished` (it had finished before; nothing was written).
        by: who cancelled (or asked).
        why: the reason given.
        reason: how the run finished (`cancelled`, or the earlier reason of
            an already finished run); None while only requested.
        steps: completed steps when it ended (None while only requested).
        holder: the live holder that was asked to stop (e.g. `pid 41 on host`), else None.
    """

    run_id: str
    outcome: Outcome
    by: str
    why: str
    reason: str | None = None
    steps: int | None = None
    holder: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The document `polyloop cancel --json` prints (docs/reference/json.md)."""
        return {"schema": JSON_SCHEMA, "run_id": self.run_id, "outcome": self.outcome, "by": self.by,
                "why": self.why, "reason": self.reason, "steps": self.steps, "holder": self.holder}


async def cancel(
    store: Store,
    run_id: str,
    *,
    reason: str,
    by: str | None = None,
    wait: bool = False,
    timeout: float | None = None,
    poll: float = 0.2,
) -> CancelOutcome:
    """End a run with a durable `run_finished` of reason `cancelled`, or ask its live holder to.

    Nothing in flight is cut: a run nobody holds has nothing running, and a
    held run stops only at a safe point of its own loop (before a model
    call). An execution the log shows as unknown stays unknown: cancelling
    settles nothing about it (settle it with `mark_resolved` first to put
    its outcome on the record).

    Args:
        store: where the run lives.
        run_id: the run.
        reason: why (recorded as `why`); refused when blank.
        by: who cancels; defaults to the OS user and host; refused when given but blank.
        wait: when the run is held, wait until it has ended (or, should its
            holder let go first, end it here).
        timeout: with `wait`, give up after this many seconds (the request stays).
        poll: with `wait`, seconds between looks.

    Returns:
        A `CancelOutcome`: `cancelled`, `requested` or `already_finished`.

    Raises:
        InvalidInputError: a blank `reason` or `by` (nothing is read or written).
        StoreError: a held run on a store without a cancel-request channel,
            or the store failed.
        RunNotFoundError, CorruptLogError, InvalidRunIdError.
    """
    check_run_id(run_id)
    why = said(reason, REASON, required=True)
    assert why is not None
    who = settled_by(by)
    try:
        return await _end_now(store, run_id, who, why)
    except RunActiveError as active:
        holder = active.holder
    channel = cancel_channel(store)
    if channel is None:
        raise StoreError(f"run {run_id!r} is held by {holder or 'another process'}, and this store cannot ask "
                         "a live run to stop: stop that process, then cancel again", run_id=run_id)
    await _stored(channel.request_cancel(run_id, CancelRequest(by=who, why=why)), run_id)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        done = await _ended(store, run_id, who, why)
        if done is not None:  # its holder may have ended it before this first look
            return dataclasses.replace(done, holder=holder)
        if not wait or (deadline is not None and time.monotonic() >= deadline):
            return CancelOutcome(run_id=run_id, outcome="requested", by=who, why=why, holder=holder)
        await asyncio.sleep(poll)


async def _end_now(store: Store, run_id: str, who: str, why: str) -> CancelOutcome:
    """Under the run's lock: write the `cancelled` end marker (or say it had finished)."""
    async with walked(store, run_id) as walker:
        channel = cancel_channel(store)
        f = walker.finished
        if f is None:
            record = RunFinished(reason="cancelled", result=None, steps=walker.completed_steps,
                                 by=representable(who), why=representable(why))
            await write_settlement(store.write_run_finished, walker, run_id, record, "end marker")
            f = record
            outcome: Outcome = "cancelled"
        else:
            outcome = "already_finished"
        if channel is not None:
            await _stored(channel.clear_cancel(run_id), run_id)
    return CancelOutcome(run_id=run_id, outcome=outcome, by=f.by or who, why=f.why or why, reason=f.reason,
                         steps=f.steps)


async def _ended(store: Store, run_id: str, who: str, why: str) -> CancelOutcome | None:
    """The outcome once a requested run has ended (by its holder, or here if nobody holds it now)."""
    records = await read_or_none(store, run_id)
    last = records[-1] if records else None
    if isinstance(last, RunFinished):
        channel = cancel_channel(store)
        if channel is not None:
            await _stored(channel.clear_cancel(run_id), run_id)
        outcome: Outcome = "cancelled" if last.reason == "cancelled" else "already_finished"
        return CancelOutcome(run_id=run_id, outcome=outcome, by=last.by or who, why=last.why or why,
                             reason=last.reason, steps=last.steps)
    try:
        done = await _end_now(store, run_id, who, why)
    except RunActiveError:
        return None
    if done.reason == "cancelled":  # its holder ended it between that read and this hold
        return dataclasses.replace(done, outcome="cancelled")
    return done


async def _stored(write: Any, run_id: str) -> None:
    try:
        await write
    except PolyLoopError:
        raise
    except Exception as exc:
        raise StoreError(f"store failed to keep the request to stop run {run_id!r}: {exc}", run_id=run_id) from exc
