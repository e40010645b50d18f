"""The checks `polyloop doctor` makes of a PostgreSQL store (see `_operate/doctor.py`).

Each check is `(name, ok, detail)`. Nothing is created: a database without
the PolyLoop schema is reported as such (the first run creates it), and the
write probe is one row of `polyloop_runs`, under an id no run can have (it
starts with a dot), committed synchronously and deleted again.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

import psycopg

from ._pg_conn import first_line
from ._pg_schema import SCHEMA_VERSION as TABLES_VERSION
from ._url import describe_url

Check = tuple[str, bool, str]


async def pg_checks(url: str, *, timeout: float) -> tuple[list[Check], Counter[str] | None]:
    """The server, its durability settings, the schema and a write; and the logs' format versions
    (how many runs started with each; None when there are no tables to count them in)."""
    where = describe_url(url)
    try:
        conn = await asyncio.wait_for(
            psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=max(1, int(timeout))), timeout)
    except (psycopg.Error, OSError, asyncio.TimeoutError) as exc:
        why = first_line(exc, url=url) if str(exc) else f"no answer in {timeout:g} s"
        return [("server", False, f"cannot reach PostgreSQL at {where}: {why}")], None
    try:
        return await _checks(conn, where)
    except psycopg.Error as exc:
        return [("server", False, f"PostgreSQL at {where} failed: {first_line(exc, url=url)}")], None
    finally:
        await conn.close()


async def _checks(conn: psycopg.AsyncConnection[Any], where: str) -> tuple[list[Check], Counter[str] | None]:
    version = await _one(conn, "SHOW server_version")
    checks: list[Check] = [("server", True, f"PostgreSQL {version} at {where}")]
    checks.append(await _durability(conn))
    tables = await _tables_version(conn)
    if tables is None:
        may = await _one(conn, "SELECT has_schema_privilege(current_schema(), 'CREATE')")
        detail = f"no PolyLoop tables yet: the first run creates version {TABLES_VERSION}"
        checks.append(("schema", bool(may), detail + ("" if may else ", but this user may not create tables")))
        checks.append(("write", True, "not probed: there are no tables to write to yet"))
        return checks, None
    if tables > TABLES_VERSION:
        checks.append(("schema", False, f"PolyLoop tables version {tables}, newer than this library's "
                                        f"{TABLES_VERSION}: upgrade polyloop"))
        return checks, None
    note = "" if tables == TABLES_VERSION else f" (this library migrates it to {TABLES_VERSION} on first use)"
    checks.append(("schema", True, f"PolyLoop tables version {tables}{note}"))
    try:
        checks.append(await _write_probe(conn))
    except psycopg.Error as exc:  # e.g. a user allowed to read but not to write
        checks.append(("write", False, f"cannot write a probe row: {first_line(exc)}"))
    rows = await (await conn.execute(
        "SELECT body->>'schema_version', count(*) FROM polyloop_records WHERE seq = 0 GROUP BY 1")).fetchall()
    return checks, Counter({str(v): int(n) for v, n in rows})


async def _one(conn: psycopg.AsyncConnection[Any], sql: str) -> Any:
    row = await (await conn.execute(sql)).fetchone()
    return None if row is None else row[0]


async def _tables_version(conn: psycopg.AsyncConnection[Any]) -> int | None:
    if await _one(conn, "SELECT to_regclass('polyloop_schema')") is None:
        return None
    return await _one(conn, "SELECT max(version) FROM polyloop_schema")


async def _durability(conn: psycopg.AsyncConnection[Any]) -> Check:
    off = [name for name in ("fsync", "full_page_writes") if await _one(conn, f"SHOW {name}") == "off"]
    if off:
        return ("durability", False, f"{' and '.join(off)} off on the server: a crash of the server can lose or "
                                     "tear records it acknowledged (docs/reference/stores.md)")
    return ("durability", True, "fsync and full_page_writes on")


async def _write_probe(conn: psycopg.AsyncConnection[Any]) -> Check:
    probe = f".doctor-{os.getpid()}-{os.urandom(4).hex()}"  # never a run id: check_run_id refuses a dot
    loop = asyncio.get_running_loop()
    started = loop.time()
    await conn.execute("SET synchronous_commit = on")
    await conn.execute("INSERT INTO polyloop_runs (run_id, status, note) VALUES (%s, 'doctor', "
                       "'a probe of polyloop doctor; safe to delete')", (probe,))
    committed = loop.time() - started
    await conn.execute("DELETE FROM polyloop_runs WHERE run_id = %s", (probe,))
    return ("write", True, f"a probe row committed synchronously ({committed * 1000:.1f} ms) and deleted")

