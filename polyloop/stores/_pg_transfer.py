"""Moving whole runs in and out of PostgreSQL (`polyloop export` / `import`; a mixin of `PostgresStore`).

`log_text` hands out a run's log as the JSONL store would hold it, refusing
a run a live lease holds. `load_run` puts a verified log and its products in
under the same run id, in one transaction committed synchronously: the run's
row (epoch 0, nobody holding it), every record at its sequence number and
every product, chunked and content-addressed as `put_product` stores them.
A run id that already has a log is compared instead: the same records and
products are `identical` (nothing written: importing twice is harmless),
anything else is `different` (nothing written either).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import psycopg

from .._log.errors import RunActiveError, RunNotFoundError
from .._log.ids import check_artifact_name, check_run_id
from ._lockfile import dead_here
from ._pg_products import lock_content
from ._products import CHUNK, ProductFile
from ._pg_read import READ_ONE

Loaded = Literal["loaded", "identical", "different"]

_LOCK_ROW = """
SELECT holder, holder IS NOT NULL AND lease_until > clock_timestamp() AS live, next_seq
FROM polyloop_runs WHERE run_id = %s FOR UPDATE
"""


class Transfers:
    """`log_text` and `load_run` (a mixin of `PostgresStore`)."""

    where: str
    _conn: Callable[..., Any]

    async def log_text(self, run_id: str) -> bytes:
        """The run's log as JSONL bytes (one record a line), unjudged.

        Raises:
            RunNotFoundError: the run has no log.
            RunActiveError: a live lease holds it (its log is still growing).
            StoreError: the database failed.
        """
        check_run_id(run_id)
        async with self._conn(run_id) as conn:
            async with conn.transaction():
                cur = await conn.execute(_LOCK_ROW.replace("FOR UPDATE", "FOR SHARE"), (run_id,))
                row = await cur.fetchone()
                if row is None or not row[2]:
                    raise RunNotFoundError(run_id, self.where)
                if row[1] and not dead_here(row[0]):
                    raise RunActiveError(run_id, row[0])
                cur = await conn.execute(READ_ONE, {"run": run_id})
                text = (await cur.fetchone())[0]
        return (text + "\n").encode()

    async def load_run(
        self, run_id: str, lines: list[tuple[str, str]], products: Iterable[ProductFile], *, finished: bool
    ) -> Loaded:
        """Load a verified log (each record's kind and JSON line) and its products under `run_id`.

        Returns:
            `loaded`, or `identical` / `different` when the run id already
            has a log (then nothing was written).

        Raises:
            RunActiveError: a live lease holds the run id.
            StoreError: the database failed (nothing was written).
        """
        check_run_id(run_id)
        wanted = list(products)
        for product in wanted:
            check_artifact_name(product.name)
        async with self._conn(run_id) as conn:
            async with conn.transaction():
                await conn.execute("SET LOCAL synchronous_commit = on")
                cur = await conn.execute(_LOCK_ROW, (run_id,))
                row = await cur.fetchone()
                if row is not None and row[1] and not dead_here(row[0]):
                    raise RunActiveError(run_id, row[0])
                if row is not None:
                    return await _compare(conn, run_id, lines, wanted)
                await conn.execute(
                    "INSERT INTO polyloop_runs (run_id, next_seq, status) VALUES (%s, %s, %s)",
                    (run_id, len(lines), "finished" if finished else "direct"),
                )
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "INSERT INTO polyloop_records (run_id, seq, epoch, kind, body) VALUES (%s, %s, 0, %s, %s)",
                        [(run_id, seq, kind, body) for seq, (kind, body) in enumerate(lines)],
                    )
                for product in wanted:
                    await _load_product(conn, run_id, product)
        return "loaded"


async def _load_product(conn: psycopg.AsyncConnection[Any], run_id: str, product: ProductFile) -> None:
    count = -(-product.size // CHUNK)
    await lock_content(conn, product.sha256)
    cur = await conn.execute("SELECT count(*) FROM polyloop_product_chunks WHERE sha256 = %s", (product.sha256,))
    if int((await cur.fetchone())[0]) != count:
        for n, chunk in enumerate(product.chunks()):
            await conn.execute(
                "INSERT INTO polyloop_product_chunks (sha256, n, data) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (product.sha256, n, chunk),
            )
    await conn.execute(
        "INSERT INTO polyloop_products (run_id, name, sha256, size, chunks) VALUES (%s, %s, %s, %s, %s)",
        (run_id, product.name, product.sha256, product.size, count),
    )


async def _compare(
    conn: psycopg.AsyncConnection[Any], run_id: str, lines: list[tuple[str, str]], products: list[ProductFile]
) -> Loaded:
    cur = await conn.execute(READ_ONE, {"run": run_id})
    row = await cur.fetchone()
    text = row[0] if row is not None and row[0] else ""
    if text != "\n".join(body for _, body in lines):
        return "different"
    cur = await conn.execute("SELECT name, size, sha256 FROM polyloop_products WHERE run_id = %s", (run_id,))
    stored = {name: (int(size), sha) for name, size, sha in await cur.fetchall()}
    return "identical" if stored == {p.name: (p.size, p.sha256) for p in products} else "different"
