"""An operator's day on `PostgresStore` (a mixin): requests to stop, batches' runs, archiving.

* A request to stop a live run (polyloop/_log/cancel_port.py) is a row of
  `polyloop_cancel_requests` (schema version 3). The holder looks for it at
  its safe points, at most once a second per run (a request is then seen
  within a second, or one step later): a step does not pay a round trip.
* `batch_runs` reads the run ids a batch's row of `polyloop_batches` names.
* `export_and_delete` archives one run: in one transaction it locks the
  run's row (refused while a live lease holds it), reads its log, hands the
  bytes to the caller (which verifies them and writes the JSONL file
  durably) and deletes the run's rows; the commit follows the file. A crash
  in between leaves the run in the database and a whole copy in the
  archive; archiving it again finds the copy and finishes.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from .._log.cancel_port import CancelRequest
from .._log.errors import InvalidInputError, RunActiveError, RunNotFoundError
from .._log.ids import check_run_id
from ._lockfile import dead_here
from ._pg_products import drop_orphans
from ._pg_read import READ_ONE

_POLL = 1.0  # seconds a holder's look for a request to stop may be old
_KEEP = 4096  # looks remembered before the stale ones are dropped

_LOCK_ROW = """
SELECT holder, lease_until > clock_timestamp() AS live, next_seq FROM polyloop_runs
WHERE run_id = %s FOR UPDATE
"""


class Operations:
    """Requests to stop, batches' runs and archiving (a mixin of `PostgresStore`)."""

    where: str
    _conn: Callable[..., Any]
    _cancel_seen: dict[str, tuple[float, CancelRequest | None]]

    async def request_cancel(self, run_id: str, request: CancelRequest) -> None:
        """Leave a request to stop the run (replacing an earlier one); committed before it returns."""
        async with self._conn(run_id) as conn:
            await conn.execute(
                "INSERT INTO polyloop_cancel_requests (run_id, by_whom, why, at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (run_id) DO UPDATE SET by_whom = EXCLUDED.by_whom, why = EXCLUDED.why, at = EXCLUDED.at",
                (check_run_id(run_id), request.by, request.why, request.at),
            )

    async def cancel_request(self, run_id: str) -> CancelRequest | None:
        """The run's pending request to stop, or None (looked up at most once a second per run)."""
        seen = self._cancel_seen
        now = time.monotonic()
        last = seen.get(run_id)
        if last is not None and now - last[0] < _POLL:
            return last[1]
        async with self._conn(run_id) as conn:
            cur = await conn.execute(
                "SELECT by_whom, why, at FROM polyloop_cancel_requests WHERE run_id = %s", (check_run_id(run_id),)
            )
            row = await cur.fetchone()
        found = CancelRequest(by=row[0], why=row[1], at=row[2]) if row else None
        if len(seen) >= _KEEP:  # a long-lived worker runs many runs: forget the looks that are stale anyway
            for stale in [r for r, (when, _) in seen.items() if now - when >= _POLL]:
                del seen[stale]
        seen[run_id] = (now, found)
        return found

    async def clear_cancel(self, run_id: str) -> None:
        """Remove the run's request to stop, if any."""
        self._cancel_seen.pop(run_id, None)
        async with self._conn(run_id) as conn:
            await conn.execute("DELETE FROM polyloop_cancel_requests WHERE run_id = %s", (check_run_id(run_id),))

    async def batch_runs(self, name: str) -> set[str]:
        """The run ids the batch `name` names (its row of `polyloop_batches`).

        Raises:
            InvalidInputError: there is no such batch.
        """
        async with self._conn() as conn:
            cur = await conn.execute("SELECT runs FROM polyloop_batches WHERE name = %s", (name,))
            row = await cur.fetchone()
        if row is None:
            raise InvalidInputError(f"no batch {name!r} in {self.where}")
        runs = row[0]
        return {str(r) for r in runs} if isinstance(runs, dict) else set()

    async def export_and_delete(self, run_id: str, keep: Callable[[bytes], Awaitable[None]]) -> None:
        """Hand the run's log to `keep`, then delete the run, in one transaction.

        `keep` receives the log as JSONL bytes (one record a line, as the
        JSONL store writes them), and may read the run's products meanwhile
        (`archive` writes them beside the log); if it raises, nothing is
        deleted. The run's products go with it (their chunks once no other
        run's product shares them).

        Raises:
            RunActiveError: a live lease holds the run.
            RunNotFoundError: the run has no log.
            StoreError: the database failed.
        """
        check_run_id(run_id)
        async with self._conn(run_id) as conn:
            async with conn.transaction():
                cur = await conn.execute(_LOCK_ROW, (run_id,))
                row = await cur.fetchone()
                if row is None or not row[2]:
                    raise RunNotFoundError(run_id, self.where)
                holder, live, _ = row
                if holder is not None and live and not dead_here(holder):
                    raise RunActiveError(run_id, holder)
                cur = await conn.execute(READ_ONE, {"run": run_id})
                text = (await cur.fetchone())[0]
                await keep((text + "\n").encode())
                for table in ("polyloop_records", "polyloop_cancel_requests", "polyloop_runs"):
                    await conn.execute(f"DELETE FROM {table} WHERE run_id = %s", (run_id,))  # noqa: S608 - fixed names
                cur = await conn.execute("DELETE FROM polyloop_products WHERE run_id = %s RETURNING sha256", (run_id,))
                await drop_orphans(conn, [r[0] for r in await cur.fetchall()])
