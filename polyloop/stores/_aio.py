"""Fsyncs handed to the kernel in batches (Linux AIO), not to a thread each.

Under load the JSONL store's durable appends are many small fsyncs of
different files. Handed to threads, each one costs the event loop a thread
wake-up and, worse, a fight for the interpreter lock every time a thread
comes back from the disk. Linux has had asynchronous fsync since 4.18: an
`IOCB_CMD_FSYNC` request runs `vfs_fsync` (what `fsync(2)` runs) on a kernel
worker and reports its result like the system call would. So the loop
writes the records of every run that wants a durable append in one
iteration, hands all their fsyncs to the kernel with one `io_submit`, and an
eventfd tells it when some are done; one `io_getevents` collects them.

The kernel runs an asynchronous fsync in a worker on the CPU that submitted
it. Submitted by the loop, that is the loop's own CPU, where the fsync's
kernel work (the writeback of the record and of the inode) preempts the loop.
So a batch of `_STEER_FROM` requests or more is submitted by a helper thread
that keeps itself off the CPU the loop runs on (`_Submitter`): the work
runs beside the loop instead of in its way. The helper only changes where
its own thread may run; smaller batches (a single run's fsyncs) are
submitted by the loop itself, with no hand-off.

The four system calls have no C library wrappers; they are called by number
(x86-64 and the generic table of arm64/riscv64). Anything else, or a kernel
that refuses a context (seccomp, `fs.aio-max-nr` exhausted), gets `None` from
`open_syncer` and the store keeps its disk threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import platform
import re
import queue
import struct
import threading
from collections.abc import Callable

from ._workers import Handed

_NUMBERS = {  # io_setup, io_destroy, io_submit, io_getevents
    "x86_64": (206, 207, 209, 208),
    "aarch64": (0, 1, 2, 4),
    "arm64": (0, 1, 2, 4),
    "riscv64": (0, 1, 2, 4),
}
_IOCB = struct.Struct("=QIIHhIQQqQII")  # struct iocb, 64 bytes (linux/aio_abi.h)
_EVENT = struct.Struct("=QQqq")  # struct io_event, 32 bytes
_IOCB_CMD_FSYNC = 2
_IOCB_FLAG_RESFD = 1
_DEPTH = 1024  # requests in flight per context; more wait for the next submit
_REAP = 256  # events collected per io_getevents call
_STEER_FROM = 8  # requests in a batch from which the helper submits it (see _Submitter)

_libc: ctypes.CDLL | None = None


def _syscall() -> Callable[..., int] | None:
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return None
    fn = _libc.syscall
    fn.restype = ctypes.c_long
    return fn


class Refused(OSError):
    """The kernel refused the request itself (`io_submit`): no fsync was tried."""


def _closed_refusal() -> Refused:
    """What a request gets when the syncer closed before submitting it (queued, or with the helper)."""
    return Refused(errno.EBADF, "the store's fsync context is closed")


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Request(Handed):
    __slots__ = ("fd",)

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.fd = fd


class Syncer:
    """Batches of fsyncs for one event loop: `await syncer.fsync(fd)`.

    Every fsync asked for during one iteration of the loop goes to the kernel
    with one `io_submit` at the end of it; completions wake the loop through
    an eventfd. The caller keeps `fd` open until its fsync has landed: the
    awaited call returns or raises only then, even when the waiting task is
    cancelled (the cancellation stops the wait, not the fsync).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, ctx: int, efd: int, calls: tuple[int, int, int, int]) -> None:
        self.loop = loop
        self.pid = os.getpid()
        self._ctx = ctypes.c_ulong(ctx)
        self._efd = efd
        _, self._destroy, self._submit_call, self._getevents = (ctypes.c_long(n) for n in calls)
        self._sys = _syscall()
        self._queued: list[_Request] = []
        self._shared: dict[str, _Request] = {}
        self._flagged = False
        self._inflight: dict[int, _Request] = {}
        self._next = 1
        self._closed = False
        self._idle: asyncio.Future[None] | None = None
        # Held while a batch is submitted and while the context is destroyed:
        # the helper never submits to a context that `close` gave back.
        self._submitting = threading.Lock()
        self._events = ctypes.create_string_buffer(_EVENT.size * _REAP)
        self._zero = _Timespec(0, 0)
        loop.add_reader(efd, self._reap)

    def __repr__(self) -> str:
        return f"<Syncer {len(self._inflight)} in flight, {len(self._queued)} queued>"

    async def fsync(self, fd: int, *, same: str | None = None) -> None:
        """Make `fd`'s file durable (`fsync(2)` semantics); raise `OSError` as it would.

        `same` names the file when other callers may sync it too (a
        directory many runs are created in): a request for the same name
        that is still waiting for this iteration's submit serves both, since
        whatever either changed before asking happened before that fsync.
        """
        if self._closed:
            raise RuntimeError("this syncer is closed")
        request = self._shared.get(same) if same is not None else None
        if request is None:
            request = _Request(fd, self.loop)
            self._queued.append(request)
            if same is not None:
                self._shared[same] = request
            if not self._flagged:
                self._flagged = True
                self.loop.call_soon(self._flush)
        await request.outcome(shared=same is not None)

    def _flush(self) -> None:
        self._flagged = False
        self._shared.clear()  # what is asked from now on comes after this submit
        if self._closed:
            queued, self._queued = self._queued, []
            for request in queued:
                request.land(None, _closed_refusal())
            return
        room = _DEPTH - len(self._inflight)
        if room <= 0:  # the rest waits for completions to make room (see _reap)
            return
        batch, self._queued = self._queued[:room], self._queued[room:]
        n = len(batch)
        if n == 0:
            return
        blocks = ctypes.create_string_buffer(_IOCB.size * n)
        base = ctypes.addressof(blocks)
        pointers = (ctypes.c_void_p * n)()
        efd = self._efd
        for i, request in enumerate(batch):
            key = self._next
            self._next += 1
            _IOCB.pack_into(blocks, i * _IOCB.size, key, 0, 0, _IOCB_CMD_FSYNC, 0, request.fd, 0, 0, 0, 0,
                            _IOCB_FLAG_RESFD, efd)
            pointers[i] = base + i * _IOCB.size
            self._inflight[key] = request
        first = self._next - n
        if n >= _STEER_FROM:
            submitter = _submitter()
            if submitter is not None:
                submitter.hand(self, blocks, pointers, n, first)
                return
        self._submit(blocks, pointers, n, first, self._refused)

    def _submit(self, blocks: ctypes.Array, pointers: ctypes.Array, n: int, first: int,
                refuse: Callable[[int, OSError], None]) -> None:
        """io_submit the packed batch (on the loop, or on the helper); `refuse(key, error)` each refusal."""
        done = 0
        step = ctypes.sizeof(ctypes.c_void_p)
        with self._submitting:
            if self._closed:
                for key in range(first, first + n):
                    refuse(key, _closed_refusal())
                return
            while done < n:
                got = self._sys(self._submit_call, self._ctx, ctypes.c_long(n - done),
                                ctypes.byref(pointers, done * step))
                if got > 0:
                    done += got
                    continue
                err = ctypes.get_errno() if got < 0 else errno.EIO
                if err == errno.EINTR:
                    continue
                # The request at `done` was refused (EINVAL: no asynchronous
                # fsync for this file or kernel; EAGAIN: no room; EBADF): it
                # fails alone, the rest go on.
                refuse(first + done, Refused(err, os.strerror(err)))
                done += 1

    def _refused(self, key: int, exc: OSError) -> None:
        request = self._inflight.pop(key, None)
        if request is not None:
            request.land(None, exc)
        self._maybe_idle()

    def _refused_from_helper(self, key: int, exc: OSError) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self.loop.call_soon_threadsafe(self._refused, key, exc)

    def _reap(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(self._efd, 8)
        events = self._events
        size = _EVENT.size
        while self._inflight:
            got = self._sys(self._getevents, self._ctx, ctypes.c_long(0), ctypes.c_long(_REAP), events,
                            ctypes.byref(self._zero))
            if got < 0:
                if ctypes.get_errno() == errno.EINTR:
                    continue
                break
            for i in range(got):
                key, _obj, res, _res2 = _EVENT.unpack_from(events, i * size)
                request = self._inflight.pop(key, None)
                if request is not None:
                    request.land(None, None if res >= 0 else OSError(-res, os.strerror(-res)))
            if got < _REAP:
                break
        if self._queued and not self._flagged:
            self._flagged = True
            self.loop.call_soon(self._flush)
        self._maybe_idle()

    def _maybe_idle(self) -> None:
        idle = self._idle
        if idle is not None and not self._inflight and not self._queued and not idle.done():
            idle.set_result(None)

    async def aclose(self) -> None:
        """Wait for every fsync handed over to land, then give the kernel context back."""
        while self._inflight or self._queued:
            self._idle = self.loop.create_future()
            await self._idle
        self.close()

    def close(self) -> None:
        """Give the context back now (the kernel finishes the requests in flight first)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):  # the loop is closed, or runs in another thread
            if not self.loop.is_closed():
                self.loop.remove_reader(self._efd)
        if os.getpid() == self.pid:
            with self._submitting:
                self._sys(self._destroy, self._ctx)
        with contextlib.suppress(OSError):
            os.close(self._efd)


class _Submitter:
    """The helper thread that submits large batches from a CPU other than the loop's.

    One per process, started on first use. Each batch comes with the CPU the
    loop was on when it packed it; the helper moves itself to the other CPUs
    this process may use (`sched_setaffinity` of its own thread only) when
    that CPU changes. If the kernel refuses the move, it submits from
    wherever it runs.
    """

    def __init__(self, cpus: set[int], where: Callable[[], int]) -> None:
        self._cpus = cpus
        self._where = where
        self._avoiding: int | None = None
        self._steer = True
        self._jobs: queue.SimpleQueue[tuple[Syncer, ctypes.Array, ctypes.Array, int, int, int]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._main, name="polyloop-fsync-submit", daemon=True)
        self.thread.start()

    def hand(self, syncer: Syncer, blocks: ctypes.Array, pointers: ctypes.Array, n: int, first: int) -> None:
        self._jobs.put((syncer, blocks, pointers, n, first, self._where()))

    def _main(self) -> None:
        while True:
            syncer, blocks, pointers, n, first, cpu = self._jobs.get()
            if self._steer and cpu != self._avoiding:
                self._avoiding = cpu
                try:
                    os.sched_setaffinity(0, (self._cpus - {cpu}) or self._cpus)
                except OSError:
                    self._steer = False
            syncer._submit(blocks, pointers, n, first, syncer._refused_from_helper)
            del syncer, blocks, pointers


_the_submitter: _Submitter | None = None
_submitter_lock = threading.Lock()


def _submitter() -> _Submitter | None:
    """This process's `_Submitter`, or None where there is no other CPU to submit from."""
    global _the_submitter
    if _the_submitter is not None:
        return _the_submitter
    with _submitter_lock:
        if _the_submitter is None:
            cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
            getcpu = getattr(_libc, "sched_getcpu", None) if _libc is not None else None
            if len(cpus) < 2 or getcpu is None:
                return None
            getcpu.restype = ctypes.c_int
            _the_submitter = _Submitter(set(cpus), getcpu)
        return _the_submitter


def _forget_submitter() -> None:
    global _the_submitter, _submitter_lock
    _the_submitter = None  # a forked child has the variable but not the thread
    _submitter_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_submitter)


def _kernel() -> tuple[int, int]:
    """The running kernel's (major, minor); asynchronous fsync came with 4.18."""
    numbers = re.match(r"(\d+)\.(\d+)", platform.release())
    return (int(numbers[1]), int(numbers[2])) if numbers else (0, 0)


def open_syncer(loop: asyncio.AbstractEventLoop) -> Syncer | None:
    """A `Syncer` for `loop`, or `None` where asynchronous fsync is not available."""
    calls = _NUMBERS.get(platform.machine())
    if calls is None or not hasattr(os, "eventfd") or _kernel() < (4, 18):
        return None
    sys_ = _syscall()
    if sys_ is None:
        return None
    ctx = ctypes.c_ulong(0)
    if sys_(ctypes.c_long(calls[0]), ctypes.c_long(_DEPTH), ctypes.byref(ctx)) != 0:
        return None
    try:
        efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    except OSError:
        sys_(ctypes.c_long(calls[1]), ctx)
        return None
    return Syncer(loop, ctx.value, efd, calls)
