"""The disk threads of one store: blocking work handed over from event loops."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = None  # put on the queue once per thread to end it


class Handed:
    """Work handed off the event loop: the future its caller awaits, and whether it has landed.

    Shared by the disk threads' jobs and the kernel's batched fsyncs
    (`_aio.py`): a cancelled wait still waits for the work to land.
    """

    __slots__ = ("fut", "landed", "loop", "waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.fut: asyncio.Future[Any] = loop.create_future()
        self.landed = False
        self.waiter: asyncio.Future[None] | None = None

    def land(self, value: Any, exc: BaseException | None) -> None:
        """The work is done: hand its value (or error) to the caller, and wake a cancelled one."""
        self.landed = True
        fut = self.fut
        if not fut.done():
            if exc is None:
                fut.set_result(value)
            else:
                fut.set_exception(exc)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def outcome(self, *, shared: bool = False) -> Any:
        """Await the work's value (`shared`: other callers await the same work, so one
        caller's cancellation must not cancel it for the rest)."""
        try:
            return await (asyncio.shield(self.fut) if shared else self.fut)
        except asyncio.CancelledError:
            # The cancellation stopped the wait, not the work: let it land
            # whole before the caller unwinds (and perhaps releases the
            # run's lock to another process, or closes the descriptor), then
            # re-raise.
            while not self.landed:
                if self.waiter is None:
                    self.waiter = self.loop.create_future()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(self.waiter)
            raise


class _Job(Handed):
    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], Any], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.fn = fn


class DiskWorkers:
    """Dedicated threads, started on demand, that run blocking disk work.

    Cheaper than `asyncio.to_thread` per hand-off (no executor bookkeeping),
    and several threads let concurrent runs fsync in parallel so the file
    system can commit them together. The task awaits the job's future
    directly (no `asyncio.shield`, which costs a loop iteration per
    hand-off); a cancelled task still waits for its job to land (`Handed`).

    The threads hold no reference to the store that owns them, so a store
    that is dropped without `aclose` can be collected and its finalizer can
    call `stop`. They are daemon threads: one busy in an fsync does not keep
    the interpreter from exiting.
    """

    def __init__(self, max_threads: int = 16) -> None:
        self._queue: queue.SimpleQueue[list[_Job] | None] = queue.SimpleQueue()
        self._max = max_threads
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._stopped = False
        self._batches: dict[asyncio.AbstractEventLoop, list[_Job]] = {}
        self._done: dict[asyncio.AbstractEventLoop, list[tuple[_Job, Any, BaseException | None]]] = {}

    async def run(self, fn: Callable[[], Any]) -> Any:
        """Run `fn()` on a disk thread and return (or raise) what it did."""
        loop = asyncio.get_running_loop()
        job = _Job(fn, loop)
        with self._lock:
            if self._stopped:
                raise RuntimeError("these disk threads are stopped")
            batch = self._batches.get(loop)
            if batch is None:
                batch = self._batches[loop] = []
                loop.call_soon(self._dispatch, loop)
            batch.append(job)
        return await job.outcome()

    def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            self._hand_over(self._batches.pop(loop, None))

    def _hand_over(self, jobs: list[_Job] | None) -> None:
        # Called with the lock held. The jobs one loop handed over in one
        # iteration go out together: one queue entry (one thread wake-up,
        # one settling) per thread used, not per job.
        if not jobs:
            return
        chunks = min(len(jobs), self._max)
        missing = min(chunks - self._idle, self._max - len(self._threads))
        for _ in range(max(missing, 0)):
            thread = threading.Thread(target=self._work, name="polyloop-disk", daemon=True)
            self._threads.append(thread)
            self._idle += 1
            thread.start()
        chunks = min(chunks, len(self._threads))
        for k in range(chunks):
            self._queue.put(jobs[k::chunks])

    def stop(self) -> list[threading.Thread]:
        """Let every thread finish the jobs queued so far, then end; returns them to join.

        Safe to call from any thread, more than once, and from a finalizer.
        """
        with self._lock:
            if self._stopped:
                return []
            self._stopped = True
            for loop in list(self._batches):  # handed over, not yet dispatched: they still run
                self._hand_over(self._batches.pop(loop))
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
            jobs = self._queue.get()
            if jobs is _STOP:
                return
            with self._lock:
                self._idle -= 1
            finished = []
            for job in jobs:
                try:
                    value, exc = job.fn(), None
                except BaseException as e:  # handed to the awaiting task
                    value, exc = None, e
                finished.append((job, value, exc))
            loop = jobs[0].loop
            with self._lock:  # idle again before the tasks resume and hand over more
                self._idle += 1
                # One wake-up of a loop settles every job finished meanwhile:
                # under load, many fsyncs end while the loop is still busy.
                done = self._done.get(loop)
                wake = done is None
                if wake:
                    done = self._done[loop] = []
                done.extend(finished)
            if wake:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(self._settle_all, loop)
            del jobs, job, value, exc, done, finished  # hold nothing of the jobs while waiting for the next

    def _settle_all(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            done = self._done.pop(loop, ())
        for job, value, exc in done:
            job.land(value, exc)
