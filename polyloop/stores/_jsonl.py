"""The embedded default store: one append-only JSONL file per run.

Durability rules (docs/reference/log-format.md, "Durability"): every write
appends one whole record and fsyncs when the record kind requires it (the
table `polyloop._log.records.DURABLE`, followed through `_writes.py`). While
the store holds a run (its lock), the run's log stays open from its first
append to the end of the hold, and each durable append first checks that the
path still names that file (a log replaced or removed under the run stops
it); outside a hold every append opens and closes the file. Every append
is a single `write(2)` to the page cache, done inline: it survives a process
crash at once; the ones that need no fsync (model call results, step
records, product references) reach the disk with the run's next fsync. The fsync never runs on
the event loop: the fsyncs asked for in one iteration of the loop go to the
kernel together as asynchronous fsyncs (`_aio.py`: one system call for all
the runs, no thread), or, where the kernel does not offer them, each to one
of the store's own disk threads. Creating a log and reading one happen on
the disk threads.

Every file-system call goes through the store's `Disk` (the fault-injection
seam, see `_disk.py`). The writes are in `_jsonl_write.py`, the products in
`_artifacts.py` (mixins of the store, which owns their state); this module
holds the state, the reads and the run lock. Only regular files directly in the directory are
logs: a symbolic link is never followed, a FIFO or device never opened in a
way that could block.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

from .._log.codec import ParsedLog, parse_log
from .._log.errors import RunNotFoundError, StoreError
from .._log.ids import check_run_id
from .._log.records import Record
from .._log.store_port import EVERY_WRITE, Capabilities
from ._aio import Syncer
from ._disk import Disk, not_regular_problem, why
from ._jsonl_cancel import Cancels
from ._jsonl_write import Appends, OpenLog, drop_syncers, safe_id
from ._lockfile import clear_and_close, name_holder, open_lock, take
from ._lockfile import holder as lock_holder
from ._artifacts import ArtifactFiles
from ._url import directory as url_directory
from ._workers import DiskWorkers

T = TypeVar("T")


class JsonlStore(Appends, ArtifactFiles, Cancels):
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

    capabilities = Capabilities(
        writes=EVERY_WRITE, batching=True, locking=True, probing=True, holding=True, parsing=True, artifacts=True,
        cancelling=True,
    )

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
        self._logs: dict[str, OpenLog] = {}
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
        drop_syncers(syncers)
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
        return sorted(n for n in names if safe_id(n))

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


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join()

