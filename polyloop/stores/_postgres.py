"""`PostgresStore`: run logs in PostgreSQL, shared by many machines, with fenced leases.

One row per record in `polyloop_records` (the record's JSON exactly as the
JSONL store writes it, plus indexed columns), one row per run in
`polyloop_runs` (the lease, the epoch, the next sequence number, the queue
status). Every append is one statement (polyloop/stores/_pg_append.py) that
checks the expected sequence number, the writer's epoch and the lease's
expiry and inserts, in one transaction: two writers can never interleave
records of one run. Claiming leases is in `_pg_claims.py`, the queue's rows in
`_pg_queue.py` (mixins of the store). docs/reference/stores.md is the reference.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg

from .._log.errors import CorruptLogError, Problem, RunActiveError, RunExistsError, RunNotFoundError, SchemaVersionError, StoreError
from .._log.ids import check_run_id
from .._log.records import Decision, Record, RunStarted, encode
from .._log.store_port import EVERY_WRITE, Capabilities
from .._log.codec import ParsedLog, parse_log
from ._pg_append import append
from ._pg_claims import Claims
from ._pg_conn import Connections, first_line, session_options
from ._lockfile import dead_here, holder_name
from ._pg_lease import Lease, LeaseClock, LeaseLostError, public_signature
from ._pg_ops import Operations
from ._pg_products import DEFAULT_QUOTA, Products
from ._pg_transfer import Transfers
from ._pg_queue import Queue
from ._pg_read import READ_MANY, READ_ONE, numbered_right, numbering_problems
from ._pg_schema import ensure_schema
from ._writes import RecordWrites


class PostgresStore(RecordWrites, Claims, Queue, Operations, Products, Transfers):
    """Run logs in a PostgreSQL database that many machines share.

    Implements the storage port (`polyloop.Store`) with the JSONL store's
    guarantees: a run's records read back in write order; a durable write
    (`polyloop._log.records.DURABLE`) is committed synchronously before it
    returns; the others (results, step records) become durable with the
    run's next durable write; a record is one row, so a torn or partial
    record cannot exist.

    While this store holds a run (a lease), its results and step records
    are not sent on their own: they travel in the statement of the run's
    next durable write, or, if the run waits on something else first (a
    tool, a guard, a backoff), go on their own (asynchronous commit) as
    soon as it yields; always before the lease is released or the holder
    reads the log. A worker that dies can lose what it had not sent: the
    records since the run's last durable write, the same ones a crash of the
    server can lose, and recovery treats them alike. What the
    server's own settings can weaken (`fsync = off`, ...) is listed in
    docs/reference/stores.md.

    `lock(run_id)` takes a lease instead of an OS lock: it lapses when its
    holder stops renewing it, and every write of the holder carries the
    lease's epoch, which the database checks in the statement that inserts.
    A lease whose holder is a process of this host that no longer exists
    (its name is `pid N on HOST` and pid N is gone) is taken over at once,
    not when it lapses: a `polyloop run` killed a moment ago is resumed
    without waiting out its lease.

    Use one store per event loop, and close it with `aclose()` or
    `async with PostgresStore(url) as store:`; connections a caller forgets
    are closed when the event loop shuts down.

    Args:
        url: a libpq URL, e.g. `postgresql://user@host:5432/dbname`.
        lease: seconds a lease lasts without renewal; renewed every third.
        create: create (or migrate) the schema when missing; with False a
            missing schema is a `StoreError`.
        max_connections: the most connections this store opens at once.
        connect_timeout: seconds before an unreachable server is reported.
        name: how this process appears as a holder (default `pid N on HOST`).
        product_quota: the most bytes a run's products (`ctx.artifacts`)
            may hold together (default 1 GiB); None for no limit. A product
            that would exceed it is refused with `StoreError`, nothing written.

    Not guaranteed: atomicity between a record and the side effect it
    describes (that is what intents are for), or anything across runs.
    """

    capabilities = Capabilities(
        writes=EVERY_WRITE, batching=True, locking=True, probing=True, holding=True, parsing=True,
        reads_many=True, cancelling=True, batches=True, exporting=True, artifacts=True, fencing=True,
    )

    def __init__(
        self,
        url: str,
        *,
        lease: float = 15.0,
        create: bool = True,
        max_connections: int = 8,
        connect_timeout: float = 5.0,
        name: str | None = None,
        product_quota: int | None = DEFAULT_QUOTA,
        _clock: LeaseClock | None = None,
    ) -> None:
        if lease <= 0:
            raise ValueError("lease must be positive")
        self.url = url
        self.lease = float(lease)
        self.name = name or holder_name()
        self.product_quota = product_quota
        # A statement that outlives the lease is worthless to its writer, and
        # a lock wait of a third of it still leaves time to renew.
        lease_ms = max(1000, int(self.lease * 1000))
        settings = session_options(
            statement_ms=lease_ms, lock_ms=max(500, lease_ms // 3), idle_in_transaction_ms=lease_ms
        )
        self._conns = Connections(url, settings=settings, max_size=max_connections, connect_timeout=connect_timeout)
        self._create = create
        self._ready = False
        self._next: dict[str, int] = {}
        self._leases: dict[str, Lease] = {}
        self._clock = _clock if _clock is not None else LeaseClock()  # the holder's time (a test seam)
        self._strays: set[asyncio.Task[None]] = set()  # renewals left to unwind after a loss
        self._cancel_seen: dict[str, tuple[float, Any]] = {}  # run -> (when looked, request): _pg_ops.py

    def __repr__(self) -> str:
        return f"PostgresStore({self._conns.where!r})"

    @property
    def where(self) -> str:
        """`user@host:port/dbname`, without the password (for messages)."""
        return self._conns.where

    async def __aenter__(self) -> PostgresStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the store's connections. A lease still held lapses by itself."""
        await self._conns.aclose()

    @contextlib.asynccontextmanager
    async def _conn(self, run_id: str | None = None) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        conn = await self._acquire()
        ok = False
        try:
            yield conn
            ok = True
        except psycopg.Error as exc:
            raise self._failed(exc, run_id) from exc
        finally:
            await self._conns.release(conn, ok=ok)

    async def _acquire(self) -> psycopg.AsyncConnection[Any]:
        if not self._ready:
            async with self._conns.connection() as conn:
                await ensure_schema(conn, create=self._create, where=self.where)
            self._ready = True
        return await self._conns.acquire()

    def _failed(self, exc: psycopg.Error, run_id: str | None) -> StoreError:
        return StoreError(f"PostgreSQL at {self.where} failed: {first_line(exc, url=self.url)}", run_id=run_id)

    # -- writes ---------------------------------------------------------------

    # Every `write_*` is `RecordWrites`' (polyloop/stores/_writes.py), over
    # `_append_records`: durable records are committed synchronously before
    # the write returns; the others (asynchronous commit) travel with the
    # run's next durable one. A `resolution` makes a parked queued run
    # claimable again in the append's own statement (`_pg_append.py`), a
    # `decision` in a second one (below).

    async def write_decision(self, run_id: str, record: Decision) -> None:
        """Append a person's decision (log format 1.2); a parked queued run becomes claimable again.

        The requeue is a second statement: should the process die between the
        two, the decision stands and `requeue` makes the run claimable.
        """
        await super().write_decision(run_id, record)
        async with self._conn(run_id) as conn:
            await conn.execute(
                "UPDATE polyloop_runs SET status = 'queued', note = NULL "
                "WHERE run_id = %s AND status = 'parked' AND target IS NOT NULL",
                (run_id,),
            )

    async def _append_records(self, run_id: str, records: Sequence[Record], *, durable: bool) -> None:
        """The one append (polyloop/stores/_writes.py): the records in one statement, fenced by the lease."""
        check_run_id(run_id)
        rows = [(record.TAG, encode(record)[:-1].decode()) for record in records]  # the JSONL lines
        lease = self._leases.get(run_id)
        if lease is None:
            await self._send(run_id, None, rows, durable=durable)
            return
        for record in records:
            lease.before_write(record)
        if not durable:
            # Held: an unsynced record travels with the run's next durable
            # one, in its statement; if the run waits on something else first,
            # it goes on its own as soon as the run yields (`_send_soon`).
            lease.pending += rows
            self._send_soon(lease)
            return
        while lease.sending is not None:  # unsynced records on their way land first
            await asyncio.wait([lease.sending])
            lease.before_write(records[0])  # and if they failed, so does this write
        pending, lease.pending = lease.pending, []
        await self._send(run_id, lease, pending + rows, durable=True)

    def _send_soon(self, lease: Lease) -> None:
        if not lease.send_scheduled:
            lease.send_scheduled = True
            asyncio.get_running_loop().call_soon(self._send_pending, lease)

    def _send_pending(self, lease: Lease) -> None:
        # Runs once the writing task has yielded: if its unsynced records are
        # still here, it is waiting on something other than a durable write.
        lease.send_scheduled = False
        self._start_flush(lease)

    def _start_flush(self, lease: Lease) -> None:
        if lease.pending and lease.sending is None and lease.failure is None and lease.lost is None:
            lease.sending = asyncio.create_task(self._flush(lease), name=f"polyloop-send-{lease.run_id}")

    async def _flush(self, lease: Lease) -> None:
        """Send a held run's unsynced records on their own (asynchronous commit)."""
        try:
            while lease.pending:
                lease.before_write()  # not after the local deadline, nor after a failure
                pending, lease.pending = lease.pending, []
                await self._send(lease.run_id, lease, pending, durable=False)
        except Exception as exc:  # the run's next write raises it (Lease.before_write)
            lease.failure = exc
        finally:
            lease.sending = None

    async def _flushed(self, lease: Lease) -> None:
        """Wait until a held run's unsynced records are in the database (or failed to get there)."""
        self._start_flush(lease)
        if lease.sending is not None:
            await asyncio.wait([lease.sending])

    async def _send(
        self, run_id: str, lease: Lease | None, rows: list[tuple[str, str]], *, durable: bool
    ) -> None:
        """One statement: the fence, then the records (kind, body) at the next sequence numbers."""
        first = rows[0][0]
        epoch: int | None = None
        if lease is not None:
            seq, epoch = lease.next_seq, lease.epoch
        elif first == RunStarted.TAG:
            seq = 0
        else:
            seq = self._next.get(run_id)
            if seq is None:
                seq = await self._count(run_id)
        assert seq is not None
        if first == RunStarted.TAG and seq != 0:
            raise RunExistsError(run_id)
        if seq == 0 and first != RunStarted.TAG:
            raise RunNotFoundError(run_id, self.where)  # a lease on a run with no log yet
        # The hot path of every step: no context-manager layers, one borrowed connection.
        conn = await self._acquire()
        ok = False
        try:
            outcome = await append(self._conns.cursor(conn), run_id, seq, epoch, rows, durable=durable)
            ok = True
        except BaseException as exc:
            # Landed or not, nobody knows: the next write must not guess a number.
            self._next.pop(run_id, None)
            if lease is not None:
                lease.next_seq = None
            if isinstance(exc, psycopg.Error):
                raise self._failed(exc, run_id) from exc
            raise
        finally:
            await self._conns.release(conn, ok=ok)
        if outcome != "ok":
            self._next.pop(run_id, None)
            raise self._refused(run_id, outcome, seq)
        if lease is not None:
            lease.next_seq = seq + len(rows)
            lease.after_write()
        else:
            self._next[run_id] = seq + len(rows)

    def _refused(self, run_id: str, outcome: str, seq: int) -> Exception:
        what, _, detail = outcome.partition(":")
        if what == "missing":
            return RunNotFoundError(run_id, self.where)
        if what == "held":
            return RunActiveError(run_id, detail or None)
        if what == "fenced":
            return LeaseLostError(run_id, f"another worker took the run over at epoch {detail}")
        if what == "expired":
            return LeaseLostError(run_id, "it expired on the database clock")
        if seq == 0:
            return RunExistsError(run_id)
        return StoreError(
            f"run {run_id!r} has {detail} records but this writer expected {seq}: another "
            "writer appended meanwhile; read the log again", run_id=run_id,
        )

    async def _no_log(self, conn: psycopg.AsyncConnection[Any], run_id: str) -> RunNotFoundError:
        """`RunNotFoundError` for a run without records, saying what its queue row (if any) says."""
        cur = await conn.execute("SELECT status, note FROM polyloop_runs WHERE run_id = %s", (run_id,))
        row = await cur.fetchone()
        detail = None
        if row is not None and row[0] == "queued":
            detail = "it is queued and has not started yet (no log): a worker (`polyloop worker`) starts it"
        elif row is not None and row[0] == "failed":
            detail = (
                f"it failed before its first record ({row[1] or 'no reason recorded'}): fix the cause, "
                "then requeue it (`PostgresStore.requeue`)"
            )
        return RunNotFoundError(run_id, self.where, detail=detail)

    async def _count(self, run_id: str) -> int:
        async with self._conn(run_id) as conn:
            cur = await conn.execute("SELECT next_seq FROM polyloop_runs WHERE run_id = %s", (run_id,))
            row = await cur.fetchone()
        if row is None or row[0] == 0:
            raise RunNotFoundError(run_id, self.where)
        return int(row[0])

    # -- reads ----------------------------------------------------------------

    async def _raw(self, run_id: str) -> tuple[bytes, list[Problem]]:
        """The log's lines and the breaches of its numbering (rule 35), in one query."""
        check_run_id(run_id)
        lease = self._leases.get(run_id)
        if lease is not None:  # the holder reads its own unsynced records back
            await self._flushed(lease)
        async with self._conn(run_id) as conn:
            cur = await conn.execute(READ_ONE, {"run": run_id}, prepare=True)
            row = await cur.fetchone()
            if row is None or not row[1]:
                raise await self._no_log(conn, run_id)
            text, count, first, last, next_seq = row
            problems: list[Problem] = []
            if not numbered_right(count, first, last, next_seq):
                problems = await numbering_problems(conn, run_id, count, first, last, next_seq)
        return (text + "\n").encode(), problems

    async def read_log(self, run_id: str) -> list[Record]:
        """Every record of the run in sequence order.

        Raises:
            InvalidRunIdError: the run id is not a safe name.
            RunNotFoundError: the run has no records.
            CorruptLogError: a row is not a valid record (`SchemaVersionError`
                for an unknown major version), exactly as the JSONL store
                reports the same lines.
            StoreError: the database cannot be reached or failed.
        """
        parsed = await self.read_parsed(run_id)
        if parsed.schema_version is not None:
            raise SchemaVersionError(run_id, parsed.schema_version)
        if parsed.problems:
            raise CorruptLogError(run_id, parsed.problems)
        if run_id not in self._leases:
            self._next[run_id] = len(parsed.records)
        return parsed.records

    async def read_parsed(self, run_id: str) -> ParsedLog:
        """The log as the JSONL parser sees it (line N is the record of seq N-1), unjudged.

        Rows not numbered 0 .. n-1, or a run row whose `next_seq` is not n
        (rows deleted or renumbered behind the library's back), are problems
        too (rule 35): the log is corrupt, whatever its records say.
        """
        data, numbering = await self._raw(run_id)
        parsed = parse_log(data)
        parsed.problems += numbering
        return parsed

    async def exists(self, run_id: str) -> bool:
        """Whether the run has a log (at least its `run_started`)."""
        try:
            await self._count(check_run_id(run_id))
        except RunNotFoundError:
            return False
        return True

    async def list_runs(self) -> list[str]:
        """Every run id with a log, oldest first."""
        async with self._conn() as conn:
            cur = await conn.execute(
                "SELECT run_id FROM polyloop_runs WHERE next_seq > 0 ORDER BY created_at, run_id"
            )
            return [row[0] for row in await cur.fetchall()]

    async def live_holders(self) -> dict[str, str]:
        """Who holds a live lease, for every run held right now (one query; `holder` for many runs).

        A holder that is a dead process of this host is left out, as by `holder`.
        """
        async with self._conn() as conn:
            cur = await conn.execute(
                "SELECT run_id, holder FROM polyloop_runs "
                "WHERE holder IS NOT NULL AND lease_until > clock_timestamp()"
            )
            return {row[0]: row[1] for row in await cur.fetchall() if not dead_here(row[1])}

    async def read_parsed_many(self, run_ids: list[str]) -> dict[str, ParsedLog]:
        """`read_parsed` of several runs in one query; a run without records is left out.

        Raises:
            InvalidRunIdError: a run id is not a safe name.
            StoreError: the database cannot be reached or failed.
        """
        for run_id in run_ids:
            check_run_id(run_id)
        logs: dict[str, ParsedLog] = {}
        async with self._conn() as conn:
            cur = await conn.execute(READ_MANY, (list(run_ids),))
            for run_id, text, count, first, last, next_seq in await cur.fetchall():
                parsed = logs[run_id] = parse_log((text + "\n").encode())
                if not numbered_right(count, first, last, next_seq):
                    parsed.problems += await numbering_problems(conn, run_id, count, first, last, next_seq)
        return logs


# The clock seam is private: the public signature is the documented one.
PostgresStore.__signature__ = public_signature(PostgresStore.__init__)  # type: ignore[attr-defined]
