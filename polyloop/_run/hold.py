"""Holding a run and reading its log once: hold -> read -> walk -> verdict.

Every command that acts on one run (`Agent.run`, `resume_run`, `decide`,
`mark_resolved`) holds it (when the store can), reads its log once under the
hold, walks it and refuses a log that breaks a rule, then hands that one
walker down (`walked`; `Agent.run`, which may create the run, uses `held`
and `walk_checked`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Sequence
from typing import Any

from .._log.codec import ParsedLog
from .._log.errors import CorruptLogError, PolyLoopError, RunNotFoundError, StoreError
from .._log.records import Record
from .._log.store_port import Store, capabilities_of
from .._recovery.walker import Recovery, Walker, walk

# Classifying a log this long moves off the event loop (other runs share it).
_OFF_LOOP_RECORDS = 2_000


async def read_or_none(store: Store, run_id: str) -> Sequence[Record] | None:
    """The run's records, or None when it has no log; store failures become `StoreError`."""
    try:
        return await store.read_log(run_id)
    except RunNotFoundError:
        return None
    except PolyLoopError:
        raise
    except Exception as exc:
        raise StoreError(f"store failed to read run {run_id!r}: {exc}", run_id=run_id) from exc


@contextlib.asynccontextmanager
async def held(
    store: Store, run_id: str, *, must_exist: bool = False
) -> AsyncIterator[Sequence[Record] | None]:
    """Hold the run (when the store can) and yield its records, read once under the hold.

    A store whose lock hands back what it read while taking the hold (the
    JSONL store parses the log to seal a torn tail) is not read again. With
    `must_exist`, a run without a log raises the store's `RunNotFoundError`
    before any hold is taken (so a mistyped id leaves nothing behind).
    """
    can = capabilities_of(store)
    if must_exist and can.probing and not await maybe_await(store.exists(run_id)):  # type: ignore[attr-defined]
        await store.read_log(run_id)  # raises the store's own RunNotFoundError
    read = store.read_log if must_exist else functools.partial(read_or_none, store)
    if not can.locking:
        yield await read(run_id)
        return
    async with store.lock(run_id) as taken:  # type: ignore[attr-defined]
        records = records_of(taken, run_id)
        yield records if records is not None else await read(run_id)


@contextlib.asynccontextmanager
async def walked(store: Store, run_id: str) -> AsyncIterator[Walker]:
    """Hold a run that has a log and yield its walker: read once, walked, refused if it breaks a rule.

    Raises:
        RunNotFoundError: the run has no log (before any hold is taken).
        CorruptLogError: the log cannot come from a correct writer.
    """
    async with held(store, run_id, must_exist=True) as records:
        assert records is not None
        yield await walk_checked(records, run_id)


def records_of(taken: object, run_id: str) -> Sequence[Record] | None:
    """The records a store's lock handed back (None: it handed back nothing)."""
    if not isinstance(taken, ParsedLog):
        return None
    return taken.records_or_raise(run_id)


async def maybe_await(value: Any) -> Any:
    """`value`, awaited if it is awaitable (optional capabilities may be sync or async)."""
    return await value if inspect.isawaitable(value) else value


async def walk_off_loop(records: Sequence[Record], run_id: str) -> Walker:
    """`walk` a log, in a thread when it is long enough to stall other runs."""
    if len(records) < _OFF_LOOP_RECORDS:
        return walk(records, run_id=run_id)
    return await asyncio.to_thread(walk, records, run_id=run_id)


async def walk_checked(records: Sequence[Record], run_id: str) -> Walker:
    """`walk_off_loop`, then `verdict`: the walker of a log that breaks no rule."""
    return verdict(await walk_off_loop(records, run_id), run_id)


async def write_settlement(writer: Any, walker: Walker, run_id: str, record: Record, what: str) -> Recovery:
    """Write a person's settlement (a resolution, a decision) of a held run; return the new verdict.

    Store failures become `StoreError` naming `what` was being written.
    """
    try:
        await writer(run_id, record)
    except PolyLoopError:
        raise
    except Exception as exc:
        raise StoreError(f"store failed to write the {what}: {exc}", run_id=run_id) from exc
    walker.feed(record)
    recovery = walker.recovery()
    assert recovery is not None
    return recovery


def verdict(walker: Walker, run_id: str) -> Walker:
    """`walker`, or `CorruptLogError` if the log it read breaks a rule."""
    if walker.problems or walker.started is None:
        raise CorruptLogError(run_id, walker.problems)
    return walker
