"""The disk threads of one store: blocking work handed over from event loops."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = None  # put on the queue once per thread to end it


class _Job:
    __slots__ = ("fn", "fut", "loop", "landed", "waiter")

    def __init__(self, fn: Callable[[], Any], loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn
        self.loop = loop
        self.fut: asyncio.Future[Any] = loop.create_future()
        self.landed = False
        self.waiter: asyncio.Future[None] | None = None


class DiskWorkers:
    """Dedicated threads, started on demand, that run blocking disk work.

    Cheaper than `asyncio.to_thread` per hand-off (no executor bookkeeping),
    and several threads let concurrent runs fsync in parallel so the file
    system can commit them together. The task awaits the job's future
    directly (no `asyncio.shield`, which costs a loop iteration per
    hand-off); a cancelled task still waits for its job to land.

    The threads hold no reference to the store that owns them, so a store
    that is dropped without `aclose` can be collected and its finalizer can
    call `stop`. They are daemon threads: one busy in an fsync does not keep
    the interpreter from exiting.
    """

    def __init__(self, max_threads: int = 16) -> None:
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._max = max_threads
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._stopped = False
        self._done: dict[asyncio.AbstractEventLoop, list[tuple[_Job, Any, BaseException | None]]] = {}

    async def run(self, fn: Callable[[], Any]) -> Any:
        """Run `fn()` on a disk thread and return (or raise) what it did."""
        job = _Job(fn, asyncio.get_running_loop())
        with self._lock:
            if self._stopped:
                raise RuntimeError("these disk threads are stopped")
            if self._idle == 0 and len(self._threads) < self._max:
                thread = threading.Thread(target=self._work, name="polyloop-disk", daemon=True)
                self._threads.append(thread)
                self._idle += 1
                thread.start()
            self._queue.put(job)
        try:
            return await job.fut
        except asyncio.CancelledError:
            # The cancellation stopped the wait, not the work: let it land
            # whole before the caller unwinds (and perhaps releases the
            # run's lock to another process), then re-raise.
            while not job.landed:
                if job.waiter is None:
                    job.waiter = job.loop.create_future()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(job.waiter)
            raise

    def stop(self) -> list[threading.Thread]:
        """Let every thread finish the jobs queued so far, then end; returns them to join.

        Safe to call from any thread, more than once, and from a finalizer.
        """
        with self._lock:
            if self._stopped:
                return []
            self._stopped = True
            threads = list(self._threads)
            for _ in threads:
                self._queue.put(_STOP)
        return threads

    @property
    def threads(self) -> int:
        """How many threads have been started."""
        return len(self._threads)

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            with self._lock:
                self._idle -= 1
            try:
                value, exc = job.fn(), None
            except BaseException as e:  # handed to the awaiting task
                value, exc = None, e
            loop = job.loop
            with self._lock:  # idle again before the task resumes and hands over more
                self._idle += 1
                # One wake-up of a loop settles every job finished meanwhile:
                # under load, many fsyncs end while the loop is still busy.
                done = self._done.get(loop)
                wake = done is None
                if wake:
                    done = self._done[loop] = []
                done.append((job, value, exc))
            if wake:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(self._settle_all, loop)
            del job, value, exc, done  # hold nothing of the job while waiting for the next

    def _settle_all(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            done = self._done.pop(loop, ())
        for job, value, exc in done:
            _settle(job, value, exc)


def _settle(job: _Job, value: Any, exc: BaseException | None) -> None:
    job.landed = True
    fut = job.fut
    if not fut.done():
        if exc is None:
            fut.set_result(value)
        else:
            fut.set_exception(exc)
    if job.waiter is not None and not job.waiter.done():
        job.waiter.set_result(None)
