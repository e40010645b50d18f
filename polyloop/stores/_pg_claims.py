"""The leases of `PostgresStore`: claiming a run, renewing and releasing its lease.

A mixin of `PostgresStore` (polyloop/stores/_postgres.py), which owns the
connections and the state it uses (declared below); the lease itself and its
fencing rules are in `_pg_lease.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from psycopg.rows import dict_row

from .._log.errors import RunActiveError
from .._log.ids import check_run_id
from ._lockfile import dead_here
from ._pg_lease import Lease, LeaseClock

_CLAIM = """
INSERT INTO polyloop_runs AS r (run_id, epoch, holder, lease_until)
VALUES (%(run)s, 1, %(holder)s, clock_timestamp() + %(lease)s * interval '1 second')
ON CONFLICT (run_id) DO UPDATE SET
    epoch = r.epoch + 1, holder = EXCLUDED.holder, lease_until = EXCLUDED.lease_until,
    taken_over_from = CASE WHEN r.holder IS NOT NULL THEN r.holder END
WHERE r.holder IS NULL OR r.lease_until <= clock_timestamp() OR r.holder = %(dead)s
RETURNING epoch, next_seq, status, target, goal, taken_over_from
"""

_CLAIM_QUEUED = """
UPDATE polyloop_runs AS r SET
    epoch = r.epoch + 1, holder = %(holder)s,
    lease_until = clock_timestamp() + %(lease)s * interval '1 second',
    taken_over_from = CASE WHEN r.holder IS NOT NULL THEN r.holder END
WHERE r.run_id = %(run)s AND r.status = 'queued'
    AND (r.holder IS NULL OR r.lease_until <= clock_timestamp() OR r.holder = %(dead)s)
RETURNING epoch, next_seq, status, target, goal, taken_over_from
"""

_RENEW = """
UPDATE polyloop_runs SET lease_until = clock_timestamp() + %s * interval '1 second'
WHERE run_id = %s AND epoch = %s AND holder IS NOT NULL AND lease_until > clock_timestamp()
"""

_RELEASE = """
UPDATE polyloop_runs SET holder = NULL, lease_until = NULL,
    status = CASE WHEN %(status)s::text IS NOT NULL AND status = 'queued' THEN %(status)s ELSE status END,
    note = COALESCE(%(note)s, note)
WHERE run_id = %(run)s AND epoch = %(epoch)s
"""

_LIVE_HOLDER = """
SELECT holder FROM polyloop_runs
WHERE run_id = %s AND holder IS NOT NULL AND lease_until > clock_timestamp()
"""


class Claims:
    """Claiming, renewing and releasing leases (a mixin of `PostgresStore`)."""

    name: str
    lease: float
    _clock: LeaseClock
    _conn: Callable[..., Any]
    _leases: dict[str, Lease]

    async def holder(self, run_id: str) -> str | None:
        """Who holds a live lease on the run right now, or None.

        A holder that is a process of this host that no longer exists holds
        nothing any more: the next claim takes the run over at once.
        """
        name = await self._lease_holder(run_id)
        return None if name is None or dead_here(name) else name

    async def _lease_holder(self, run_id: str) -> str | None:
        async with self._conn(run_id) as conn:
            cur = await conn.execute(_LIVE_HOLDER, (check_run_id(run_id),))
            row = await cur.fetchone()
        return row[0] if row else None

    async def claim(self, run_id: str, *, queued_only: bool = False) -> Lease:
        """Take a lease on the run (creating its row if needed); enter it with `async with`.

        Args:
            run_id: the run.
            queued_only: claim only a run submitted to the queue (status `queued`).

        Returns:
            The `Lease`, not yet renewed: enter it at once.

        Raises:
            RunActiveError: another live holder has it (or, with
                `queued_only`, it is not a queued run).
            StoreError: the database failed.
        """
        check_run_id(run_id)
        sent = self._clock.monotonic()
        # A claim cancelled in flight may still commit on the server, and its
        # lease would then stay held until it lapses: the statement is let finish
        # and what it took is given back before the cancellation goes on.
        claiming = asyncio.ensure_future(self._take(run_id, queued_only))
        try:
            row, holder = await asyncio.shield(claiming)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                taken, _ = await claiming
                if taken is not None:
                    await self._release(Lease(self, run_id, taken, sent), None)
            raise
        if row is None:
            raise RunActiveError(run_id, holder or ("nobody: it is not queued" if queued_only else None))
        return Lease(self, run_id, row, sent)

    async def _take(self, run_id: str, queued_only: bool) -> tuple[dict[str, Any] | None, str | None]:
        """The claimed row, or None and the live holder.

        A holder that is a process of this host that no longer exists (a
        `polyloop run` killed a moment ago) is taken over at once rather than
        when its lease lapses: the takeover is fenced like any other.
        """
        row = await self._claim_row(run_id, queued_only, dead=None)
        if row is not None:
            return row, None
        holder = await self._lease_holder(run_id)
        if holder is not None and dead_here(holder):
            row = await self._claim_row(run_id, queued_only, dead=holder)
            if row is not None:
                return row, None
            holder = await self._lease_holder(run_id)
        return None, holder

    async def _claim_row(self, run_id: str, queued_only: bool, *, dead: str | None) -> dict[str, Any] | None:
        params = {"run": run_id, "holder": self.name, "lease": self.lease, "dead": dead}
        async with self._conn(run_id) as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(_CLAIM_QUEUED if queued_only else _CLAIM, params)
            return await cur.fetchone()

    @contextlib.asynccontextmanager
    async def lock(self, run_id: str) -> AsyncIterator[None]:
        """Hold a lease on the run until the block exits (the `LockingStore` capability).

        Raises:
            RunActiveError: another live holder has the run.
            LeaseLostError: the lease ended while held (the block was cancelled).
        """
        lease = await self.claim(run_id)
        async with lease:
            yield

    def lease_epoch(self, run_id: str) -> int | None:
        """The epoch of the lease this store holds on the run now (`FencingStore`), or None."""
        lease = self._leases.get(run_id)
        return None if lease is None else lease.epoch

    async def _renew(self, lease: Lease) -> bool:
        async with self._conn(lease.run_id) as conn:
            cur = await conn.execute(_RENEW, (self.lease, lease.run_id, lease.epoch), prepare=True)
            return cur.rowcount == 1

    async def _release(self, lease: Lease, outcome: tuple[str, str] | None) -> None:
        status, note = outcome if outcome else (None, None)
        params = {"run": lease.run_id, "epoch": lease.epoch, "status": status, "note": note}
        async with self._conn(lease.run_id) as conn:
            await conn.execute(_RELEASE, params)
