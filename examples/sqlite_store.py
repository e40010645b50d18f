"""A run-log store on SQLite (standard library only): bring your own storage.

PolyLoop's storage port, `polyloop.Store`, is six async writes (one per
record kind, plus `write_resolution`) and `read_log`. A downstream project
that keeps its state in a database implements those, then proves its store
with the contract kit that ships in the package::

    # tests/test_my_store.py
    import pytest
    from polyloop.testing import StoreContract

    class TestSqliteStore(StoreContract):
        @pytest.fixture
        def store_factory(self, tmp_path):
            return lambda: SqliteStore(tmp_path / "runs.db")

The kit runs every record kind through a round trip, checks exclusive
creation and run isolation, and — unlike API round-trip suites — stops
runs mid-way and resumes them, and checks that unknown actions follow
their replay policy. `polyloop.testing.check_store(factory)` does the same
without pytest.

Use the store by passing it to a run::

    store = SqliteStore("runs.db")
    result = await agent.run("tidy the inbox", run_id="inbox-1", store=store)
    store.close()

How this store keeps the port's promises:

* Ordering: each record is a row `(run_id, seq)`; `read_log` returns rows
  by `seq`. A record is one row, written in one transaction, so a crash
  never leaves half a record (there is no torn tail to handle).
* Durability: the database is in WAL mode. `run_started`, intents,
  `run_finished` and resolutions commit with `PRAGMA synchronous=FULL` (the
  WAL is fsync'd before the commit returns); model call results and step
  records commit with `synchronous=NORMAL` (no fsync). The WAL is one
  append-only file, so the next FULL commit makes the earlier NORMAL ones
  durable too: the same prefix durability the JSONL store relies on.
* Exclusive creation: `run_started` is row `seq = 0` under a primary key, so
  the second creator gets `RunExistsError`.
* Off the event loop: every database call runs on one worker thread owned by
  the store (SQLite connections belong to one thread), so a slow fsync never
  blocks other runs. A cancelled write still finishes whole before the
  caller unwinds.
* One live holder per run: `lock(run_id)` takes an OS `flock` on
  `<db>.locks/<run_id>.lock`, released by the kernel when the holder dies.
  Like SQLite itself, this assumes one machine (a local file system).

What it lacks: the optional `polyloop.ArtifactStore` capability (log format
1.2), which keeps intermediate products (`ctx.artifacts`). With this store a
tool's `ctx.artifacts.write` raises `StoreError` (the tool's error
observation); the contract kit's `products_round_trip` passes by skipping.
Adding it is a `products(run_id, name, data BLOB)` table written in one
transaction per product (`put_product`, `get_product`) and `write_artifact`
appending the record like a result.

Nothing here promises that a record and the side effect it describes happen
together — no store can; that is why intents exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
import sqlite3
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson

from polyloop import (
    CorruptLogError,
    Intent,
    ModelCallResult,
    Problem,
    Record,
    Resolution,
    RunActiveError,
    RunExistsError,
    RunFinished,
    RunNotFoundError,
    RunStarted,
    SchemaVersionError,
    StepCompleted,
    StoreError,
    RecordError,
    check_run_id,
    decode_record,
    encode_record,
)

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS polyloop_records (
    run_id TEXT    NOT NULL,
    seq    INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    body   BLOB    NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID
"""


def encode(record: Record) -> bytes:
    """One record as the JSON object the JSONL store would write (`record` key first)."""
    return encode_record(record).rstrip(b"\n")


class SqliteStore:
    """Run logs in one SQLite database file, one row per record.

    Args:
        path: the database file; created (with its directory) on first use.
        lock_dir: where the per-run lock files live; default `<path>.locks`.
    """

    def __init__(self, path: str | os.PathLike[str], *, lock_dir: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path)
        self.lock_dir = Path(lock_dir) if lock_dir is not None else self.path.with_name(self.path.name + ".locks")
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="polyloop-sqlite")
        self._conn: sqlite3.Connection | None = None  # opened and used on the worker thread only

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    def close(self) -> None:
        """Close the database and stop the worker thread. The store is unusable afterwards."""
        with contextlib.suppress(RuntimeError):  # already shut down
            self._worker.submit(self._close_db).result()
        self._worker.shutdown(wait=True)

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the worker thread ------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        fut = asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            # The write may already be committing: let it land whole first.
            with contextlib.suppress(BaseException):
                await fut
            raise

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: no implicit transactions; we BEGIN and COMMIT ourselves.
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=True)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(SCHEMA)
            _fsync_directory(self.path.parent)  # the new database (and its WAL) survive a power cut
            self._conn = conn
        return self._conn

    def _close_db(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _create(self, run_id: str, body: bytes) -> None:
        db = self._db()
        db.execute("PRAGMA synchronous=FULL")
        try:
            db.execute(
                "INSERT INTO polyloop_records (run_id, seq, kind, body) VALUES (?, 0, 'run_started', ?)",
                (run_id, body),
            )
        except sqlite3.IntegrityError:
            raise RunExistsError(run_id) from None

    def _append(self, run_id: str, kind: str, body: bytes, durable: bool) -> None:
        db = self._db()
        # synchronous cannot change inside a transaction, so set it first.
        db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        db.execute("BEGIN IMMEDIATE")
        try:
            (last,) = db.execute(
                "SELECT max(seq) FROM polyloop_records WHERE run_id = ?", (run_id,)
            ).fetchone()
            if last is None:
                raise StoreError(f"run {run_id!r} has no log in {self.path}", run_id=run_id)
            db.execute(
                "INSERT INTO polyloop_records (run_id, seq, kind, body) VALUES (?, ?, ?, ?)",
                (run_id, last + 1, kind, body),
            )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _rows(self, run_id: str) -> list[tuple[int, bytes]]:
        return self._db().execute(
            "SELECT seq, body FROM polyloop_records WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()

    async def _write(self, run_id: str, record: Record, *, durable: bool) -> None:
        check_run_id(run_id)
        try:
            await self._run(self._append, run_id, record.TAG, encode(record), durable)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to {self.path}: {exc}", run_id=run_id) from exc

    # -- the Store protocol -----------------------------------------------------

    async def write_run_started(self, record: RunStarted) -> None:
        """Create the run's log with its first record; `RunExistsError` if it exists. Durable."""
        run_id = check_run_id(record.run_id)
        try:
            await self._run(self._create, run_id, encode(record))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to {self.path}: {exc}", run_id=run_id) from exc

    async def write_intent(self, run_id: str, record: Intent) -> None:
        """Append an intent. Durable before it returns."""
        await self._write(run_id, record, durable=True)

    async def write_model_call_result(self, run_id: str, record: ModelCallResult) -> None:
        """Append a model call result; durable with the run's next durable write."""
        await self._write(run_id, record, durable=False)

    async def write_step_completed(self, run_id: str, record: StepCompleted) -> None:
        """Append a step record; durable with the run's next durable write."""
        await self._write(run_id, record, durable=False)

    async def write_run_finished(self, run_id: str, record: RunFinished) -> None:
        """Append the end marker. Durable before it returns."""
        await self._write(run_id, record, durable=True)

    async def write_resolution(self, run_id: str, record: Resolution) -> None:
        """Append an operator's resolution. Durable before it returns."""
        await self._write(run_id, record, durable=True)

    async def write_approval_request(self, run_id: str, record: Record) -> None:
        """Append that a tool call waits for a person (log format 1.2). Durable before it returns."""
        await self._write(run_id, record, durable=True)

    async def write_decision(self, run_id: str, record: Record) -> None:
        """Append a person's approval, denial or answer (log format 1.2). Durable before it returns."""
        await self._write(run_id, record, durable=True)

    async def write_checkpoint_accepted(self, run_id: str, record: Record) -> None:
        """Append accepted checkpoint changes (log format 1.2). Durable before it returns."""
        await self._write(run_id, record, durable=True)

    async def write_resumed(self, run_id: str, record: Record) -> None:
        """Append the mark of a resume (log format 1.2). Durable before it returns."""
        await self._write(run_id, record, durable=True)

    async def write_crash_loop_accepted(self, run_id: str, record: Record) -> None:
        """Append a lifted crash loop (log format 1.2). Durable before it returns."""
        await self._write(run_id, record, durable=True)

    async def read_log(self, run_id: str) -> list[Record]:
        """Every record of the run, in write order.

        Raises:
            RunNotFoundError: the run has no log here.
            CorruptLogError: a row is not a valid record (`SchemaVersionError`
                for an unknown major version).
            StoreError: the database cannot be read.
        """
        check_run_id(run_id)
        try:
            rows = await self._run(self._rows, run_id)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read {self.path}: {exc}", run_id=run_id) from exc
        if not rows:
            raise RunNotFoundError(run_id, str(self.path))
        records: list[Record] = []
        problems: list[Problem] = []
        for index, (_seq, body) in enumerate(rows):
            try:
                records.append(decode_record(orjson.loads(body)))
            except SchemaVersionError as exc:  # an unknown major version: the whole log
                raise SchemaVersionError(run_id, exc.version) from None
            except RecordError as exc:
                problems.append(Problem(str(exc), index=index))
            except orjson.JSONDecodeError as exc:
                problems.append(Problem(f"not JSON: {exc}", index=index))
        if problems:
            raise CorruptLogError(run_id, problems)
        return records

    # -- one live holder per run ------------------------------------------------

    def _lock_path(self, run_id: str) -> Path:
        return self.lock_dir / f"{check_run_id(run_id)}.lock"

    def holder(self, run_id: str) -> str | None:
        """Who holds the run now (`pid N on HOST`), or None; used by `inspect`."""
        try:
            fd = os.open(self._lock_path(run_id), os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    @contextlib.asynccontextmanager
    async def lock(self, run_id: str) -> AsyncIterator[None]:
        """Hold the run for the life of the block; a second holder gets `RunActiveError`.

        Raises:
            RunActiveError: another process or task holds the run.
            StoreError: the lock file cannot be created.
        """
        path = self._lock_path(run_id)
        try:
            self.lock_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot create the lock {path}: {exc.strerror}", run_id=run_id) from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                who = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or None
                raise RunActiveError(run_id, who) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def _demo(path: Path) -> None:
    from demo import agent  # the demo agent, next to this file

    from polyloop import inspect_run, new_run_id

    with SqliteStore(path) as store:
        run_id = new_run_id()
        result = await agent.run("write up the notes, into SQLite this time", run_id=run_id, store=store)
        report = await inspect_run(store, run_id)
        print(f"run {run_id}: {result.reason} after {result.steps} steps: {result.text}")
        print(f"  {len(report.records)} records in {path} (table polyloop_records), status {report.status}")
        print(f'  look: sqlite3 {path} "SELECT seq, kind FROM polyloop_records WHERE run_id = \'{run_id}\'"')


if __name__ == "__main__":
    import sys

    asyncio.run(_demo(Path(sys.argv[1] if len(sys.argv) > 1 else "runs.db")))
