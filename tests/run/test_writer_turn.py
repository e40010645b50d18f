"""A run's writes take turns: one at a time, first come first served, never lost to a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from polyloop._run.writer_turn import WriterTurn


async def _write(turn: WriterTurn, name: str, log: list[str], hold: asyncio.Event | None = None) -> None:
    async with turn:
        log.append(f"{name} in")
        if hold is not None:
            await hold.wait()
        else:
            await asyncio.sleep(0)
        log.append(f"{name} out")


async def test_a_free_turn_is_taken_without_waiting_and_freed_after():
    turn = WriterTurn()
    async with turn:
        assert turn.busy
    assert not turn.busy


async def test_writers_never_overlap_and_go_in_the_order_they_came():
    turn, log, hold = WriterTurn(), [], asyncio.Event()
    first = asyncio.create_task(_write(turn, "a", log, hold))
    await asyncio.sleep(0)
    others = [asyncio.create_task(_write(turn, n, log)) for n in "bcd"]
    await asyncio.sleep(0.01)
    assert log == ["a in"]  # the others wait while a holds the turn
    hold.set()
    await asyncio.gather(first, *others)
    assert log == ["a in", "a out", "b in", "b out", "c in", "c out", "d in", "d out"]
    assert not turn.busy


async def test_a_newcomer_does_not_barge_in_when_the_turn_is_handed_over():
    turn, log = WriterTurn(), []
    turn.busy = True  # held by a writer outside the test
    waiting = asyncio.create_task(_write(turn, "waiter", log))
    await asyncio.sleep(0)
    turn.release()  # handed to the waiter: still busy
    assert turn.busy
    newcomer = asyncio.create_task(_write(turn, "newcomer", log))
    await asyncio.gather(waiting, newcomer)
    assert log == ["waiter in", "waiter out", "newcomer in", "newcomer out"]


async def test_a_writer_cancelled_while_waiting_never_holds_the_turn():
    turn, log, hold = WriterTurn(), [], asyncio.Event()
    first = asyncio.create_task(_write(turn, "a", log, hold))
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(_write(turn, "b", log))
    last = asyncio.create_task(_write(turn, "c", log))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    hold.set()
    await asyncio.gather(first, last)
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert log == ["a in", "a out", "c in", "c out"]
    assert not turn.busy


async def test_a_turn_handed_to_a_writer_cancelled_at_that_moment_passes_on():
    turn, log = WriterTurn(), []
    turn.busy = True
    doomed = asyncio.create_task(_write(turn, "doomed", log))
    after = asyncio.create_task(_write(turn, "after", log))
    await asyncio.sleep(0)
    turn.release()  # the turn is handed to `doomed`...
    doomed.cancel()  # ...which is cancelled before it runs again
    await asyncio.gather(after)
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert log == ["after in", "after out"]
    assert not turn.busy


async def test_the_last_waiter_cancelled_after_a_release_dropped_it_frees_the_turn():
    turn = WriterTurn()
    turn.busy = True
    waiter = asyncio.create_task(turn.wait())
    await asyncio.sleep(0)
    waiter.cancel()  # its future is cancelled at once...
    turn.release()  # ...and this release drops it before the task runs again
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not turn.busy
    async with turn:
        assert turn.busy
