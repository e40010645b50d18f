"""The PostgreSQL schema of `PostgresStore`, created and migrated by the library.

`polyloop_schema` holds one row: the version of the tables below. Opening a
store creates them when they are missing, or applies the migrations from the
database's version to this library's one by one (in one transaction, under
an advisory lock, so two workers starting together do not race), and refuses
a database whose schema is newer than this library. docs/reference/stores.md describes every column.
"""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.errors

from .._log.errors import StoreError
from ._pg_conn import first_line

SCHEMA_VERSION = 4

# Any constant works; it only has to be the same in every process.
_MIGRATION_LOCK = 0x706F6C796C6F6F70  # "polyloop"

_V1 = """
CREATE TABLE polyloop_runs (
    run_id          text PRIMARY KEY,
    epoch           bigint NOT NULL DEFAULT 0,
    next_seq        bigint NOT NULL DEFAULT 0,
    holder          text,
    lease_until     timestamptz,
    taken_over_from text,
    status          text NOT NULL DEFAULT 'direct',
    target          text,
    goal            text,
    note            text,
    submitted_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX polyloop_runs_queued ON polyloop_runs (submitted_at) WHERE status = 'queued';

CREATE TABLE polyloop_records (
    run_id     text NOT NULL,
    seq        bigint NOT NULL,
    epoch      bigint NOT NULL,
    kind       text NOT NULL,
    body       json NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, seq)
);

-- One append: the fence (epoch, live lease, expected sequence number) and
-- the insert happen in one statement's transaction, under the run row's lock.
-- p_epoch NULL is a writer without a lease: accepted only while nobody holds one.
CREATE FUNCTION polyloop_append(
    p_run text, p_seq bigint, p_epoch bigint, p_kind text, p_body json, p_durable boolean
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_epoch bigint;
    r polyloop_runs%ROWTYPE;
BEGIN
    IF NOT p_durable THEN
        -- Prefix durability, as with the JSONL store's unsynced appends: the
        -- run's next synchronous commit flushes the WAL up to and past this one.
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF p_seq = 0 THEN
        INSERT INTO polyloop_runs (run_id) VALUES (p_run) ON CONFLICT (run_id) DO NOTHING;
    END IF;
    UPDATE polyloop_runs SET
        next_seq = next_seq + 1,
        status = CASE
            WHEN p_kind = 'run_finished' THEN 'finished'
            WHEN p_kind = 'resolution' AND status = 'parked' THEN 'queued'
            ELSE status END
    WHERE run_id = p_run AND next_seq = p_seq AND CASE
        WHEN p_epoch IS NULL THEN holder IS NULL OR lease_until <= clock_timestamp()
        ELSE epoch = p_epoch AND holder IS NOT NULL AND lease_until > clock_timestamp() END
    RETURNING epoch INTO v_epoch;
    IF FOUND THEN
        INSERT INTO polyloop_records (run_id, seq, epoch, kind, body)
        VALUES (p_run, p_seq, v_epoch, p_kind, p_body);
        RETURN 'ok';
    END IF;
    SELECT * INTO r FROM polyloop_runs WHERE run_id = p_run;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    IF p_epoch IS NULL AND r.holder IS NOT NULL AND r.lease_until > clock_timestamp() THEN
        RETURN 'held:' || r.holder;
    END IF;
    IF p_epoch IS NOT NULL AND r.epoch <> p_epoch THEN
        RETURN 'fenced:' || r.epoch;
    END IF;
    IF p_epoch IS NOT NULL AND (r.holder IS NULL OR r.lease_until <= clock_timestamp()) THEN
        RETURN 'expired';
    END IF;
    RETURN 'seq:' || r.next_seq;
END $$;
"""

# The manifests of `polyloop batch --store` (polyloop/stores/_pg_batch.py). Up
# to this version the table was created beside the schema the first time a
# batch ran, hence IF NOT EXISTS: a database that has it keeps its rows.
_V2 = """
CREATE TABLE IF NOT EXISTS polyloop_batches (
    name       text PRIMARY KEY,
    target     text NOT NULL,
    runs       jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""

# Requests to stop a live run (`polyloop cancel`; polyloop/stores/_pg_ops.py): one row per
# run while its holder has not yet ended it. Not part of the log.
_V3 = """
CREATE TABLE IF NOT EXISTS polyloop_cancel_requests (
    run_id     text PRIMARY KEY,
    by_whom    text NOT NULL,
    why        text NOT NULL,
    at         text NOT NULL
);
"""

# Intermediate products (`ctx.artifacts`; polyloop/stores/_pg_products.py): a row per run and
# name, and the bytes in chunks keyed by the content's SHA-256 (shared by equal products).
_V4 = """
CREATE TABLE IF NOT EXISTS polyloop_products (
    run_id     text NOT NULL,
    name       text NOT NULL,
    sha256     text NOT NULL,
    size       bigint NOT NULL,
    chunks     integer NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, name)
);
CREATE INDEX IF NOT EXISTS polyloop_products_content ON polyloop_products (sha256);
CREATE TABLE IF NOT EXISTS polyloop_product_chunks (
    sha256 text NOT NULL,
    n      integer NOT NULL,
    data   bytea NOT NULL,
    PRIMARY KEY (sha256, n)
);
"""

_MIGRATIONS: dict[int, str] = {1: _V1, 2: _V2, 3: _V3, 4: _V4}


async def ensure_schema(conn: psycopg.AsyncConnection[Any], *, create: bool, where: str) -> None:
    """Create or migrate the tables to `SCHEMA_VERSION`; refuse a newer or missing schema.

    Raises:
        StoreError: the schema is newer than this library, missing while
            `create` is false, or cannot be created (e.g. no privilege).
    """
    version = await _version(conn)
    if version == SCHEMA_VERSION:
        return
    if version is not None and version > SCHEMA_VERSION:
        raise StoreError(
            f"the PolyLoop schema in {where} is version {version}, newer than this library's "
            f"{SCHEMA_VERSION}: upgrade polyloop"
        )
    if not create:
        raise StoreError(
            f"no PolyLoop schema (version {SCHEMA_VERSION}) in {where}: open the store with "
            "create=True once, as a user allowed to create tables"
        )
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            await conn.execute("CREATE TABLE IF NOT EXISTS polyloop_schema (version integer NOT NULL)")
            current = await _version(conn) or 0
            for step in range(current + 1, SCHEMA_VERSION + 1):
                await conn.execute(_MIGRATIONS[step])
            await conn.execute("DELETE FROM polyloop_schema")
            await conn.execute("INSERT INTO polyloop_schema (version) VALUES (%s)", (SCHEMA_VERSION,))
    except psycopg.errors.InvalidSchemaName as exc:
        raise StoreError(await _no_schema(conn, where)) from exc
    except psycopg.Error as exc:
        raise StoreError(f"cannot create the PolyLoop schema in {where}: {first_line(exc)}") from exc


async def _no_schema(conn: psycopg.AsyncConnection[Any], where: str) -> str:
    """What to say when no schema of the session's search_path exists (the server says only "no schema
    has been selected to create in")."""
    path = "?"
    try:
        cur = await conn.execute("SHOW search_path")  # the URL's `options=-csearch_path=...`, or the server's
        row = await cur.fetchone()
        path = row[0] if row else path
    except psycopg.Error:
        pass
    names = [name.strip() for name in path.split(",") if name.strip() and name.strip() != '"$user"']
    if len(names) == 1:
        missing = f"the schema {names[0]} named by the search_path does not exist"
        create = f"`CREATE SCHEMA {names[0]};`"
    else:
        missing = f"no schema of the search_path ({path}) exists"
        create = "`CREATE SCHEMA name;`"
    return (
        f"cannot create the PolyLoop schema in {where}: {missing}; create it first ({create} as a user "
        "allowed to), or name an existing schema in the URL (`?options=-csearch_path=NAME`)"
    )


async def _version(conn: psycopg.AsyncConnection[Any]) -> int | None:
    cur = await conn.execute("SELECT to_regclass('polyloop_schema') IS NOT NULL")
    row = await cur.fetchone()
    if not row or not row[0]:
        return None
    cur = await conn.execute("SELECT max(version) FROM polyloop_schema")
    row = await cur.fetchone()
    return row[0] if row else None
