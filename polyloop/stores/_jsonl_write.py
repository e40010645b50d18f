"""The writing side of `JsonlStore`: appends, their fsyncs, and the atomic creation of a log.

A mixin of `JsonlStore` (polyloop/stores/_jsonl.py), which owns the state it
uses (declared below) and documents the durability rules; split out so each
module stays one concern: this one writes, `_jsonl.py` reads and holds runs,
`_products.py` keeps products.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import os
import re
import stat
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._log.errors import InvalidRunIdError, RunExistsError, StoreError
from .._log.ids import check_run_id
from .._log.records import Intent, ModelCallResult, Resolution, RunFinished, RunStarted, StepCompleted, encode
from ._aio import Refused, Syncer, open_syncer
from ._disk import SAFE, Disk, kind_of, why
from ._lockfile import alive

_APPEND = os.O_WRONLY | os.O_APPEND | SAFE
# Refusals of an asynchronous fsync that mean "not here" rather than "not now".
_NO_AIO = {errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP}

class Appends:
    """The writes of `JsonlStore` (a mixin: the store owns the state and the disk threads)."""

    directory: Path
    _dir: str
    _prefix: str
    _disk: Disk
    _inodes: dict[str, int]
    _torn: dict[str, int]
    _held: set[str]
    _logs: dict[str, OpenLog]
    _parent_synced: bool
    _swept: bool
    _aio: bool
    _syncers: dict[asyncio.AbstractEventLoop, Syncer]
    _syncers_finalizer: weakref.finalize | None
    _file: Callable[[str], str]
    _hand_off: Callable[[Callable[[], Any]], Any]

    async def write_run_started(self, record: RunStarted) -> None:
        path, data, run_id = self._file(record.run_id), encode(record), record.run_id
        # The file on a disk thread (creating names in a directory can wait
        # on the directory's own fsync); then the directory's fsync, shared
        # by the runs created at the same moment.
        await self._hand_off(lambda: self._create(path, data, run_id))
        try:
            await self._fsync_dir(self._dir)
            if not self._parent_synced:
                # The directory's own name must be durable too (the store may
                # have just made it): syncing a directory does not sync its
                # entry in its parent. Once per store is enough for the names
                # made before it.
                await self._fsync_dir(os.path.dirname(os.path.abspath(self._dir)))
                self._parent_synced = True
        except OSError as exc:
            raise StoreError(f"cannot sync {self.directory}: {exc.strerror}", run_id=run_id) from exc

    async def write_intent(self, run_id: str, record: Intent) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_intents(self, run_id: str, records: Sequence[Intent]) -> None:
        """Append several intents with one write and one fsync (the calls of one step)."""
        await self._append_durable(run_id, b"".join([encode(r) for r in records]))

    async def write_model_call_result(self, run_id: str, record: ModelCallResult) -> None:
        await self._append_soon(run_id, encode(record))

    async def write_step_completed(self, run_id: str, record: StepCompleted) -> None:
        await self._append_soon(run_id, encode(record))

    async def write_run_finished(self, run_id: str, record: RunFinished) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_resolution(self, run_id: str, record: Resolution) -> None:
        await self._append_durable(run_id, encode(record))

    async def _append_soon(self, run_id: str, data: bytes) -> None:
        log = self._logs.get(run_id)
        if log is not None:  # held and open: the id was checked and the torn tail cut when it opened
            size = log.size
            self._write_or_undo(log.fd, size, data, log.path, run_id)
            log.size = size + len(data)
        elif run_id in self._torn:  # the first write after a crash cuts the torn tail: a disk wait
            await self._hand_off(lambda: self._append(self._file(run_id), data, run_id))
        else:
            self._append(self._file(run_id), data, run_id)

    async def write_guard_check(self, run_id: str, record: Any) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_action_result(self, run_id: str, record: Any) -> None:
        await self._append_soon(run_id, encode(record))

    async def write_approval_request(self, run_id: str, record: Any) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_decision(self, run_id: str, record: Any) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_checkpoint_accepted(self, run_id: str, record: Any) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_resumed(self, run_id: str, record: Any) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_crash_loop_accepted(self, run_id: str, record: Any) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_run_stopped(self, run_id: str, record: Any) -> None:
        await self._append_durable(run_id, encode(record))

    async def _append_durable(self, run_id: str, data: bytes) -> None:
        log = self._logs.get(run_id)
        if log is None:
            path = self._file(run_id)
            if run_id in self._torn:
                # The first write after a crash also cuts the torn tail (a
                # truncate and an fsync): the whole append goes to a disk thread.
                await self._hand_off(lambda: self._append(path, data, run_id, durable=True))
                return
            fd, size, kept = self._acquire(path, run_id)
            if not kept:  # not held: the log is opened for this append and closed after it
                try:
                    self._write_or_undo(fd, size, data, path, run_id)
                    await self._fsync(fd, size, path, run_id)
                finally:
                    self._disk.close(fd)
                return
            log = self._logs[run_id]
        # Held: the log stays open. The append is one write(2) to the page
        # cache, done here like the appends that need no fsync; only the
        # fsync (the disk wait) leaves the loop.
        path, size = log.path, log.size
        self._check_same(path, run_id)  # before the record, so none lands in a stray file
        self._write_or_undo(log.fd, size, data, path, run_id)
        log.size = size + len(data)
        try:
            await self._fsync(log.fd, size, path, run_id)
        except BaseException:
            log.size = size  # taken back (or torn): the next record starts where this one did
            raise

    async def _fsync(self, fd: int, size: int, path: str, run_id: str) -> None:
        """Make an append durable; if that fails, take it back (cut to `size`) and raise `StoreError`."""
        try:
            await self._fsync_fd(fd)
        except OSError as exc:
            self._undo(fd, size)
            raise StoreError(f"cannot write to {path}: {exc.strerror or exc}", run_id=run_id) from exc

    def _syncer(self) -> Syncer | None:
        """This loop's batch of fsyncs for the kernel, or None to use the disk threads."""
        if not self._aio:
            return None
        loop = asyncio.get_running_loop()
        syncer = self._syncers.get(loop)
        if syncer is None or syncer.pid != os.getpid():
            syncer = open_syncer(loop)
            if syncer is None:  # refused by this kernel: threads from now on
                self._aio = False
                return None
            self._syncers[loop] = syncer
            if self._syncers_finalizer is None:
                self._syncers_finalizer = weakref.finalize(self, drop_syncers, self._syncers)
        return syncer

    def _append(self, path: str, data: bytes, run_id: str, *, durable: bool = False) -> None:
        # One whole append in the calling thread: inline for the writes that
        # need no fsync; on a disk thread for the first write after a crash.
        fd, size, kept = self._acquire(path, run_id)
        try:
            if durable and kept:
                self._check_same(path, run_id)  # before the record, so none lands in a stray file
            self._write_or_undo(fd, size, data, path, run_id)
            self._grew(run_id, kept, size + len(data))
            if durable:
                self._sync(fd, size, path, run_id)
        finally:
            if not kept:
                self._disk.close(fd)

    def _acquire(self, path: str, run_id: str) -> tuple[int, int, bool]:
        """The log's descriptor for one append, the size before it, and whether it stays open.

        While this store holds the run, its log stays open from the first
        append to the end of the hold (one `open` per hold, not per record);
        otherwise every append opens and closes it.
        """
        log = self._logs.get(run_id)
        if log is not None:
            return log.fd, log.size, True
        fd, size, ino = self._open(path, run_id)
        if run_id in self._held:
            self._logs[run_id] = OpenLog(fd, ino, size, path)
            return fd, size, True
        return fd, size, False

    def _grew(self, run_id: str, kept: bool, size: int) -> None:
        if kept:
            self._logs[run_id].size = size

    def _check_same(self, path: str, run_id: str) -> None:
        """Raise `StoreError` if the path no longer names the log this hold keeps open.

        Checked before each durable append of a held run (so before the
        effect it precedes can start): a log replaced or removed under a live
        run stops the run, and the record goes nowhere.
        """
        log = self._logs.get(run_id)
        try:
            ino = os.stat(path).st_ino
        except FileNotFoundError:
            raise StoreError(f"log of run {run_id!r} is gone: {path} no longer exists", run_id=run_id) from None
        except OSError as exc:
            raise StoreError(f"cannot check {path}: {why(path, exc)}", run_id=run_id) from exc
        if log is not None and ino != log.ino:
            raise StoreError(
                f"log of run {run_id!r} was replaced under the run: {path} is another file now", run_id=run_id
            )

    def _open(self, path: str, run_id: str) -> tuple[int, int, int]:
        """Open the log for appending; return the descriptor, its size and its inode."""
        disk = self._disk
        try:
            fd = disk.open(path, _APPEND)
        except FileNotFoundError:
            raise StoreError(f"log of run {run_id!r} is gone: {path} no longer exists", run_id=run_id) from None
        except OSError as exc:
            raise StoreError(f"cannot open {path}: {why(path, exc)}", run_id=run_id) from exc
        try:
            info = disk.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise StoreError(
                    f"cannot append to {path}: it is {kind_of(info.st_mode)}, not a regular file", run_id=run_id
                )
            expected = self._inodes.get(run_id)
            if expected is not None and info.st_ino != expected:
                raise StoreError(
                    f"log of run {run_id!r} was replaced under the run: {path} is another file now",
                    run_id=run_id,
                )
            size = info.st_size
            torn = self._torn.pop(run_id, None)
            if torn is not None:
                # The first write under the hold cuts the torn tail a crash left,
                # so the record starts on a fresh line (and a refused request
                # never changed the log).
                disk.ftruncate(fd, torn)
                disk.fsync(fd)
                size = torn
        except OSError as exc:
            disk.close(fd)
            raise StoreError(f"cannot cut the torn tail of {path}: {why(path, exc)}", run_id=run_id) from exc
        except BaseException:
            disk.close(fd)
            raise
        return fd, size, info.st_ino

    def _write_or_undo(self, fd: int, size: int, data: bytes, path: str, run_id: str) -> None:
        try:
            self._disk.write(fd, data)
        except OSError as exc:
            self._undo(fd, size)
            raise StoreError(f"cannot write to {path}: {exc.strerror or exc}", run_id=run_id) from exc

    def _sync(self, fd: int, size: int, path: str, run_id: str) -> None:
        try:
            self._disk.fsync(fd)
        except OSError as exc:
            self._undo(fd, size)
            raise StoreError(f"cannot write to {path}: {exc.strerror or exc}", run_id=run_id) from exc

    def _undo(self, fd: int, size: int) -> None:
        # Take a partial or unsynced append back so the log keeps a clean
        # end; if even that fails, readers drop it as a torn tail.
        with contextlib.suppress(OSError):
            self._disk.ftruncate(fd, size)

    def _create(self, path: str, data: bytes, run_id: str) -> None:
        # Write the first record to a private file, make it durable, then
        # publish it with link(2): like O_CREAT|O_EXCL it fails if the log
        # exists (even as a dangling link), and a crash at any point leaves
        # no log or a complete one (once the directory is synced, see
        # write_run_started).
        disk = self._disk
        try:
            disk.mkdir(self._dir)
            if not self._swept:
                self._sweep_stale_creations()
            tmp = f"{self._prefix}.{run_id}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
            fd = disk.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot create a log in {self.directory}: {exc.strerror}", run_id=run_id) from exc
        try:
            try:
                disk.write(fd, data)
                disk.fsync(fd)
                inode = disk.fstat(fd).st_ino
            finally:
                disk.close(fd)
            disk.link(tmp, path)
            self._inodes[run_id] = inode
        except FileExistsError:
            raise RunExistsError(run_id) from None
        except OSError as exc:
            raise StoreError(f"cannot create {path}: {exc.strerror or exc}", run_id=run_id) from exc
        finally:
            with contextlib.suppress(OSError):
                disk.unlink(tmp)

    async def _fsync_fd(self, fd: int, *, same: str | None = None) -> None:
        """fsync(2) off the loop: in this iteration's batch for the kernel, or on a disk thread."""
        syncer = self._syncer()
        if syncer is not None:
            try:
                await syncer.fsync(fd, same=same)
                return
            except Refused as exc:
                # Refused as a request, not answered by an fsync (an fsync's
                # own error is fsync(2)'s, and raised as it is): fsync(2)
                # itself decides. A kernel (or sandbox) without asynchronous
                # fsync decides so for the rest of the store.
                if exc.errno in _NO_AIO:
                    self._aio = False
        await self._hand_off(lambda: self._disk.fsync(fd))

    async def _fsync_dir(self, directory: str) -> None:
        """Make the names in `directory` durable, off the loop."""
        if self._syncer() is None:
            await self._hand_off(lambda: self._disk.fsync_dir(directory))
            return
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            # Runs created at once in one directory share its fsync.
            await self._fsync_fd(fd, same=directory)
        finally:
            os.close(fd)

    def _sweep_stale_creations(self) -> None:
        # A crash during creation leaves `.<run_id>.<pid>.<rand>.tmp`; remove
        # those whose creator is dead (a live one may be mid-creation). Once
        # per store, at its first creation: listing the directory for every
        # run would make a batch of n runs cost n² directory entries.
        self._swept = True
        pattern = re.compile(r"\.(.+)\.(\d+)\.[0-9a-f]{8}\.tmp")
        for leftover in glob.glob(f"{glob.escape(self._prefix)}.*.tmp"):
            match = pattern.fullmatch(os.path.basename(leftover))
            if match and safe_id(match.group(1)) and not alive(int(match.group(2))):
                with contextlib.suppress(OSError):
                    self._disk.unlink(leftover)


class OpenLog:
    """A held run's log, open for appending until the hold ends."""

    __slots__ = ("fd", "ino", "path", "size")

    def __init__(self, fd: int, ino: int, size: int, path: str) -> None:
        self.fd = fd
        self.path = path
        self.ino = ino
        self.size = size


def safe_id(run_id: str) -> bool:
    try:
        check_run_id(run_id)
    except InvalidRunIdError:
        return False
    return True


def drop_syncers(syncers: dict[asyncio.AbstractEventLoop, Syncer]) -> None:
    """Give back the kernel contexts of a closed or collected store, each from its own loop's thread."""
    for loop, syncer in list(syncers.items()):
        if loop.is_closed():
            syncer.close()
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(syncer.close)
    syncers.clear()
