"""Connections to PostgreSQL for `PostgresStore`: a small pool, session settings, clean errors.

The pool is deliberately small and owned by the store: connections are
opened on demand, kept while idle, and closed by `aclose()` or, failing that,
when the event loop that opened them shuts down. It runs no background
tasks, so closing never waits on a task the loop has already cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from .._log.errors import StoreError
from ._url import describe_url, hide_secrets


def first_line(exc: BaseException, *, url: str = "") -> str:
    """The driver's message reduced to one line (libpq messages span several), never a secret of `url`.

    libpq quotes the URL, or the piece it cannot parse, in some messages.
    """
    text = str(exc).strip().splitlines()
    line = text[0].strip() if text else type(exc).__name__
    return hide_secrets(line, url) if url else line


def session_options(*, statement_ms: int, lock_ms: int, idle_in_transaction_ms: int) -> dict[str, str]:
    """Server-side limits set on every session, so a frozen client cannot block the others."""
    return {
        "statement_timeout": str(statement_ms),
        "lock_timeout": str(lock_ms),
        "idle_in_transaction_session_timeout": str(idle_in_transaction_ms),
        # The durable writes commit synchronously whatever the server's default;
        # the others lower it per transaction (see docs/reference/stores.md).
        "synchronous_commit": "on",
    }


class Connections:
    """At most `max_size` autocommit connections to one database, for one event loop.

    Args:
        url: a libpq URL (`postgresql://user@host:port/dbname`).
        settings: session settings (name -> value) sent at connect time.
        max_size: the most connections open at once; a caller beyond it waits.
        connect_timeout: seconds before an unreachable server is reported.
    """

    def __init__(
        self, url: str, *, settings: dict[str, str], max_size: int = 8, connect_timeout: float = 5.0
    ) -> None:
        self.url = url
        self.where = describe_url(url)
        options = " ".join(f"-c {name}={value}" for name, value in settings.items())
        with contextlib.suppress(psycopg.ProgrammingError):  # a bad URL fails at connect, clearly
            # The URL's own options (a search_path, ...) come first, or, as libpq does without
            # them, $PGOPTIONS (passing options ourselves would silently drop it); ours are added.
            own = conninfo_to_dict(url).get("options") or os.environ.get("PGOPTIONS") or ""
            options = f"{own} {options}".strip()
        self._kwargs: dict[str, Any] = {
            "autocommit": True,
            "options": options,
            "connect_timeout": max(1, round(connect_timeout)),
            "application_name": "polyloop",
        }
        self._max = max_size
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        # One reusable cursor per pooled connection: a step's appends skip
        # building a cursor each, which cost CPU per statement the floor's
        # INSERT does not pay (see `python benchmarks/postgres.py --appends`).
        self._cursors: dict[psycopg.AsyncConnection[Any], psycopg.AsyncRawCursor[Any]] = {}
        self._open = 0
        self._waiting = 0
        self._freed: asyncio.Condition | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._finalizer: Any = None

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        """A new connection with the session settings, outside the pool (the caller closes it)."""
        try:
            return await psycopg.AsyncConnection.connect(self.url, **self._kwargs)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {self.where}: {first_line(exc, url=self.url)}") from exc

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """Borrow a connection; one that failed or was left in a transaction is closed, not reused."""
        conn = await self.acquire()
        ok = False
        try:
            yield conn
            ok = True
        finally:
            await self.release(conn, ok=ok)

    async def acquire(self) -> psycopg.AsyncConnection[Any]:
        """Borrow a connection (give it back with `release`)."""
        await self._bind()
        while True:
            # No await between the check and the take: the loop runs one task at a time.
            if self._idle:
                return self._idle.pop()
            if self._open < self._max:
                self._open += 1
                try:
                    return await self.connect()
                except BaseException:
                    await self._free(None)
                    raise
            assert self._freed is not None
            self._waiting += 1
            try:
                async with self._freed:
                    while not self._idle and self._open >= self._max:
                        await self._freed.wait()
            finally:
                self._waiting -= 1

    def cursor(self, conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncRawCursor[Any]:
        """The `$1`-style cursor of a borrowed connection, kept with it for the next borrower."""
        cur = self._cursors.get(conn)
        if cur is None:
            cur = self._cursors[conn] = psycopg.AsyncRawCursor(conn)
        return cur

    async def release(self, conn: psycopg.AsyncConnection[Any], *, ok: bool) -> None:
        """Give a connection back; after a failure, or inside a transaction, it is closed instead."""
        reusable = ok and not conn.closed and conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if not reusable:
            self._cursors.pop(conn, None)
            with contextlib.suppress(Exception):
                await conn.close()
        await self._free(conn if reusable else None)

    async def _free(self, conn: psycopg.AsyncConnection[Any] | None) -> None:
        freed = self._freed
        if freed is None:  # the pool was closed while the connection was out
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            return
        if conn is None:
            self._open -= 1
        else:
            self._idle.append(conn)
        if self._waiting:
            async with freed:
                freed.notify()

    async def _bind(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        if self._loop is not None:
            raise StoreError(
                "a PostgresStore serves one event loop at a time: close it (`await store.aclose()`) "
                "before using it from another"
            )
        self._loop = loop
        self._freed = asyncio.Condition()
        # An async generator parked at its first `yield` is closed by the loop
        # when it shuts down (`asyncio.run` does), or when it is garbage
        # collected: the finalizer that closes connections a caller forgot.
        self._finalizer = self._close_at_shutdown()
        await self._finalizer.__anext__()

    async def _close_at_shutdown(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await self._close_idle()

    async def _close_idle(self) -> None:
        idle, self._idle = self._idle, []
        self._cursors.clear()
        self._open = 0
        self._loop = None
        self._freed = None
        for conn in idle:
            with contextlib.suppress(Exception):
                await conn.close()

    async def aclose(self) -> None:
        """Close every idle connection; borrowed ones close when given back."""
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            await finalizer.aclose()
