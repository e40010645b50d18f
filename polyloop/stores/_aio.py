"""Fsyncs handed to the kernel in batches (Linux AIO), with no thread of ours in between.

Under load the JSONL store's durable appends are many small fsyncs of
different files. Handed to threads, each one costs the event loop a thread
wake-up and, worse, a fight for the interpreter lock every time a thread
comes back from the disk. Linux has had asynchronous fsync since 4.18: an
`IOCB_CMD_FSYNC` request runs `vfs_fsync` (what `fsync(2)` runs) on a kernel
worker and reports its result like the system call would. So the loop
writes the records of every run that wants a durable append in one
iteration, hands all their fsyncs to the kernel with one `io_submit`, and an
eventfd tells it when some are done; one `io_getevents` collects them.

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
import struct
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
        _, self._destroy, self._submit, self._getevents = (ctypes.c_long(n) for n in calls)
        self._sys = _syscall()
        self._queued: list[_Request] = []
        self._shared: dict[str, _Request] = {}
        self._flagged = False
        self._inflight: dict[int, _Request] = {}
        self._next = 1
        self._closed = False
        self._idle: asyncio.Future[None] | None = None
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
                request.land(None, Refused(errno.EBADF, "the store's fsync context is closed"))
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
        done = 0
        step = ctypes.sizeof(ctypes.c_void_p)
        while done < n:
            got = self._sys(self._submit, self._ctx, ctypes.c_long(n - done), ctypes.byref(pointers, done * step))
            if got > 0:
                done += got
                continue
            err = ctypes.get_errno() if got < 0 else errno.EIO
            if err == errno.EINTR:
                continue
            # The request at `done` was refused (EINVAL: no asynchronous fsync
            # for this file or kernel; EAGAIN: no room; EBADF): it fails
            # alone, the rest go on.
            self._inflight.pop(first + done).land(None, Refused(err, os.strerror(err)))
            done += 1
        self._maybe_idle()

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
            self._sys(self._destroy, self._ctx)
        with contextlib.suppress(OSError):
            os.close(self._efd)


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
