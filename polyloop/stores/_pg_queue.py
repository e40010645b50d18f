"""The run queue of `PostgresStore`: submitting, listing and requeueing runs.

A mixin of `PostgresStore` (polyloop/stores/_postgres.py), which owns the
connections it uses (declared below). Running the queue (workers, `submit`)
is `polyloop/_fleet/queue.py`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg.rows import dict_row

from .._log.errors import RunExistsError, RunNotFoundError
from .._log.ids import check_run_id


class Queue:
    """The queue's rows (a mixin of `PostgresStore`)."""

    where: str
    _conn: Callable[..., Any]

    async def queue(self) -> list[dict[str, Any]]:
        """Every run the database knows with its queue status, lease and note, oldest first.

        `status` is `queued` (claimable once no live lease holds it),
        `parked` (needs an operator), `failed` (see `note`), `finished`, or
        `direct` (started outside the queue; workers leave it alone).
        """
        return await self._queue_rows("", ())

    async def _queue_rows(self, where: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        async with self._conn() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                "SELECT run_id, status, epoch, next_seq AS records, target, goal, note, "
                "CASE WHEN lease_until > clock_timestamp() THEN holder END AS holder "
                f"FROM polyloop_runs {where} ORDER BY created_at, run_id",
                params,
            )
            return list(await cur.fetchall())

    async def queue_row(self, run_id: str) -> dict[str, Any]:
        """One run's entry of `queue()`.

        Raises:
            RunNotFoundError: the database does not know the run id.
        """
        for row in await self._queue_rows("WHERE run_id = %s", (check_run_id(run_id),)):
            return row
        raise RunNotFoundError(run_id, self.where)

    async def enqueue(self, run_id: str, *, target: str, goal: str) -> None:
        """Queue a new run of `target` towards `goal` (see `polyloop.stores.submit`).

        Raises:
            RunExistsError: the run id is already known to the database.
        """
        async with self._conn(run_id) as conn:
            cur = await conn.execute(
                "INSERT INTO polyloop_runs (run_id, status, target, goal, submitted_at) "
                "VALUES (%s, 'queued', %s, %s, clock_timestamp()) ON CONFLICT (run_id) DO NOTHING",
                (check_run_id(run_id), target, goal),
            )
            if cur.rowcount != 1:
                cur = await conn.execute(
                    "SELECT status, next_seq FROM polyloop_runs WHERE run_id = %s", (run_id,)
                )
                known = await cur.fetchone()
                if known is not None and not known[1] and known[0] in ("queued", "failed"):
                    why = f"it is already in the queue ({known[0]}, not started): give the new run another --run-id"
                    raise RunExistsError(run_id, why=why)
                # Not "continue it with `polyloop resume`": submit queues new runs, and that
                # command would lack this store's --store.
                status = f" ({known[0]})" if known is not None and known[0] else ""
                why = f"the store already knows it{status}: give the new run another --run-id"
                raise RunExistsError(run_id, why=why)

    async def requeue(self, run_id: str) -> None:
        """Make a `failed` (or `parked`) run claimable again, once its cause is fixed.

        A parked run becomes claimable by itself when a resolution is written;
        requeue it only to let a worker hit the same stop again.

        Raises:
            RunNotFoundError: the database does not know the run as failed or parked.
        """
        async with self._conn(run_id) as conn:
            cur = await conn.execute(
                "UPDATE polyloop_runs SET status = 'queued', note = NULL, "
                "submitted_at = COALESCE(submitted_at, clock_timestamp()) "
                "WHERE run_id = %s AND status IN ('failed', 'parked') AND target IS NOT NULL",
                (check_run_id(run_id),),
            )
            if cur.rowcount != 1:
                raise RunNotFoundError(run_id, f"the failed or parked runs of {self.where}")

    async def queued(self) -> int:
        """How many runs are queued: claimable now, or held by a lease (live, or a dead worker's not lapsed yet).

        A run stays `queued` while a worker runs it, so this is what a worker
        that stops once the queue is idle waits for. Parked, failed,
        finished and direct runs do not count.
        """
        async with self._conn() as conn:
            cur = await conn.execute("SELECT count(*) FROM polyloop_runs WHERE status = 'queued'")
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def claimable(self, limit: int) -> list[str]:
        """Up to `limit` queued runs no live lease holds, oldest submission first."""
        async with self._conn() as conn:
            cur = await conn.execute(
                "SELECT run_id FROM polyloop_runs WHERE status = 'queued' "
                "AND (holder IS NULL OR lease_until <= clock_timestamp()) "
                "ORDER BY submitted_at LIMIT %s",
                (limit,),
            )
            return [row[0] for row in await cur.fetchall()]
