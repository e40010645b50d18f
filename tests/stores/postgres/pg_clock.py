"""A lease clock a test advances instead of sleeping while a lease runs out.

A lease has two clocks: the holder's (its local deadline and the waits
between renewals, `polyloop.stores._pg_lease.LeaseClock`) and the database's
(`clock_timestamp()`, which decides expiry for everyone). `advance(s)` moves
both by `s` seconds: the holder's time forward, and every lease's expiry in
the test's schema back, which is what the database sees when `s` seconds pass.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from polyloop.stores._pg_lease import LeaseClock


class FakeClock(LeaseClock):
    """Real time plus whatever the test added; waits end early when time is advanced past them."""

    def __init__(self, conn: Any = None) -> None:
        self.offset = 0.0
        self.conn = conn  # an autocommit connection on the test's schema, or None: the holder's side only
        self._moved: asyncio.Event | None = None

    def monotonic(self) -> float:
        return time.monotonic() + self.offset

    async def sleep(self, seconds: float) -> None:
        end = self.monotonic() + seconds
        while (left := end - self.monotonic()) > 0:
            if self._moved is None:
                self._moved = asyncio.Event()
            try:
                await asyncio.wait_for(self._moved.wait(), left)
            except TimeoutError:
                pass

    def advance(self, seconds: float) -> None:
        """Let `seconds` pass for every lease: the holder's deadlines and the database's expiries."""
        self.offset += seconds
        if self.conn is not None:
            self.conn.execute(
                "UPDATE polyloop_runs SET lease_until = lease_until - make_interval(secs => %s) "
                "WHERE lease_until IS NOT NULL", (seconds,),
            )
        moved, self._moved = self._moved, None
        if moved is not None:
            moved.set()


def lapse(conn: Any, run_id: str) -> None:
    """Let the run's lease run out on the database's clock now, as if its holder's time had passed.

    For a holder in another process (a `polyloop worker`), which no fake clock of the test reaches:
    only the database's side of its time moves, and only for this run.
    """
    conn.execute(
        "UPDATE polyloop_runs SET lease_until = clock_timestamp() WHERE run_id = %s AND holder IS NOT NULL",
        (run_id,),
    )
