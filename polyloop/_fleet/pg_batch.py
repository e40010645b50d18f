"""`polyloop batch` on a PostgreSQL store: the batch's hold and its manifest live in the database.

On a directory, a batch keeps one live invocation with an flock on
`DIR/.batch-NAME.held` and its manifest in `DIR/.batch-NAME.json`. Against a
database shared by many machines a file on one of them would protect
nothing, so here:

* the hold is a session-level advisory lock on a key derived from the batch
  name, taken by a connection the invocation keeps open: the server drops it
  when that session ends, including when the process is killed (the kernel
  closes its socket);
* the manifest is the row of `polyloop_batches` named after the batch: the
  same document as the file (`run_id -> {"line", "digest"}`), only ever
  added to, written by the holder alone, and the target the batch first ran
  (never overwritten).

`polyloop_batches` is part of the versioned schema (version 2, see
polyloop/stores/_pg_schema.py), created or migrated when the batch opens the
database like any store does.

docs/how-to/run-a-thousand-rollouts.md and docs/reference/stores.md describe both.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import orjson
import psycopg
from psycopg.conninfo import conninfo_to_dict

from .manifest import MANIFEST_VERSION, Manifest
from .plan import BatchError
from .._log.errors import StoreError
from ..stores._pg_conn import Connections, first_line, session_options
from ..stores._pg_schema import ensure_schema
from ..stores._url import describe_url

HOLD_WAIT = 5.0  # seconds to wait for the hold of a killed invocation to be dropped by the server


def _options(url: str) -> str:
    # The URL's own options (a search_path, ...) kept; the manifest commits synchronously.
    try:
        given = conninfo_to_dict(url).get("options") or ""
    except psycopg.ProgrammingError:
        given = ""
    return f"{given} -c synchronous_commit=on".strip()


def hold_key(name: str, schema: str) -> int:
    """The advisory lock key of batch `name` in `schema` (64 bits of a hash: two never share it in practice).

    Advisory locks belong to the whole database, and two schemas hold two
    stores, each with its own batches: the schema is part of the key.
    """
    digest = hashlib.sha256(f"polyloop batch {schema}.{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class DatabaseBatch:
    """The hold and the manifest of batch `name` in the database at `url`; a context manager.

    Entering creates (or migrates) the schema, connects, and takes the hold,
    waiting up to `wait` seconds for one a killed invocation left (the
    server drops it once it sees the session gone).

    Raises:
        StoreError: the server cannot be reached or failed.
        BatchError: another live invocation holds the batch, or its manifest
            row is not a manifest.
    """

    def __init__(self, url: str, name: str, *, wait: float = HOLD_WAIT, connect_timeout: float = 5.0) -> None:
        self.url = url
        self.name = name
        self.where = describe_url(url)
        self._wait = wait
        self._timeout = connect_timeout
        self._conn: psycopg.Connection[Any] | None = None
        self._held_key: int | None = None  # the advisory lock key, while this invocation holds it
        self.saved = False

    def __enter__(self) -> DatabaseBatch:
        asyncio.run(self._ensure_schema())
        try:
            self._conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, round(self._timeout)),
                options=_options(self.url),
                application_name=f"polyloop batch {self.name}"[:63],
            )
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {self.where}: {first_line(exc, url=self.url)}") from exc
        try:
            self._take_hold()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if self._held_key is not None:  # let go now: the next invocation may start at once
                    conn.execute("SELECT pg_advisory_unlock(%s)", (self._held_key,))
            except psycopg.Error:
                pass  # ending the session below drops the hold all the same, once the server sees it
            finally:
                self._held_key = None
                conn.close()

    async def _ensure_schema(self) -> None:
        conns = Connections(
            self.url, settings=session_options(statement_ms=30_000, lock_ms=10_000, idle_in_transaction_ms=30_000),
            max_size=1, connect_timeout=self._timeout,
        )
        conn = await conns.connect()
        try:
            await ensure_schema(conn, create=True, where=self.where)
        finally:
            await conn.close()

    def _execute(self, query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        assert self._conn is not None
        try:
            cur = self._conn.execute(query, params)
            return cur.fetchall() if cur.description is not None else []
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL at {self.where} failed: {first_line(exc, url=self.url)}") from exc

    def _take_hold(self) -> None:
        schema = self._execute("SELECT current_schema()", ())[0][0]
        key = hold_key(self.name, schema)
        deadline = time.monotonic() + self._wait
        while not self._execute("SELECT pg_try_advisory_lock(%s)", (key,))[0][0]:
            if time.monotonic() >= deadline:
                raise BatchError(
                    f"batch {self.name} is already running against {self.where} ({self._holder(key)}); "
                    "wait for it to end"
                )
            time.sleep(0.1)
        self._held_key = key

    def _holder(self, key: int) -> str:
        # An advisory lock's bigint key shows in pg_locks as two 32-bit halves.
        rows = self._execute(
            "SELECT a.application_name, a.client_addr::text, a.pid FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.classid::bigint = (%s >> 32) & 4294967295 AND l.objid::bigint = %s & 4294967295 "
            "AND l.objsubid = 1",
            (key, key),
        )
        if not rows:
            return "another process"
        app, addr, pid = rows[0]
        return f"{app or 'a session'} from {addr or 'a local socket'}, server pid {pid}"

    def load(self) -> Manifest:
        """The manifest (the target the batch first ran, and its runs); an empty one when there is none yet."""
        rows = self._execute("SELECT target, runs FROM polyloop_batches WHERE name = %s", (self.name,))
        if not rows:
            return Manifest()
        self.saved = True
        target, doc = rows[0]
        if isinstance(doc, str | bytes):  # a json column read as text
            doc = orjson.loads(doc)
        if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
            raise BatchError(
                f"the manifest of batch {self.name} in {self.where} (table polyloop_batches) is not a "
                f"version {MANIFEST_VERSION} manifest; restore it, or give the batch a new --name"
            )
        return Manifest(target if isinstance(target, str) else None, doc)

    def save(self, *, target: str, runs: dict[str, dict[str, Any]]) -> None:
        """Write the manifest (one committed statement; only the holder writes it).

        `target` is recorded by the first write only: a later one keeps the target the batch first ran.
        """
        self._execute(
            "INSERT INTO polyloop_batches (name, target, runs) VALUES (%s, %s, %s::jsonb) "
            "ON CONFLICT (name) DO UPDATE SET runs = EXCLUDED.runs, updated_at = clock_timestamp()",
            (self.name, target, orjson.dumps(runs).decode()),
        )
        self.saved = True
