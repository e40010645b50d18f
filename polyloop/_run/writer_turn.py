"""One write of a run at a time, in the order the writers came.

The calls of a step of several tool calls run concurrently, and each writes
its records; a run's log takes one record at a time, fed to its walker in
the order the log holds them. `WriterTurn` is that order: a lock like
`asyncio.Lock` (first come, first served, and a waiter cancelled while it
waits never holds it), except that taking it when it is free is a flag set
by the caller, not a coroutine. Nearly every write finds it free (a step of
one call never waits), and an in-memory step makes four writes: the
coroutine, the release and the wake-up of `asyncio.Lock` were ~2.5% of its
instructions (docs/performance.md).

    turn = run.turn
    if turn.busy:
        await turn.wait()  # returns with the turn held
    else:
        turn.busy = True
    try:
        ...
    finally:
        turn.release()
"""

from __future__ import annotations

import asyncio
from collections import deque


class WriterTurn:
    """Whose turn it is to write a run's next record (see the module's docstring)."""

    __slots__ = ("busy", "_waiters")

    def __init__(self) -> None:
        self.busy = False  # held by a writer; true as long as any writer waits too
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def wait(self) -> None:
        """Wait for the turn, which a writer holds; return holding it.

        Raises:
            asyncio.CancelledError: cancelled while waiting; the turn is not
                held then (if it was just handed over, it goes on to the next).
        """
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed over just as it was cancelled: pass it on
            elif waiter in self._waiters:  # (a release may have dropped it already)
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """End the holder's turn: hand it to the first writer still waiting, or free it."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # still busy: the turn passes without a gap to barge into
                return
        self.busy = False

    async def __aenter__(self) -> None:
        if self.busy:
            await self.wait()
        else:
            self.busy = True

    async def __aexit__(self, *exc: object) -> None:
        self.release()
