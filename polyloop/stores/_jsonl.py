"""The embedded default store: one append-only JSONL file per run.

Durability rules (docs/reference/log-format.md, "Durability"): every write
appends one whole record and fsyncs when the record kind requires it
(`run_started`, intents, `run_finished`, `resolution`, `guard_check`). While
the store holds a run (its lock), the run's log stays open from its first
append to the end of the hold, and each durable append first checks that the
path still names that file (a log replaced or removed under the run stops
it); outside a hold every append opens and closes the file. Every append
is a single `write(2)` to the page cache, done inline: it survives a process
crash at once; the ones that need no fsync (model call results, step
records) reach the disk with the run's next fsync. The fsync never runs on
the event loop: the fsyncs asked for in one iteration of the loop go to the
kernel together as asynchronous fsyncs (`_aio.py`: one system call for all
the runs, no thread), or, where the kernel does not offer them, each to one
of the store's own disk threads. Creating a log and reading one happen on
the disk threads.

Every file-system call goes through the store's `Disk` (the fault-injection
seam, see `_disk.py`). Only regular files directly in the directory are
logs: a symbolic link is never followed, a FIFO or device never opened in a
way that could block.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import inspect
import os
import re
import stat
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ._products import read_product_file
from .._log.codec import ParsedLog, parse_log
from .._log.errors import (
    InvalidRunIdError,
    RunExistsError,
    RunNotFoundError,
    StoreError,
)
from .._log.ids import check_product_name, check_run_id
from .._log.records import (
    Artifact,
    Intent,
    ModelCallResult,
    Record,
    Resolution,
    RunFinished,
    RunStarted,
    StepCompleted,
    encode,
)
from ._aio import Refused, Syncer, open_syncer
from ._disk import Disk, kind_of, not_regular_problem, why
from ._lockfile import alive, clear_and_close, name_holder, open_lock, take
from ._lockfile import holder as lock_holder
from ._url import directory as url_directory
from ._workers import DiskWorkers

T = TypeVar("T")

# O_NOFOLLOW: a log that is a symbolic link is refused, never followed.
# O_NONBLOCK: opening a FIFO never waits for its other end (no effect on
# regular files). Everything opened is checked to be a regular file.
_SAFE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_APPEND = os.O_WRONLY | os.O_APPEND | _SAFE
# Refusals of an asynchronous fsync that mean "not here" rather than "not now".
_NO_AIO = {errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP}


class JsonlStore:
    """Run logs as `<directory>/<run_id>.jsonl`, one JSON record per line.

    The embedded default store. Safe for many concurrent runs in one event
    loop and for several processes sharing a directory: a run's log is
    created atomically and exclusively, and `lock` keeps each run to one live
    holder with an OS lock (`flock`) that the kernel releases when the holder
    dies. Only regular files are logs: a symbolic link, FIFO or device named
    like a log is refused (as corrupt when read, as a `StoreError` when
    written), never followed and never waited on.

    The store owns a few disk threads and, on Linux, one kernel context for
    asynchronous fsyncs per event loop (an eventfd), all made on first use;
    large batches of fsyncs are submitted by one helper thread per process,
    from a CPU other than the loop's.
    Close them with `await store.aclose()` or `async with
    JsonlStore(directory) as store:`; closing waits for the writes already
    handed over. A store used after `aclose` makes them again (closing frees
    resources, it never makes the store unusable), and a store dropped
    without closing frees them when it is garbage-collected.

    Prefix durability (a crash of the machine keeps a prefix of each file's
    appends) is what the file system gives append-only files; the power-loss
    explorer (docs/explanation/crash-states.md) checks the store against a
    model weaker than ext4's. Disks that acknowledge a flush they have not
    done are outside it.

    Args:
        directory: where the logs live; created when the first run starts.

    Raises:
        StoreUrlError: `directory` is a URL (`scheme://...`), not a directory.
    """

    # The disk seam is private: the public signature is `JsonlStore(directory)`.
    __signature__ = inspect.Signature(
        [inspect.Parameter("directory", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    )

    def __init__(self, directory: str | os.PathLike[str], *, _disk: Disk | None = None) -> None:
        self.directory = Path(url_directory(directory))
        self._dir = os.fspath(self.directory)
        self._prefix = os.path.join(self._dir, "")
        self._disk = _disk if _disk is not None else Disk()
        # The inode each run's log had when this store created or locked it,
        # so a file replaced under a live run stops the run instead of
        # receiving its records.
        self._inodes: dict[str, int] = {}
        # Torn tails found under a hold, cut by the first write of the hold.
        self._torn: dict[str, int] = {}
        # The runs this store holds, and the logs it keeps open while it does.
        self._held: set[str] = set()
        self._logs: dict[str, _OpenLog] = {}
        self._parent_synced = False
        self._swept = False  # leftovers of crashed creations removed (see _sweep_stale_creations)
        self._folders_synced: set[str] = set()  # product folders whose name this store made durable
        self._workers: DiskWorkers | None = None
        # Fsyncs of durable appends go to the kernel in batches, one batch
        # per loop iteration (`_aio.py`), unless the kernel refuses, the disk
        # seam is a test's own (its fsyncs must go through it), or
        # POLYLOOP_FSYNC=threads asks for the disk threads.
        self._aio = type(self._disk) is Disk and os.environ.get("POLYLOOP_FSYNC") != "threads"
        self._syncers: dict[asyncio.AbstractEventLoop, Syncer] = {}
        self._syncers_finalizer: weakref.finalize | None = None
        self._finalizer: weakref.finalize | None = None
        self._start_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JsonlStore({str(self.directory)!r})"

    # -- the store's own threads -------------------------------------------------

    async def __aenter__(self) -> JsonlStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End the store's disk threads and fsync contexts, after the writes already handed to them.

        Idempotent. The store stays usable: a later call starts new ones.
        """
        syncers, self._syncers = self._syncers, {}
        if self._syncers_finalizer is not None:
            self._syncers_finalizer.detach()
            self._syncers_finalizer = None
        running = asyncio.get_running_loop()
        for loop, syncer in syncers.items():
            if loop is running:
                await syncer.aclose()
        _drop_syncers(syncers)
        with self._start_lock:
            workers, self._workers = self._workers, None
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
        if workers is None:
            return
        threads = workers.stop()
        if threads:
            await asyncio.to_thread(_join, threads)

    def _hand_off(self, fn: Callable[[], T]) -> Any:
        """Run `fn` on one of the store's disk threads (awaitable); with `_fsync_fd`, the only ways work leaves the loop."""
        workers = self._workers
        if workers is None:
            with self._start_lock:
                workers = self._workers
                if workers is None:
                    workers = self._workers = DiskWorkers()
                    # The threads hold no reference to the store; this ends
                    # them when a store nobody closed is collected.
                    self._finalizer = weakref.finalize(self, workers.stop)
        return workers.run(fn)

    # -- paths -------------------------------------------------------------------

    def path(self, run_id: str) -> Path:
        """The log file of `run_id` (raises `InvalidRunIdError` for unsafe ids)."""
        return self.directory / f"{check_run_id(run_id)}.jsonl"

    def _file(self, run_id: str) -> str:
        # `path` as a plain string: pathlib's join costs more than a step's appends.
        return f"{self._prefix}{check_run_id(run_id)}.jsonl"

    def _lock_path(self, run_id: str) -> str:
        return f"{self._prefix}.{check_run_id(run_id)}.lock"

    # -- writes ------------------------------------------------------------------

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
                self._syncers_finalizer = weakref.finalize(self, _drop_syncers, self._syncers)
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
            self._logs[run_id] = _OpenLog(fd, ino, size, path)
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
            if match and _safe(match.group(1)) and not alive(int(match.group(2))):
                with contextlib.suppress(OSError):
                    self._disk.unlink(leftover)

    # -- products (log format 1.2) -----------------------------------------------

    def product_folder(self, run_id: str) -> Path:
        """Where the run's products live: `<directory>/<run_id>.artifacts/`."""
        return self.directory / f"{check_run_id(run_id)}.artifacts"

    async def write_artifact(self, run_id: str, record: Artifact) -> None:
        await self._append_soon(run_id, encode(record))

    async def put_product(self, run_id: str, name: str, data: bytes) -> None:
        """Store a product atomically and durably: temp file, write, fsync, rename, fsync of the folder.

        The temporary file (`.<name>.<pid>.<random>.tmp`, never a valid
        product name) is in the product's own folder, so the rename is
        atomic; a crash at any point leaves the old product (or none) or the
        whole new one. The first product of a run this store writes also
        makes the folder's own name durable.

        Raises:
            InvalidRunIdError, InvalidInputError: an unsafe run id or product name.
            StoreError: the product could not be written (it is then the old one or absent).
        """
        check_run_id(run_id)
        check_product_name(name)
        content = bytes(data)
        await self._hand_off(lambda: self._put(run_id, name, content))

    async def get_product(self, run_id: str, name: str) -> bytes | None:
        """The product's bytes, or None when it does not exist; never follows a symbolic link.

        Raises:
            NotRegularProductError: (a `StoreError`) it (or its folder) is not
                a regular file (directory) but, say, a symbolic link or a FIFO;
                the product checks count it as missing.
            StoreError: it cannot be read.
        """
        check_run_id(run_id)
        check_product_name(name)
        return await self._hand_off(lambda: self._get(run_id, name))

    def _put(self, run_id: str, name: str, data: bytes) -> None:
        disk = self._disk
        folder = f"{self._prefix}{run_id}.artifacts"
        final = os.path.join(folder, name)
        try:
            self._make_folder(folder)
            self._sweep_stale_products(folder, name)
            tmp = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
            fd = disk.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _SAFE, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot write product {name!r} in {folder}: {why(folder, exc)}", run_id=run_id) from exc
        try:
            try:
                disk.write(fd, data)
                disk.fsync(fd)
            finally:
                disk.close(fd)
            disk.rename(tmp, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                disk.unlink(tmp)
            raise StoreError(f"cannot write product {final}: {exc.strerror or exc}", run_id=run_id) from exc
        try:
            disk.fsync_dir(folder)
        except OSError as exc:
            raise StoreError(f"cannot sync {folder}: {exc.strerror or exc}", run_id=run_id) from exc

    def _make_folder(self, folder: str) -> None:
        try:
            mode = os.lstat(folder).st_mode
        except FileNotFoundError:
            self._disk.mkdir(folder)
            mode = stat.S_IFDIR
        if not stat.S_ISDIR(mode):
            raise OSError(errno.ENOTDIR, f"it is {kind_of(mode)}, not a directory", folder)
        if folder not in self._folders_synced:
            # The folder's name in the run directory must be durable before
            # any product in it is acknowledged (a crash may have come
            # between an earlier process's mkdir and its sync).
            self._disk.fsync_dir(self._dir)
            self._folders_synced.add(folder)

    def _sweep_stale_products(self, folder: str, name: str) -> None:
        # A crash during a write leaves `.<name>.<pid>.<rand>.tmp`; remove
        # those whose writer is dead (a live one may be mid-write).
        pattern = re.compile(rf"\.{re.escape(name)}\.(\d+)\.[0-9a-f]{{8}}\.tmp")
        for leftover in glob.glob(os.path.join(glob.escape(folder), f".{glob.escape(name)}.*.tmp")):
            match = pattern.fullmatch(os.path.basename(leftover))
            if match and not alive(int(match.group(1))):
                with contextlib.suppress(OSError):
                    self._disk.unlink(leftover)

    def _get(self, run_id: str, name: str) -> bytes | None:
        folder = f"{self._prefix}{run_id}.artifacts"
        try:
            return read_product_file(folder, name, self._disk.read, run_id=run_id)
        except OSError as exc:
            path = os.path.join(folder, name)
            raise StoreError(f"cannot read product {path}: {exc.strerror or exc}", run_id=run_id) from exc

    # -- reads -------------------------------------------------------------------

    def _load(self, run_id: str) -> ParsedLog:
        """Read and parse the log (on a disk thread); a non-regular file is one problem."""
        path = self._file(run_id)
        try:
            data = self._disk.read(path)
        except FileNotFoundError:
            raise RunNotFoundError(run_id, str(self.directory)) from None
        except OSError as exc:
            problem = not_regular_problem(path, exc)
            if problem is not None:
                return ParsedLog(problems=[problem])
            raise StoreError(f"cannot read {path}: {why(path, exc)}", run_id=run_id) from exc
        return parse_log(data)

    async def read_log(self, run_id: str) -> list[Record]:
        """Every record of the run in order, without a torn tail.

        The file is read and decoded on a disk thread, so a long log does not
        stall the event loop.

        Raises:
            InvalidRunIdError: the run id is not a safe file name.
            RunNotFoundError: there is no log for the run id.
            CorruptLogError: a line does not decode (other than a torn
                tail), a line is not a valid record (`SchemaVersionError` for
                an unknown major version), or the log is not a regular file.
            StoreError: the file cannot be read.
        """
        check_run_id(run_id)
        parsed = await self._hand_off(lambda: self._load(run_id))
        return parsed.records_or_raise(run_id)

    async def read_parsed(self, run_id: str) -> ParsedLog:
        """The log with its line numbers, torn tail and problems, without judging the run.

        A log that is not a regular file comes back as a `ParsedLog` with one
        problem (no line) saying what it is.

        Raises:
            InvalidRunIdError, RunNotFoundError, StoreError: as `read_log`.
        """
        check_run_id(run_id)
        return await self._hand_off(lambda: self._load(run_id))

    def exists(self, run_id: str) -> bool:
        """Whether anything (a log, or a file in its way) exists at the run's log path."""
        return os.path.lexists(self._file(run_id))

    async def list_runs(self) -> list[str]:
        """The run ids of the directory's logs, sorted: regular `*.jsonl` files with a safe id.

        A missing directory has no runs. Files that are not regular (a link,
        a FIFO) are left out here; `verify_logs` reports them.

        Raises:
            StoreError: the directory cannot be listed.
        """
        return await self._hand_off(self._list)

    def _list(self) -> list[str]:
        try:
            entries = os.scandir(self._dir)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"cannot list {self.directory}: {exc.strerror or exc}") from exc
        with entries:
            names = [e.name[: -len(".jsonl")] for e in entries if e.name.endswith(".jsonl")
                     and e.is_file(follow_symlinks=False)]
        return sorted(n for n in names if _safe(n))

    # -- the run lock --------------------------------------------------------------

    def holder(self, run_id: str) -> str | None:
        """Who holds the run right now (e.g. `pid 41 on host`), or None if nobody does.

        Probes the OS lock without taking it for longer than the probe and
        without touching the log.
        """
        return lock_holder(self._lock_path(run_id))

    @contextlib.asynccontextmanager
    async def lock(self, run_id: str) -> AsyncIterator[ParsedLog | None]:
        """Hold the run for this task until the block exits; yield its log as read under the hold.

        The hold is an exclusive `flock` on `<directory>/.<run_id>.lock`,
        released by the kernel if the process dies. On entry, a torn tail
        left by a crash (an unterminated last line that does not decode) is
        cut off, and a whole last record missing its newline gets it, so new
        records start on a fresh line; a newline-terminated line is never
        cut. The block receives the `ParsedLog` read while doing so — its
        records are exactly what `read_log` returns now — or None when the
        run has no log yet. A corrupt log is yielded as it is (with its
        `problems`), never changed: refusing it is the caller's decision.

        Raises:
            RunActiveError: another process or task holds the run.
            StoreError: the lock file cannot be created or used, or the
                torn tail cannot be cut.
        """
        fd = open_lock(self._disk, self._dir, self._lock_path(run_id), run_id)
        try:
            await take(fd, run_id)
        except BaseException:
            self._disk.close(fd)
            raise
        self._held.add(run_id)
        try:
            name_holder(self._disk, fd)
            if self._no_log_yet(run_id):  # a new run: nothing to read, no disk thread to wake
                parsed, inode = None, None
            else:
                parsed, inode = await self._hand_off(lambda: self._read_held(run_id))
            if inode is not None:
                self._inodes[run_id] = inode
            if parsed is not None and not parsed.problems and parsed.torn_offset is not None:
                self._torn[run_id] = parsed.torn_offset
            yield parsed
        finally:
            self._held.discard(run_id)
            log = self._logs.pop(run_id, None)
            if log is not None:
                with contextlib.suppress(OSError):
                    self._disk.close(log.fd)
            self._torn.pop(run_id, None)
            self._inodes.pop(run_id, None)
            clear_and_close(self._disk, fd)

    def _no_log_yet(self, run_id: str) -> bool:
        try:
            os.lstat(self._file(run_id))
        except FileNotFoundError:
            return True
        except OSError:
            pass  # reading it will say what is wrong
        return False

    def _read_held(self, run_id: str) -> tuple[ParsedLog | None, int | None]:
        """The log as it is under the hold, and its inode; nothing is changed here."""
        path = self._file(run_id)
        try:
            parsed = self._load(run_id)
        except RunNotFoundError:
            return None, None
        if parsed.problems:
            return parsed, None  # corruption is refused by the reader, never repaired
        try:
            inode = os.lstat(path).st_ino
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {why(path, exc)}", run_id=run_id) from exc
        return parsed, inode


class _OpenLog:
    """A held run's log, open for appending until the hold ends."""

    __slots__ = ("fd", "ino", "path", "size")

    def __init__(self, fd: int, ino: int, size: int, path: str) -> None:
        self.fd = fd
        self.path = path
        self.ino = ino
        self.size = size


def _safe(run_id: str) -> bool:
    try:
        check_run_id(run_id)
    except InvalidRunIdError:
        return False
    return True


def _drop_syncers(syncers: dict[asyncio.AbstractEventLoop, Syncer]) -> None:
    """Give back the kernel contexts of a closed or collected store, each from its own loop's thread."""
    for loop, syncer in list(syncers.items()):
        if loop.is_closed():
            syncer.close()
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(syncer.close)
    syncers.clear()


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join()

