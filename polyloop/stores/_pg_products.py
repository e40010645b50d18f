"""Intermediate products (`ctx.artifacts`) in PostgreSQL: content-addressed chunks, fenced by the lease.

A product is one row of `polyloop_products` (run, name, SHA-256, size,
number of chunks) and its bytes are rows of `polyloop_product_chunks`, keyed
by the content's SHA-256 and the chunk's index (`CHUNK` bytes each): two
products with the same bytes share their chunks, in any runs. No shared
file system is assumed; the database holds everything.

`put_product` writes in one transaction, committed synchronously (durable
before it returns, so before the `artifact` record that references it):

1. the fence: the run's row, locked `FOR SHARE`, must still carry the
   writer's lease epoch with a live lease (a writer without a lease: nobody
   may hold a live one), exactly as an append is fenced;
2. the quota: the run's products, this one counted instead of the one it
   replaces, must fit in `product_quota` bytes;
3. the chunks, sent one statement per chunk (never one statement holding
   the whole product), unless the content is already stored;
4. the product's row, replacing the earlier one, whose chunks are deleted
   if no product references them any more.

Steps 3 and 4 take transaction-scoped advisory locks on the new content's
address and the replaced one's (in sorted order), so a writer of some bytes and the deletion of the same bytes'
chunks never interleave. Reads are one statement (a consistent snapshot):
a reader sees the whole earlier product or the whole new one.
`product_chunks` streams a product a chunk at a time (`verify`, `export`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg

from .._log.errors import RunActiveError, StoreError
from .._log.ids import check_artifact_name, check_run_id
from ._lockfile import dead_here
from ._pg_lease import Lease, LeaseLostError
from ._products import CHUNK

DEFAULT_QUOTA = 1 << 30  # bytes of products per run (`PostgresStore(product_quota=...)`)
_OFF_LOOP = 1 << 20  # hashing more than this moves off the event loop
_LOCK_SPACE = 0x706C  # the first key of the content locks (the second is the address's hash)

_FENCE = """
SELECT epoch, holder, holder IS NOT NULL AND lease_until > clock_timestamp() AS live
FROM polyloop_runs WHERE run_id = %s FOR SHARE
"""

_OTHERS = "SELECT coalesce(sum(size), 0) FROM polyloop_products WHERE run_id = %s AND name <> %s"

_READ = """
SELECT p.sha256, p.size, c.data FROM polyloop_products p
LEFT JOIN polyloop_product_chunks c ON c.sha256 = p.sha256
WHERE p.run_id = %s AND p.name = %s ORDER BY c.n
"""

_UPSERT = """
INSERT INTO polyloop_products (run_id, name, sha256, size, chunks) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (run_id, name) DO UPDATE SET
    sha256 = EXCLUDED.sha256, size = EXCLUDED.size, chunks = EXCLUDED.chunks, written_at = clock_timestamp()
"""

_ORPHAN = """
DELETE FROM polyloop_product_chunks WHERE sha256 = %s
AND NOT EXISTS (SELECT 1 FROM polyloop_products WHERE sha256 = %s)
"""


def _digest(data: memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


async def lock_content(conn: psycopg.AsyncConnection[Any], sha256: str) -> None:
    """Hold the content address `sha256` until the transaction ends (writers and deleters of its chunks)."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_SPACE, sha256))


async def drop_orphans(conn: psycopg.AsyncConnection[Any], addresses: list[str]) -> None:
    """Delete the chunks of these contents that no product references any more (inside a transaction)."""
    for sha256 in sorted(set(addresses)):
        await lock_content(conn, sha256)
        await conn.execute(_ORPHAN, (sha256, sha256))


class Products:
    """`PostgresStore`'s products (a mixin; the store owns the state declared below)."""

    where: str
    product_quota: int | None
    _leases: dict[str, Lease]
    _conn: Callable[..., Any]

    async def put_product(self, run_id: str, name: str, data: bytes) -> None:
        """Store `data` as product `name` of the run, durably, replacing any earlier one.

        Fenced like an append: while this store holds the run's lease, the
        database accepts the product only under that lease's epoch, still
        live; without a lease, only while nobody holds a live one.

        Raises:
            InvalidRunIdError, InvalidInputError: an unsafe run id or product name.
            LeaseLostError: the lease is lost (nothing was written).
            RunActiveError: another process holds the run.
            StoreError: the quota would be exceeded, or the database failed
                (the product is then the earlier one or absent).
        """
        check_run_id(run_id)
        check_artifact_name(name)
        view = memoryview(data).cast("B")
        digest = await asyncio.to_thread(_digest, view) if len(view) > _OFF_LOOP else _digest(view)
        lease = self._leases.get(run_id)
        if lease is not None:
            lease.before_write()
        async with self._conn(run_id) as conn:
            async with conn.transaction():
                await self._fence(conn, run_id, lease)
                await self._within_quota(conn, run_id, name, len(view))
                cur = await conn.execute(
                    "SELECT sha256 FROM polyloop_products WHERE run_id = %s AND name = %s FOR UPDATE", (run_id, name)
                )
                old = await cur.fetchone()
                for address in sorted({digest, old[0] if old else digest}):  # in one order: no deadlock
                    await lock_content(conn, address)
                await self._send_chunks(conn, digest, view)
                await conn.execute(_UPSERT, (run_id, name, digest, len(view), -(-len(view) // CHUNK)))
                if old is not None and old[0] != digest:
                    await drop_orphans(conn, [old[0]])
        if lease is not None:
            lease.after_write()

    async def _fence(self, conn: psycopg.AsyncConnection[Any], run_id: str, lease: Lease | None) -> None:
        cur = await conn.execute(_FENCE, (run_id,))
        row = await cur.fetchone()
        if lease is not None:
            if row is None or row[0] != lease.epoch:
                why = "its run has no row" if row is None else f"another worker took the run over at epoch {row[0]}"
                raise LeaseLostError(run_id, why)
            if not row[2]:
                raise LeaseLostError(run_id, "it expired on the database clock")
        elif row is not None and row[2] and not dead_here(row[1]):
            raise RunActiveError(run_id, row[1])

    async def _within_quota(self, conn: psycopg.AsyncConnection[Any], run_id: str, name: str, size: int) -> None:
        quota = self.product_quota
        if quota is None:
            return
        cur = await conn.execute(_OTHERS, (run_id, name))
        others = int((await cur.fetchone())[0])
        if others + size > quota:
            raise StoreError(
                f"cannot store product {name!r} of run {run_id!r}: {size} bytes would bring the run's products "
                f"to {others + size} bytes, over its quota of {quota} (PostgresStore(product_quota=...))",
                run_id=run_id,
            )

    async def _send_chunks(self, conn: psycopg.AsyncConnection[Any], digest: str, view: memoryview) -> None:
        count = -(-len(view) // CHUNK)
        cur = await conn.execute("SELECT count(*) FROM polyloop_product_chunks WHERE sha256 = %s", (digest,))
        if int((await cur.fetchone())[0]) == count:
            return  # the same bytes are stored already (content-addressed)
        for n in range(count):
            await conn.execute(
                "INSERT INTO polyloop_product_chunks (sha256, n, data) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (digest, n, view[n * CHUNK : (n + 1) * CHUNK]),
            )

    async def get_product(self, run_id: str, name: str) -> bytes | None:
        """The product's bytes as stored (one consistent read), or None when there is none.

        Raises:
            InvalidRunIdError, InvalidInputError: an unsafe run id or product name.
            StoreError: the database failed.
        """
        check_run_id(run_id)
        check_artifact_name(name)
        async with self._conn(run_id) as conn:
            cur = await conn.execute(_READ, (run_id, name))
            rows = await cur.fetchall()
        if not rows:
            return None
        return b"".join(bytes(row[2]) for row in rows if row[2] is not None)

    async def product_chunks(self, run_id: str, name: str) -> AsyncIterator[bytes]:
        """The product's bytes a chunk at a time, from one snapshot; nothing when there is none.

        A server-side cursor in a repeatable-read transaction: a product of
        any size is never held whole, and a replacement meanwhile is not seen.
        """
        check_run_id(run_id)
        check_artifact_name(name)
        async with self._conn(run_id) as conn:
            async with conn.transaction():
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                async with conn.cursor(name="polyloop_product") as cur:
                    cur.itersize = 4
                    await cur.execute(_READ, (run_id, name))
                    async for _, _, data in cur:
                        if data is not None:
                            yield bytes(data)

    async def product_names(self, run_id: str) -> dict[str, tuple[int, str]]:
        """Every product the run stores now: name -> (size, sha256) as recorded in its row (unverified)."""
        check_run_id(run_id)
        async with self._conn(run_id) as conn:
            cur = await conn.execute(
                "SELECT name, size, sha256 FROM polyloop_products WHERE run_id = %s ORDER BY name", (run_id,)
            )
            return {row[0]: (int(row[1]), row[2]) for row in await cur.fetchall()}

