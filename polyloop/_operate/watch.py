"""Following a run as it progresses: each record as it lands, what is in flight, how it ended.

What `polyloop watch` (and `inspect --follow`) runs. The log is polled,
never locked: a watcher cannot slow or stop the run it watches. Each look
reads only what is new (`stores._follow`): a JSONL log from the offset of
its last complete line (a line still being written waits for its newline),
a PostgreSQL log by row position. Looks come every `poll` seconds while
records arrive and back off to `idle` seconds while nothing does.

The run has ended, for a watcher, when its log holds `run_finished`, or when
nobody holds the run any more (its process or worker is gone, or it stopped
for a person) and a last look finds nothing new. Then the run is judged
once, as `inspect_run` judges it, and the last event carries that report.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from .._log.errors import RunNotFoundError
from .._log.ids import check_run_id
from .._log.records import (
    ActionResult,
    ApprovalRequest,
    Intent,
    ModelCallResult,
    Record,
    Resolution,
    RunFinished,
    StepCompleted,
)
from .._log.store_port import Store, capabilities_of
from .._run.hold import maybe_await
from ..stores._follow import Follower, follower
from .inspect import RunReport, inspect_run

WatchKind = Literal["waiting", "record", "held", "released", "end"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One thing a watcher saw happen to a run.

    Attributes:
        kind: `waiting` (the run has no log yet; only with `wait=True`),
            `record` (a record landed in the log), `held` / `released` (a
            process or worker took the run, or let it go), `end` (the run
            finished or stopped; always the last event).
        record: the record, for kind `record`.
        index: its position in the log (0-based), for kind `record`.
        step: the step the record belongs to, when the log says (a result
            belongs to the step of its intent), for kind `record`.
        backlog: the record was already in the log when watching began.
        in_flight: the intents whose outcome the log does not hold yet, after
            this record (a model call or a tool call under way; once nobody
            holds the run, these are its unknown executions).
        holder: who holds the run (`held`), or who held it (`released`).
        report: for `end`, the run as `inspect_run` judges it then.
    """

    kind: WatchKind
    record: Record | None = None
    index: int | None = None
    step: int | None = None
    backlog: bool = False
    in_flight: tuple[Intent, ...] = ()
    holder: str | None = None
    report: RunReport | None = None


Sleep = Callable[[float], Awaitable[object]]


async def watch_run(
    store: Store,
    run_id: str,
    *,
    wait: bool = False,
    poll: float = 0.1,
    idle: float = 1.0,
    sleep: Sleep = asyncio.sleep,
) -> AsyncIterator[WatchEvent]:
    """Follow a run until it finishes or stops, one `WatchEvent` per thing that happens.

    First every record already in the log (`backlog=True`), then each new
    one as it lands, then one `end` event with the run's `RunReport`. A run
    nobody holds is reported as it is and the iteration ends. On a store
    that cannot name a run's holder (no `holder` capability) a run cannot be
    told live, so the iteration ends once the log has been read, unless it
    shows `run_finished` later.

    Args:
        store: where the run lives.
        run_id: the run.
        wait: when the run has no log yet, wait for it to start (one
            `waiting` event first) instead of raising `RunNotFoundError`.
        poll: seconds between looks while records arrive.
        idle: the longest pause between looks while nothing arrives.
        sleep: the pause (a seam for tests).

    Raises:
        InvalidRunIdError: the run id is not a safe name.
        RunNotFoundError: the run has no log (and `wait` is False).
        CorruptLogError: a record that lands cannot come from a correct writer.
        StoreError: the log cannot be read, or is replaced or removed while watched.

    Not guaranteed: that every holder is seen (a resume that starts and
    stops between two looks shows only its records), or the moment a record
    was written (`at` says it).
    """
    check_run_id(run_id)
    tail = follower(store, run_id)
    first: list[Record] = []
    async for event in _first_look(tail, wait, poll, idle, sleep, first):
        yield event
    watch = _Watch(store, run_id)
    new, backlog, delay = first, True, poll
    while True:
        for event in watch.records(new, backlog):
            yield event
        if watch.finished:
            break
        if new and not backlog:
            await sleep(poll)  # while records arrive, one look per `poll`: they gather meanwhile
        change = await watch.holder_change()
        if change is not None:
            yield change
        # Read after asking for the holder: whatever it wrote before letting go is in this read.
        new, backlog = await tail.more(), False
        if new:
            delay = poll
        elif watch.holder is None:
            break  # nobody holds it, and nothing landed since: stopped
        else:
            await sleep(delay)
            delay = min(delay * 2, idle)
    yield WatchEvent("end", in_flight=watch.in_flight(), report=await inspect_run(store, run_id))


async def _first_look(
    tail: Follower, wait: bool, poll: float, idle: float, sleep: Sleep, into: list[Record]
) -> AsyncIterator[WatchEvent]:
    """The log's records so far (into `into`); with `wait`, after waiting for the log to appear."""
    delay, announced = poll, False
    while True:
        try:
            into.extend(await tail.more())
            return
        except RunNotFoundError:
            if not wait:
                raise
        if not announced:
            announced = True
            yield WatchEvent("waiting")
        await sleep(delay)
        delay = min(delay * 2, idle)


class _Watch:
    """What a watcher knows so far: the records seen, what is in flight, who holds the run."""

    def __init__(self, store: Store, run_id: str) -> None:
        self._store = store
        self._run_id = run_id
        self._pending: dict[str, Intent] = {}
        self._count = 0
        self.finished = False
        self.holder: str | None = None

    def in_flight(self) -> tuple[Intent, ...]:
        return tuple(self._pending.values())

    def records(self, new: list[Record], backlog: bool) -> list[WatchEvent]:
        events = []
        for record in new:
            step = self._track(record)
            events.append(WatchEvent("record", record=record, index=self._count, step=step, backlog=backlog,
                                     in_flight=self.in_flight()))
            self._count += 1
        return events

    def _track(self, record: Record) -> int | None:
        """Note what `record` starts or settles; return its step (None when the log does not say)."""
        pending = self._pending
        step = getattr(record, "step", None)
        if isinstance(record, Intent):
            pending[record.result_id] = record
        elif isinstance(record, ModelCallResult | ActionResult | Resolution | ApprovalRequest):
            intent = pending.pop(record.result_id, None)
            step = intent.step if intent is not None else step
        elif isinstance(record, StepCompleted):
            pending.pop(record.result_id or "", None)
            for call in record.calls or ():
                pending.pop(call.get("result_id") or "", None)
        elif isinstance(record, RunFinished):
            pending.clear()
            self.finished = True
        return step if isinstance(step, int) else None

    async def holder_change(self) -> WatchEvent | None:
        """Who holds the run now, as an event when that changed since the last look."""
        store = self._store
        now = await maybe_await(store.holder(self._run_id)) if capabilities_of(store).holding else None  # type: ignore[attr-defined]
        before, self.holder = self.holder, now
        if now == before:
            return None
        if now is None:
            return WatchEvent("released", holder=before)
        return WatchEvent("held", holder=now)
