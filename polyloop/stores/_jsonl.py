"""The embedded default store: one append-only JSONL file per run.

Durability rules (SPEC §6): every write opens the file, appends, fsyncs when
the record kind requires it (`run_started`, intents, `run_finished`,
`resolution`) and closes it. Appends that need no fsync (model call results,
step records) are a single `write(2)` to the page cache, done inline: they
survive a process crash at once and reach the disk with the run's next
fsync. Every fsync happens on a small pool of dedicated writer threads, so
waiting on the disk never blocks the event loop; one hand-off per durable
write, two per step.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import glob
import os
import queue
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .._errors import (
    CorruptLogError,
    Problem,
    RunActiveError,
    RunExistsError,
    RunNotFoundError,
    SchemaVersionError,
    StoreError,
)
from .._ids import check_run_id
from .._records import (
    Intent,
    ModelCallResult,
    Record,
    RecordError,
    Resolution,
    RunFinished,
    RunStarted,
    StepCompleted,
    UnknownSchemaError,
    decode,
    encode,
    paused_gc,
)


@dataclass(slots=True)
class ParsedLog:
    """What a JSONL log file holds, read without judging the run.

    `records` and `lines` (1-based line numbers) are parallel. `torn_line` is
    the first line of a torn tail (None if there is none) and `torn_offset`
    its byte offset. `problems` lists mid-file corruption; `schema_version`
    is set when the log's major version is unknown.
    """

    records: list[Record] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    torn_line: int | None = None
    torn_offset: int | None = None
    problems: list[Problem] = field(default_factory=list)
    schema_version: object = None
    ends_without_newline: bool = False

    def locate(self, problem: Problem) -> Problem:
        """`problem` (found in `records`, e.g. by the classifier) with its line number."""
        if problem.line is None and problem.index is not None and problem.index < len(self.lines):
            return Problem(problem.message, index=problem.index, line=self.lines[problem.index])
        return problem


def parse_log(data: bytes) -> ParsedLog:
    """Split a log into records, a torn tail and corruption (SPEC §6).

    The first line that does not decode ends the log; a decodable line after
    it is corruption. Blank lines are skipped. A line that decodes as JSON
    but is not a valid record is corruption wherever it stands.
    """
    with paused_gc():
        return _parse_log(data)


def _parse_log(data: bytes) -> ParsedLog:
    out = ParsedLog()
    loads = orjson.loads
    JSONDecodeError = orjson.JSONDecodeError
    records, numbers, problems = out.records, out.lines, out.problems
    lines = data.split(b"\n")
    first_bad: int | None = None  # index into lines
    for index, line in enumerate(lines):
        try:
            obj = loads(line)
        except JSONDecodeError:
            if first_bad is None and line.strip():  # blank lines are skipped
                first_bad = index
            continue
        if first_bad is not None:
            problems.append(
                Problem(f"line {first_bad + 1} does not decode but a later line does", line=index + 1)
            )
            continue
        try:
            record = decode(obj)
        except UnknownSchemaError as exc:
            out.schema_version = exc.version
            problems.append(Problem(str(exc), line=index + 1))
            continue
        except RecordError as exc:
            problems.append(Problem(str(exc), line=index + 1))
            continue
        records.append(record)
        numbers.append(index + 1)
    # Only the last piece of the split lacks a newline after it.
    out.ends_without_newline = bool(numbers) and numbers[-1] == len(lines)
    if first_bad is not None and not problems:
        out.torn_line = first_bad + 1
        out.torn_offset = sum(map(len, lines[:first_bad])) + first_bad
        out.ends_without_newline = False
    return out


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte (the replaceable "write these bytes" point of fault injection)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class _Job:
    __slots__ = ("fn", "fut", "loop", "landed", "waiter")

    def __init__(self, fn: Callable[[], Any], loop: asyncio.AbstractEventLoop) -> None:
        self.fn = fn
        self.loop = loop
        self.fut: asyncio.Future[Any] = loop.create_future()
        self.landed = False
        self.waiter: asyncio.Future[None] | None = None


class _DiskWorkers:
    """Dedicated threads that run blocking disk work handed over from event loops.

    Cheaper than `asyncio.to_thread` per hand-off (no executor bookkeeping),
    and several threads let concurrent runs fsync in parallel so the file
    system can commit them together. The task awaits the job's future
    directly (no `asyncio.shield`, which costs a loop iteration per
    hand-off); a cancelled task still waits for its write to land.
    """

    def __init__(self, max_threads: int = 16) -> None:
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._max = max_threads
        self._threads = 0
        self._idle = 0
        self._lock = threading.Lock()

    async def run(self, fn: Callable[[], Any]) -> Any:
        job = _Job(fn, asyncio.get_running_loop())
        with self._lock:
            if self._idle == 0 and self._threads < self._max:
                self._threads += 1
                self._idle += 1
                threading.Thread(target=self._work, name="polyloop-disk", daemon=True).start()
        self._queue.put(job)
        try:
            return await job.fut
        except asyncio.CancelledError:
            # The cancellation stopped the wait, not the write: let it land
            # whole before the caller unwinds (and perhaps releases the
            # run's lock to another process), then re-raise.
            while not job.landed:
                if job.waiter is None:
                    job.waiter = job.loop.create_future()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(job.waiter)
            raise

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            with self._lock:
                self._idle -= 1
            try:
                value, exc = job.fn(), None
            except BaseException as e:  # handed to the awaiting task
                value, exc = None, e
            with self._lock:  # idle again before the task resumes and hands over more
                self._idle += 1
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                job.loop.call_soon_threadsafe(_settle, job, value, exc)


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


_workers = _DiskWorkers()


class JsonlStore:
    """Run logs as `<directory>/<run_id>.jsonl`, one JSON record per line.

    The embedded default store. Safe for many concurrent runs in one event
    loop and for several processes sharing a directory: a run's log is
    created atomically and exclusively, and `lock` keeps each run to one live
    holder with an OS lock (`flock`) that the kernel releases when the holder
    dies.

    Known gap: prefix durability (a crash of the machine keeps a prefix of
    each file's appends) is what the file system gives append-only files; it
    cannot be tested without pulling the power.

    Args:
        directory: where the logs live; created when the first run starts.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._prefix = os.path.join(os.fspath(self.directory), "")
        # Internal seams for fault-injection tests; not part of any public API.
        self._write: Callable[[int, bytes], None] = _write_all
        self._fsync: Callable[[int], None] = os.fsync
        # The inode each run's log had when this store created or locked it,
        # so a file replaced under a live run stops the run instead of
        # receiving its records.
        self._inodes: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"JsonlStore({str(self.directory)!r})"

    def path(self, run_id: str) -> Path:
        """The log file of `run_id` (raises `InvalidRunIdError` for unsafe ids)."""
        return self.directory / f"{check_run_id(run_id)}.jsonl"

    def _file(self, run_id: str) -> str:
        # `path` as a plain string: pathlib's join costs more than a step's appends.
        return f"{self._prefix}{check_run_id(run_id)}.jsonl"

    def _lock_path(self, run_id: str) -> Path:
        return self.directory / f".{check_run_id(run_id)}.lock"

    # -- writes ---------------------------------------------------------------

    async def write_run_started(self, record: RunStarted) -> None:
        path = self.path(record.run_id)
        await _workers.run(lambda: self._create(path, encode(record), record.run_id))

    async def write_intent(self, run_id: str, record: Intent) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_model_call_result(self, run_id: str, record: ModelCallResult) -> None:
        self._append(self._file(run_id), encode(record), run_id)

    async def write_step_completed(self, run_id: str, record: StepCompleted) -> None:
        self._append(self._file(run_id), encode(record), run_id)

    async def write_run_finished(self, run_id: str, record: RunFinished) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_resolution(self, run_id: str, record: Resolution) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_guard_check(self, run_id: str, record: Any) -> None:
        await self._append_durable(run_id, encode(record))

    async def write_action_result(self, run_id: str, record: Any) -> None:
        self._append(self._file(run_id), encode(record), run_id)

    async def _append_durable(self, run_id: str, data: bytes) -> None:
        # The append is one write(2) to the page cache, done here like the
        # appends that need no fsync; only the fsync (the disk wait) and the
        # close go to a disk thread. Fewer GIL round trips on that thread
        # keep many concurrent runs from queueing behind each other.
        path = self._file(run_id)
        fd, size = self._open(path, run_id)
        handed_over = False

        def sync_and_close() -> None:
            nonlocal handed_over
            handed_over = True
            try:
                self._sync(fd, size, path, run_id)
            finally:
                os.close(fd)

        try:
            self._write_or_undo(fd, size, data, path, run_id)
            await _workers.run(sync_and_close)
        finally:
            if not handed_over:  # the write failed, or no disk thread took the job
                os.close(fd)

    def _append(self, path: str, data: bytes, run_id: str, *, sync: bool = False) -> None:
        # One whole append in the calling thread: the writes that need no
        # fsync use it inline; `sync=True` (the durable append without the
        # hand-off) is what benchmarks/steps.py places elsewhere to compare.
        fd, size = self._open(path, run_id)
        try:
            self._write_or_undo(fd, size, data, path, run_id)
            if sync:
                self._sync(fd, size, path, run_id)
        finally:
            os.close(fd)

    def _open(self, path: str, run_id: str) -> tuple[int, int]:
        """Open the log for one append; return the descriptor and the size before it."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError:
            raise StoreError(f"log of run {run_id!r} is gone: {path} no longer exists", run_id=run_id) from None
        except OSError as exc:
            raise StoreError(f"cannot open {path}: {exc.strerror}", run_id=run_id) from exc
        try:
            stat = os.fstat(fd)
            expected = self._inodes.get(run_id)
            if expected is not None and stat.st_ino != expected:
                raise StoreError(
                    f"log of run {run_id!r} was replaced under the run: {path} is another file now",
                    run_id=run_id,
                )
        except BaseException:
            os.close(fd)
            raise
        return fd, stat.st_size

    def _write_or_undo(self, fd: int, size: int, data: bytes, path: str, run_id: str) -> None:
        try:
            self._write(fd, data)
        except OSError as exc:
            self._undo(fd, size)
            raise StoreError(f"cannot write to {path}: {exc.strerror or exc}", run_id=run_id) from exc

    def _sync(self, fd: int, size: int, path: str, run_id: str) -> None:
        try:
            self._fsync(fd)
        except OSError as exc:
            self._undo(fd, size)
            raise StoreError(f"cannot write to {path}: {exc.strerror or exc}", run_id=run_id) from exc

    @staticmethod
    def _undo(fd: int, size: int) -> None:
        # Take a partial or unsynced append back so the log keeps a clean
        # end; if even that fails, readers drop it as a torn tail.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)

    def _create(self, path: Path, data: bytes, run_id: str) -> None:
        # Write the first record to a private file, make it durable, then
        # publish it with link(2): like O_CREAT|O_EXCL it fails if the log
        # exists, and a crash at any point leaves no log or a complete one.
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._sweep_stale_creations(run_id)
            tmp = self.directory / f".{run_id}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot create a log in {self.directory}: {exc.strerror}", run_id=run_id) from exc
        try:
            try:
                self._write(fd, data)
                self._fsync(fd)
                inode = os.fstat(fd).st_ino
            finally:
                os.close(fd)
            os.link(tmp, path)
            self._inodes[run_id] = inode
        except FileExistsError:
            raise RunExistsError(run_id) from None
        except OSError as exc:
            raise StoreError(f"cannot create {path}: {exc.strerror or exc}", run_id=run_id) from exc
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self._fsync_directory(run_id)

    def _sweep_stale_creations(self, run_id: str) -> None:
        # A crash during creation leaves `.<run_id>.<pid>.<rand>.tmp`; remove
        # those whose creator is dead (a live one may be mid-creation).
        pattern = re.compile(rf"\.{re.escape(run_id)}\.(\d+)\.[0-9a-f]{{8}}\.tmp")
        for leftover in self.directory.glob(f".{glob.escape(run_id)}.*.tmp"):
            match = pattern.fullmatch(leftover.name)
            if match and not _alive(int(match.group(1))):
                with contextlib.suppress(OSError):
                    leftover.unlink()

    def _fsync_directory(self, run_id: str) -> None:
        try:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                self._fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreError(f"cannot sync {self.directory}: {exc.strerror}", run_id=run_id) from exc

    # -- reads ----------------------------------------------------------------

    def _read_bytes(self, run_id: str) -> bytes:
        path = self.path(run_id)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise RunNotFoundError(run_id, str(self.directory)) from None
        except IsADirectoryError:
            raise StoreError(f"{path} is a directory, not a log", run_id=run_id) from None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror}", run_id=run_id) from exc

    async def read_log(self, run_id: str) -> list[Record]:
        """Every record of the run in order, without a torn tail.

        Raises:
            InvalidRunIdError: the run id is not a safe file name.
            RunNotFoundError: there is no log for the run id.
            CorruptLogError: a line in the middle does not decode, or a line
                is not a valid record (`SchemaVersionError` for an unknown
                major version).
            StoreError: the file cannot be read.
        """
        data = await asyncio.to_thread(self._read_bytes, run_id)
        return _records_or_raise(run_id, parse_log(data))

    async def read_parsed(self, run_id: str) -> ParsedLog:
        """The log with its line numbers and torn tail, without judging it."""
        return parse_log(await asyncio.to_thread(self._read_bytes, run_id))

    def exists(self, run_id: str) -> bool:
        """Whether a log exists for the run id."""
        return self.path(run_id).exists()

    # -- the run lock -----------------------------------------------------------

    def holder(self, run_id: str) -> str | None:
        """Who holds the run right now (e.g. `pid 41 on host`), or None if nobody does.

        Probes the OS lock without taking it for longer than the probe and
        without touching the log.
        """
        try:
            fd = os.open(self._lock_path(run_id), os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _describe_holder(fd) or "another process"
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    @contextlib.asynccontextmanager
    async def lock(self, run_id: str) -> AsyncIterator[None]:
        """Hold the run for this task until the block exits.

        The hold is an exclusive `flock` on `<directory>/.<run_id>.lock`,
        released by the kernel if the process dies. On entry, a torn tail
        left by a crash is cut off so that new records start on a fresh line
        (the torn write was never acknowledged).

        Raises:
            RunActiveError: another process or task holds the run.
            StoreError: the lock file cannot be created.
        """
        path = self._lock_path(run_id)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot create the lock {path}: {exc.strerror}", run_id=run_id) from exc
        try:
            await _take(fd, run_id)
        except BaseException:
            os.close(fd)
            raise
        try:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
            await asyncio.to_thread(self._seal_tail, run_id)
            with contextlib.suppress(OSError):
                self._inodes[run_id] = self.path(run_id).stat().st_ino
            yield
        finally:
            self._inodes.pop(run_id, None)
            # Clear the holder's name while still holding, then let go.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)

    def _seal_tail(self, run_id: str) -> None:
        path = self.path(run_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror}", run_id=run_id) from exc
        if not data:
            return
        parsed = parse_log(data)
        if parsed.problems:
            return  # corruption is refused by the reader, never repaired
        try:
            if parsed.torn_offset is not None:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.ftruncate(fd, parsed.torn_offset)
                    self._fsync(fd)
                finally:
                    os.close(fd)
            elif parsed.ends_without_newline:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                try:
                    self._write(fd, b"\n")
                    self._fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            raise StoreError(f"cannot prepare {path} for appending: {exc.strerror}", run_id=run_id) from exc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe_holder(fd: int) -> str | None:
    with contextlib.suppress(OSError):
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
        return text or None
    return None


async def _take(fd: int, run_id: str) -> None:
    """Take the run's flock, or raise `RunActiveError` naming the live holder."""
    # A holder writes its name just after taking the lock and clears it just
    # before letting go: while the lock is held but unnamed (a simultaneous
    # start, or a holder finishing), look again for a moment rather than
    # answer "another process" or refuse a run that is about to be free.
    name = None
    for _ in range(20):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            name = _describe_holder(fd)
            if name:
                break
        await asyncio.sleep(0.005)
    raise RunActiveError(run_id, name)


def _records_or_raise(run_id: str, parsed: ParsedLog) -> list[Record]:
    if parsed.schema_version is not None:
        raise SchemaVersionError(run_id, parsed.schema_version)
    if parsed.problems:
        raise CorruptLogError(run_id, parsed.problems)
    return parsed.records

