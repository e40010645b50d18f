"""The run queue on a shared PostgreSQL store: `submit` a run, and `Worker`s that run them.

A worker claims queued runs that no live lease holds — new ones, and runs
whose worker died (its lease lapsed: a takeover) — and runs each with
`Agent.run` under its lease, which resumes from the log exactly as after a
crash. Runs that stop for an operator are parked until a resolution is
written, then become claimable again. docs/how-to/run-on-many-machines.md
shows the whole workflow.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._log.errors import NeedsOperatorError, PolyLoopError, RunActiveError, StoreError
from .._log.ids import check_run_id, new_run_id
from .._log.unavailable import ModelUnavailableError
from .._run.target import canonical_target, load_target

if TYPE_CHECKING:
    from ..stores._pg_lease import Lease, LeaseClock
    from ..stores._postgres import PostgresStore

_EXTRA_CANDIDATES = 4


async def submit(
    store: PostgresStore, target: str, *, goal: str, run_id: str | None = None
) -> str:
    """Queue a new run of the agent at `target`; a worker will claim and run it.

    The target is imported once here, so a typo fails now rather than on a
    worker; a file path is recorded absolute, so workers need the same path
    (or use a `module:name` target installed on every machine).

    Args:
        store: the shared store.
        target: `path/to/file.py:name` or `module.path:name`.
        goal: what the run is for.
        run_id: the run id (default: a new sortable id).

    Returns:
        The run id.

    Raises:
        InvalidRunIdError: the run id is not a safe name.
        RunExistsError: the run id is already known to the store.
        TargetError: the target cannot be loaded.
        StoreError: the database failed.
    """
    rid = check_run_id(run_id) if run_id is not None else new_run_id()
    load_target(target)
    await store.enqueue(rid, target=canonical_target(target), goal=goal)
    return rid


@dataclass(frozen=True, slots=True)
class WorkerEvent:
    """One thing a worker did, for its log lines.

    Attributes:
        event: `ready` (the first look at the queue worked), `claim` (a queued run), `takeover` (a run whose holder's lease
            lapsed), `finish`, `parked` (needs an operator), `failed` (see
            `detail`; an operator decides), `released` (the worker stopped
            before the run's next call; another worker continues it), `lost`
            (the lease ended; another worker continues), `unavailable` (the
            model stayed unavailable past the run's retry budget: the run
            stopped, resumable, and stays queued; this worker claims it
            again after `max_backoff` seconds, any other worker at once), `error` (the store
            failed; the run stays queued; a worker-wide one is reported once
            while the store keeps failing), `recovered` (the store answers
            again after a worker-wide `error`).
        run_id: the run (None for a worker-wide `error`).
        epoch: the lease's epoch, when one was held.
        detail: the finish reason, the previous holder, or the error message.
    """

    event: str
    run_id: str | None
    epoch: int | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON object."""
        return {"event": self.event, "run_id": self.run_id, "epoch": self.epoch, "detail": self.detail}


class Worker:
    """Claims queued runs from a `PostgresStore` and runs them, `concurrency` at a time.

    Stopping (`stop()`, e.g. on SIGTERM) claims nothing more and lets each
    held run go at its next model or tool call: the lease is released and
    the run stays queued for another worker. `stop(now=True)` (a second
    signal, or `grace` seconds after the first) lets them go sooner: a run in
    a model call or a wait is cancelled at once (the model call is asked
    again on resume), a run in a tool call goes as soon as that call's step
    is recorded, never between the call's intent and its result.
    `stop(now=True)` again cancels every run at once (a tool call in flight
    then becomes an unknown execution in the log).

    Counters for metrics (a seam for exporters, e.g. OpenTelemetry):
    `claims`, `takeovers`, `lost` (fenced or expired leases), `finished`,
    `released`, and `claim_seconds` (the latency of each successful claim,
    the last 1024).

    Args:
        store: the shared store; its `lease` sizes every lease this worker takes.
        concurrency: how many runs this worker runs at once.
        poll: seconds between looks at the queue while there is room.
        on_event: called with a `WorkerEvent` for every claim, finish, takeover...
        until_idle: return once no run is queued: none claimable, none held by
            a live lease (this worker's, another's, or a dead worker's that has
            not lapsed yet, which this worker then takes over).
        observe: called with each claimed run's store; the run goes through
            what it returns (`polyloop.otel.instrumenter(...)` traces the runs).
    """

    def __init__(
        self,
        store: PostgresStore,
        *,
        concurrency: int = 1,
        poll: float = 1.0,
        on_event: Callable[[WorkerEvent], None] | None = None,
        until_idle: bool = False,
        observe: Callable[[Any], Any] | None = None,
        _clock: LeaseClock | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.store = store
        self.concurrency = concurrency
        self.poll = poll
        self.on_event = on_event or (lambda event: None)
        self.until_idle = until_idle
        self.observe = observe
        self._stop = asyncio.Event()
        self._now = asyncio.Event()
        self._running: dict[asyncio.Task[None], Lease] = {}
        self._backoff: dict[str, float] = {}  # run id -> when to try it again
        self._clock = _clock if _clock is not None else store._clock  # the store's lease clock (a test seam)
        self._hurried = False
        # Metrics (read by an exporter; see the class docstring).
        self.claims = 0
        self.takeovers = 0
        self.lost = 0
        self.finished = 0
        self.released = 0
        self.claim_seconds: collections.deque[float] = collections.deque(maxlen=1024)
        self.alive_at = time.monotonic()  # the last time the worker's loop went round (liveness)

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming; let held runs go at their next call (`now`: sooner; twice: at once)."""
        self._stop.set()
        if now and self._hurried:
            self._now.set()
        for lease in self._running.values():
            lease.drain()
            if now:
                lease.hurry()
        self._hurried = self._hurried or now

    async def run(self) -> None:
        """Work until stopped (or, with `until_idle`, until no run is queued or held).

        While the store fails (the server is unreachable, say), the worker
        looks again after `poll`, then twice as long each time, up to
        `max_backoff`; it reports the first failure as an `error` event that
        says so, stays quiet while the failures go on, and reports `recovered`
        when the store answers again.

        Raises:
            StoreError: only if the store fails on the very first look at the
                queue (a wrong URL); later failures are reported as events and retried.
        """
        first = True
        failures = 0
        next_look = 0.0
        try:
            while not self._stop.is_set():
                self.alive_at = time.monotonic()
                idle = False
                if not failures or self._clock.monotonic() >= next_look:
                    try:
                        claimed = await self._fill()
                        idle = self.until_idle and not claimed and not self._running and not await self.store.queued()
                    except StoreError as exc:
                        if first:
                            raise
                        failures += 1
                        if failures == 1:
                            detail = f"{exc} (looking again in {self.poll:g} s, backing off up to {self.max_backoff:g} s)"
                            self.on_event(WorkerEvent("error", None, detail=detail))
                    else:
                        if failures:
                            detail = f"the store answers again after {failures} failed looks"
                            self.on_event(WorkerEvent("recovered", None, detail=detail))
                        failures = 0
                    next_look = self._clock.monotonic() + self._delay(failures)
                if first:
                    first = False
                    detail = f"{self.store.name}, {self.concurrency} at a time, lease {self.store.lease:g} s"
                    self.on_event(WorkerEvent("ready", None, detail=detail))
                if idle:
                    return
                room = len(self._running) < self.concurrency
                # Never longer than the longest backoff: a clock that jumped back must not stall the queue's look.
                wait = min(max(0.0, next_look - self._clock.monotonic()), self.max_backoff)
                await self._wait(timeout=wait if room else None)
        finally:
            await self._wind_down()

    @property
    def max_backoff(self) -> float:
        """The longest wait between looks at a store that keeps failing: 10 polls, at most 30 s."""
        return max(self.poll, min(30.0, 10 * self.poll))

    def _delay(self, failures: int) -> float:
        return min(self.max_backoff, self.poll * 2 ** max(0, failures - 1))

    async def _fill(self) -> int:
        room = self.concurrency - len(self._running)
        if room <= 0:
            return 0
        claimed = 0
        now = self._clock.monotonic()
        self._backoff = {run_id: until for run_id, until in self._backoff.items() if until > now}
        skip = {lease.run_id for lease in self._running.values()} | set(self._backoff)
        # Look past the runs to skip, and a few more in case others are faster.
        for run_id in await self.store.claimable(room + len(skip) + _EXTRA_CANDIDATES):
            if claimed >= room or self._stop.is_set():
                break
            if run_id in skip:
                continue
            asked = time.monotonic()
            try:
                lease = await self.store.claim(run_id, queued_only=True)
                self.claim_seconds.append(time.monotonic() - asked)
            except RunActiveError:
                continue  # another worker was faster
            except StoreError as exc:  # e.g. a lock timeout behind a frozen client: try the others
                self.on_event(WorkerEvent("error", run_id, detail=str(exc)))
                self._backoff[run_id] = self._clock.monotonic() + self.store.lease
                continue
            self._backoff.pop(run_id, None)
            task = asyncio.create_task(self._drive(lease), name=f"polyloop-run-{run_id}")
            self._running[task] = lease
            claimed += 1
        return claimed

    async def _wait(self, *, timeout: float | None) -> None:
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({stop, *self._running}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        self._reap()

    def _reap(self) -> None:
        for task in [t for t in self._running if t.done()]:
            del self._running[task]
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]  # a bug in _drive, not a run's failure

    async def _wind_down(self) -> None:
        for lease in self._running.values():
            lease.drain()
        cancelled = False
        while self._running:
            now = asyncio.create_task(self._now.wait())
            try:
                await asyncio.wait({now, *self._running}, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                cancelled = True  # the worker itself is cancelled: cancel the runs, then go on unwinding
                self._now.set()
            finally:
                now.cancel()
            if self._now.is_set():
                for task in self._running:
                    task.cancel()
                await asyncio.gather(*self._running, return_exceptions=True)
            for task in [t for t in self._running if t.done()]:
                del self._running[task]
        if cancelled:
            raise asyncio.CancelledError

    async def _drive(self, lease: Lease) -> None:
        emit = self._count
        if lease.taken_over_from:
            emit(WorkerEvent("takeover", lease.run_id, lease.epoch, lease.taken_over_from))
        else:
            emit(WorkerEvent("claim", lease.run_id, lease.epoch))
        try:
            async with lease:
                event = await self._run_one(lease)
        except asyncio.CancelledError:
            emit(WorkerEvent("released", lease.run_id, lease.epoch, "cancelled"))
            raise
        except StoreError as exc:  # LeaseLostError: the lease ended while the run was held
            from ..stores._pg_lease import LeaseLostError

            kind = "lost" if isinstance(exc, LeaseLostError) else "error"
            event = WorkerEvent(kind, lease.run_id, lease.epoch, str(exc))
        emit(event)

    def _count(self, event: WorkerEvent) -> None:
        """Count the event for the metrics, then hand it on."""
        counter = _COUNTED.get(event.event)
        if counter is not None:
            setattr(self, counter, getattr(self, counter) + 1)
        self.on_event(event)

    @property
    def running(self) -> int:
        """How many runs this worker holds right now."""
        return len(self._running)

    @property
    def stopping(self) -> bool:
        """Whether the worker was asked to stop."""
        return self._stop.is_set()

    async def _run_one(self, lease: Lease) -> WorkerEvent:
        from ..stores._pg_lease import Draining, LeaseLostError

        rid, epoch = lease.run_id, lease.epoch
        try:
            agent = load_target(lease.target or "")
            store = self.observe(lease.store) if self.observe is not None else lease.store
            result = await agent.run(lease.goal, run_id=rid, store=store, target=lease.target)
        except NeedsOperatorError as exc:
            lease.settle("parked", str(exc))
            return WorkerEvent("parked", rid, epoch, str(exc))
        except Draining:
            return WorkerEvent("released", rid, epoch, "the worker is stopping")
        except ModelUnavailableError as exc:
            # Stopped, resumable: the run stays queued, and this worker leaves it alone a while.
            self._backoff[rid] = self._clock.monotonic() + self.max_backoff
            return WorkerEvent("unavailable", rid, epoch, str(exc))
        except LeaseLostError as exc:
            return WorkerEvent("lost", rid, epoch, str(exc))
        except StoreError as exc:
            return WorkerEvent("error", rid, epoch, str(exc))
        except PolyLoopError as exc:
            lease.settle("failed", str(exc))
            return WorkerEvent("failed", rid, epoch, str(exc))
        except Exception as exc:  # a bug in the agent's code: recorded, the worker goes on
            message = f"{type(exc).__name__}: {exc}"
            lease.settle("failed", message)
            return WorkerEvent("failed", rid, epoch, message)
        detail = result.reason if result.error is None else f"{result.reason}: {result.error}"
        return WorkerEvent("finish", rid, epoch, detail)


# The events each metrics counter of `Worker` counts.
_COUNTED = {"claim": "claims", "takeover": "takeovers", "lost": "lost", "finish": "finished", "released": "released"}

# The clock seam is private: the public signature is the documented one.
Worker.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [p for p in inspect.signature(Worker.__init__).parameters.values() if p.name not in ("self", "_clock")]
)
