"""Leases on runs in PostgreSQL: one live holder per run, fenced by an epoch.

A claim sets the holder, increments the run's epoch (the fencing token) and
sets an expiry on the database clock. The holder renews in the background
every third of the lease. Every write and every renewal is accepted by the
database only while the epoch matches and the lease has not expired.

The holder also keeps a deadline on its own monotonic clock, set from the
moment it *sent* the last successful claim or renewal, minus a safety margin:
that deadline always falls before the database's expiry. Past it, the lease
refuses every write before it is sent (and fails the one that returned too
late), so the run loop, which writes an intent before every model call and
every tool call, makes no further call; the task holding the lease is
cancelled too. A process stopped and woken later (SIGSTOP, a long pause) thus
finds its lease gone locally, and the database refuses it anyway.

The holder's side tells time through a `LeaseClock` (the store's, a private
constructor seam): the monotonic clock and the waits between renewals. The
database's side is `clock_timestamp()`, the one authority on expiry; a test
that makes time pass moves the leases' expiries back by as much
(tests/postgres/pg_clock.py) and its `LeaseClock` forward, so nobody sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

from .._log.errors import PolyLoopError, RunActiveError, StoreError
from .._log.records import Intent, Record, RunFinished, RunStopped, StepCompleted

# The local deadline is this fraction of the lease after the claim or
# renewal was sent; the rest covers clock-rate drift and scheduling delays.
SAFETY = 0.8
# The records that close a tool call's record pair (the step's, or the run's end).
_CLOSING = (StepCompleted, RunFinished, RunStopped)
# Renew three times per lease: two renewals may fail before the deadline.
RENEWALS_PER_LEASE = 3


class LeaseClock:
    """How a lease holder tells time: `time.monotonic` and `asyncio.sleep` (the default).

    A private seam of `PostgresStore`, `Lease` and the queue worker: a test
    passes a clock it advances instead of sleeping.
    """

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def public_signature(init: Any) -> inspect.Signature:
    """`init`'s signature without `self` and its private seams (`_clock`): what the reference shows."""
    params = [p for p in inspect.signature(init).parameters.values() if p.name != "self" and not p.name.startswith("_")]
    return inspect.Signature(params)


class LeaseLostError(StoreError):
    """This process's lease on the run ended: it expired, or another worker took the run over.

    The process stops acting for the run: the write that raised this did not
    land unless the message says it may have (a write that returned after
    the local deadline), and no model call or tool call follows. Another
    worker resumes the run from its log; what was in flight is classified
    as unknown there, like after a crash.
    """

    def __init__(self, run_id: str, why: str) -> None:
        super().__init__(
            f"the lease on run {run_id!r} is lost ({why}): this process stops acting for the run; "
            "a worker holding a fresh lease resumes it from its log",
            run_id=run_id,
        )
        self.why = why


class Draining(PolyLoopError):
    """The worker is stopping: the run stops before its next model or tool call (private)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} stopped before its next call: the worker is stopping")


class LeaseKeeper(Protocol):
    """What a lease needs of the store that granted it (`PostgresStore`); declared here so the
    lease never imports the store that imports it.

    `lease` is the lease's duration in seconds; `_leases` maps each run this
    store holds to its lease; `_clock` tells its time; `_strays` keeps renewals left to unwind after a
    loss. `_flushed` sends a held run's unsynced records, `_renew` extends the
    lease (False: it is gone), `_release` gives it back with its queue outcome.
    """

    lease: float
    _clock: LeaseClock
    _leases: dict[str, Lease]
    _strays: set[asyncio.Task[None]]

    async def _flushed(self, lease: Lease) -> None: ...

    async def _renew(self, lease: Lease) -> bool: ...

    async def _release(self, lease: Lease, outcome: tuple[str, str] | None) -> None: ...


class Lease:
    """A live claim on one run, held by this process; renew it by entering it (`async with`).

    Attributes:
        run_id: the run.
        epoch: the fencing token every write of this holder carries.
        status: the run's queue status when claimed (`queued`, `parked`, `direct`, ...).
        target, goal: what `submit` queued (None for runs not submitted).
        taken_over_from: the previous holder whose lease had lapsed, if any.
        lost: why the lease ended, once it has.
    """

    def __init__(self, store: LeaseKeeper, run_id: str, row: dict[str, Any], sent_at: float) -> None:
        self._store = store
        self.run_id = run_id
        self.epoch: int = row["epoch"]
        self.next_seq: int | None = row["next_seq"]
        self.status: str = row["status"]
        self.target: str | None = row["target"]
        self.goal: str | None = row["goal"]
        self.taken_over_from: str | None = row["taken_over_from"]
        self.duration = store.lease
        self.deadline = sent_at + self.duration * SAFETY
        self.lost: str | None = None
        self.draining = False
        self.hurried = False
        # A tool call's record pair is open: an action (or rollback) intent has been handed to the
        # store and its step's record not yet. A hurried stop never cancels the run inside one.
        self.in_tool = False
        self._outcome: tuple[str, str] | None = None
        self._task: asyncio.Task[Any] | None = None
        self._renewer: asyncio.Task[None] | None = None
        self._cancelled = False
        # Unsynced records (kind, body) waiting for the run's next durable
        # write, the statement sending them on their own, and how it failed.
        self.pending: list[tuple[str, str]] = []
        self.sending: asyncio.Task[None] | None = None
        self.send_scheduled = False
        self.failure: Exception | None = None

    @property
    def store(self) -> _LeasedStore:
        """The store as seen by the holder: `lock(run_id)` is already held."""
        return _LeasedStore(self._store, self)

    def settle(self, status: str, note: str) -> None:
        """Set the queue status (`parked`, `failed`) the run gets when this lease is released."""
        self._outcome = (status, note)

    def drain(self) -> None:
        """Let the run go before its next model or tool call (a worker that is stopping)."""
        self.draining = True

    def hurry(self) -> None:
        """Let the run go sooner (a second signal): cancel it now unless a tool call's record pair is open.

        Inside a model call or a wait (a backoff, a renewal, the queue) the run is
        cancelled at once: an unknown model call is asked again on resume. A
        tool call in flight is never cut: the run goes once the call's step is
        recorded, before its next call (`drain`).
        """
        self.draining = True
        self.hurried = True
        task = self._task
        if not self.in_tool and task is not None and not task.done():
            task.cancel(f"polyloop: the worker is stopping; {self.run_id} goes at once")

    def _track(self, record: Record) -> None:
        if isinstance(record, Intent):
            if record.kind != "model_call":
                self.in_tool = True
        elif isinstance(record, _CLOSING):
            self.in_tool = False

    def before_write(self, record: Record | None = None) -> None:
        """Refuse a write, before it is sent, once the lease is lost or past its local deadline."""
        if self.lost is None and self._store._clock.monotonic() >= self.deadline:
            self._lose("it could not be renewed before its local deadline")
        if self.lost is not None:
            raise LeaseLostError(self.run_id, self.lost)
        if self.failure is not None:  # unsynced records sent on their own did not land
            raise self.failure
        if self.next_seq is None:
            raise StoreError(
                f"an earlier write of run {self.run_id!r} has an unknown outcome: this process "
                "stops writing for it", run_id=self.run_id,
            )
        if self.draining and isinstance(record, Intent):
            raise Draining(self.run_id)
        if record is not None:
            self._track(record)

    def after_write(self) -> None:
        """Fail a write that returned after the local deadline: it landed, but nothing may follow it."""
        if self._store._clock.monotonic() >= self.deadline:
            self._lose("a write returned after the local deadline; it may have landed")
            raise LeaseLostError(self.run_id, self.lost or "")

    async def __aenter__(self) -> Lease:
        self._task = asyncio.current_task()
        self._store._leases[self.run_id] = self
        self._renewer = asyncio.create_task(self._renew_loop(), name=f"polyloop-lease-{self.run_id}")
        return self

    async def __aexit__(self, kind: Any, exc: Any, tb: Any) -> None:
        try:
            if self.lost is None:  # unsynced records still here go while the lease is renewed
                await self._store._flushed(self)
        finally:
            await self._end(kind)

    async def _end(self, kind: Any) -> None:
        renewer = self._renewer
        if renewer is not None and not renewer.done():
            renewer.cancel()
            if self.lost is None:
                with contextlib.suppress(asyncio.CancelledError):
                    await renewer
            else:
                # A renewal stuck on a dead network can take the driver's
                # cancellation timeouts (seconds) to unwind: do not wait for it.
                self._store._strays.add(renewer)
                renewer.add_done_callback(self._store._strays.discard)
        if self._store._leases.get(self.run_id) is self:
            del self._store._leases[self.run_id]
        if self.lost is None:  # a lost lease is gone already; releasing it could only hang
            with contextlib.suppress(StoreError):  # unreleased, the lease lapses by itself
                await self._store._release(self, self._outcome)
        if kind is asyncio.CancelledError and self._cancelled and self._task is not None:
            # Our own cancellation (the lease was lost) becomes a clear error,
            # unless someone else cancelled the task as well.
            if self._task.uncancel() == 0:
                raise LeaseLostError(self.run_id, self.lost or "lost") from None

    async def _renew_loop(self) -> None:
        clock = self._store._clock
        period = self.duration / RENEWALS_PER_LEASE
        next_at = clock.monotonic() + period
        while True:
            now = clock.monotonic()
            if now >= self.deadline:
                self._lose("it could not be renewed before its local deadline")
                return
            await clock.sleep(max(0.0, min(next_at, self.deadline) - now))
            sent = clock.monotonic()
            if sent >= self.deadline:
                continue
            try:
                async with asyncio.timeout(self.deadline - sent):
                    renewed = await self._store._renew(self)
            except (StoreError, TimeoutError):
                next_at = clock.monotonic() + period / 5  # try again soon, until the deadline
                continue
            if not renewed:
                self._lose("another worker took the run over, or the lease expired")
                return
            self.deadline = sent + self.duration * SAFETY
            next_at = sent + period

    def _lose(self, why: str) -> None:
        if self.lost is not None:
            return
        self.lost = why
        task = self._task
        if task is not None and not task.done() and task is not asyncio.current_task():
            self._cancelled = True
            task.cancel(f"polyloop: lease on {self.run_id} lost")


class _LeasedStore:
    """The store for the holder of a lease: writes carry the lease; `lock` of its run is held."""

    def __init__(self, store: Any, lease: Lease) -> None:  # the PostgresStore, whole
        self._store = store
        self._lease = lease

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def __repr__(self) -> str:
        return f"{self._store!r} holding {self._lease.run_id!r} at epoch {self._lease.epoch}"

    def lease_epoch(self, run_id: str) -> int | None:
        return self._lease.epoch if run_id == self._lease.run_id else None

    @contextlib.asynccontextmanager
    async def lock(self, run_id: str) -> AsyncIterator[None]:
        if run_id != self._lease.run_id:
            raise RunActiveError(run_id, "a lease view of another run")
        yield

    async def write_run_started(self, record: Any) -> None:
        await self._store.write_run_started(record)

    async def write_intent(self, run_id: str, record: Any) -> None:
        await self._store.write_intent(run_id, record)

    async def write_model_call_result(self, run_id: str, record: Any) -> None:
        await self._store.write_model_call_result(run_id, record)

    async def write_step_completed(self, run_id: str, record: Any) -> None:
        await self._store.write_step_completed(run_id, record)

    async def write_run_finished(self, run_id: str, record: Any) -> None:
        await self._store.write_run_finished(run_id, record)

    async def write_resolution(self, run_id: str, record: Any) -> None:
        await self._store.write_resolution(run_id, record)

    async def write_approval_request(self, run_id: str, record: Any) -> None:
        await self._store.write_approval_request(run_id, record)

    async def write_decision(self, run_id: str, record: Any) -> None:
        await self._store.write_decision(run_id, record)

    async def read_log(self, run_id: str) -> Any:
        return await self._store.read_log(run_id)
