"""PostgresStore on a real server: records, fencing, leases, schema and connection failures."""

from __future__ import annotations

import asyncio
import uuid

import orjson
import psycopg
import pytest

from polyloop import (
    CorruptLogError,
    Intent,
    JsonlStore,
    ModelCallResult,
    RunActiveError,
    RunExistsError,
    RunNotFoundError,
    RunStarted,
    SchemaVersionError,
    StepCompleted,
    StoreError,
    encode_record,
)
from polyloop._operate.verify import verify_store
from polyloop.stores import LeaseLostError, PostgresStore, open_store

from pg_clock import FakeClock
from pg_helpers import with_search_path

MI = Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1")
MR = ModelCallResult(result_id="s1-m1", output={"text": "x", "tool_call": None})
SC = StepCompleted(step=1, result_id=None, observation=None)


def fresh(label: str) -> str:
    return f"pgtest-{label}-{uuid.uuid4().hex[:10]}"


async def test_a_record_is_stored_as_the_jsonl_line_with_indexed_columns(store, pg_conn):
    run_id = fresh("body")
    started = RunStarted(run_id=run_id, goal="g ✓ \x1b[31m")
    await store.write_run_started(started)
    await store.write_intent(run_id, MI)
    rows = pg_conn.execute(
        "SELECT seq, epoch, kind, body::text FROM polyloop_records WHERE run_id = %s ORDER BY seq", (run_id,)
    ).fetchall()
    assert [(seq, kind) for seq, _, kind, _ in rows] == [(0, "run_started"), (1, "intent")]
    assert [body.encode() + b"\n" for *_, body in rows] == [encode_record(started), encode_record(MI)]
    # jq-style questions are one SQL expression away.
    assert pg_conn.execute(
        "SELECT body->>'goal' FROM polyloop_records WHERE run_id = %s AND seq = 0", (run_id,)
    ).fetchone() == ("g ✓ \x1b[31m",)


@pytest.mark.parametrize(
    "bad",
    [
        "unknown-major",
        b'{"record":"intent","kind":"model_call"}',
        b'{"record":"no_such_kind"}',
    ],
    ids=["unknown-major", "invalid-record", "unknown-kind"],
)
async def test_a_bad_log_raises_what_the_jsonl_store_raises(store, pg_conn, tmp_path, bad):
    run_id = fresh("bad")
    if bad == "unknown-major":
        obj = orjson.loads(encode_record(RunStarted(run_id=run_id, goal="g")))
        bad = orjson.dumps({**obj, "schema_version": "9.0"})
    line = bad
    assert not await store.exists(run_id)  # the store makes its tables on first use; this test's schema is new
    pg_conn.execute("INSERT INTO polyloop_runs (run_id, next_seq) VALUES (%s, 1)", (run_id,))
    pg_conn.execute(
        "INSERT INTO polyloop_records (run_id, seq, epoch, kind, body) VALUES (%s, 0, 0, 'x', %s::json)",
        (run_id, line.decode()),
    )
    (tmp_path / f"{run_id}.jsonl").write_bytes(line + b"\n")
    with pytest.raises(CorruptLogError) as from_jsonl:
        await JsonlStore(tmp_path).read_log(run_id)
    with pytest.raises(CorruptLogError) as from_pg:
        await store.read_log(run_id)
    assert type(from_pg.value) is type(from_jsonl.value)
    assert str(from_pg.value) == str(from_jsonl.value)
    if b'"9.0"' in bad:
        assert isinstance(from_pg.value, SchemaVersionError)


async def test_reads_writes_and_listing(store):
    run_id = fresh("list")
    assert not await store.exists(run_id)
    with pytest.raises(RunNotFoundError):
        await store.read_log(run_id)
    with pytest.raises(RunNotFoundError):
        await store.write_intent(run_id, MI)
    await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
    assert await store.exists(run_id)
    assert run_id in await store.list_runs()
    assert await store.holder(run_id) is None
    with pytest.raises(RunExistsError):
        await store.write_run_started(RunStarted(run_id=run_id, goal="again"))


async def test_open_store_picks_the_store_from_the_spec(pg_url, tmp_path):
    assert isinstance(open_store(str(tmp_path)), JsonlStore)
    assert isinstance(open_store(pg_url), PostgresStore)
    assert isinstance(open_store(pg_url.replace("postgresql://", "postgres://", 1)), PostgresStore)


async def test_a_writer_that_read_a_stale_log_is_refused(store, other):
    run_id = fresh("stale")
    await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
    await other.read_log(run_id)
    await store.write_intent(run_id, MI)
    with pytest.raises(StoreError, match="expected 1"):
        await other.write_intent(run_id, MI)
    assert len(await store.read_log(run_id)) == 2


async def test_a_held_run_refuses_other_holders_and_unleased_writers(store, other):
    run_id = fresh("held")
    async with store.lock(run_id):
        await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
        assert await other.holder(run_id) == store.name
        with pytest.raises(RunActiveError, match=store.name):
            async with other.lock(run_id):
                pass
        with pytest.raises(RunActiveError):
            await other.write_intent(run_id, MI)
        await store.write_intent(run_id, MI)
    assert await other.holder(run_id) is None
    async with other.lock(run_id):
        await other.write_model_call_result(run_id, MR)
    assert len(await store.read_log(run_id)) == 3


async def test_a_takeover_fences_the_old_holder_out(store, other, pg_conn):
    run_id = fresh("fence")
    lease = await store.claim(run_id)
    async with lease:
        await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
        # The old holder's lease lapses on the database clock (as if it froze).
        pg_conn.execute("UPDATE polyloop_runs SET lease_until = clock_timestamp() WHERE run_id = %s", (run_id,))
        taken = await other.claim(run_id)
        assert (taken.epoch, taken.taken_over_from) == (lease.epoch + 1, store.name)
        async with taken:
            with pytest.raises(LeaseLostError):
                await store.write_intent(run_id, MI)
            await other.write_intent(run_id, MI)
    rows = pg_conn.execute(
        "SELECT epoch, kind FROM polyloop_records WHERE run_id = %s ORDER BY seq", (run_id,)
    ).fetchall()
    assert rows == [(lease.epoch, "run_started"), (taken.epoch, "intent")]


async def test_losing_the_lease_cancels_the_holder_with_a_clear_error(pg_url, pg_conn):
    run_id = fresh("cancel")
    reached = False
    clock = FakeClock(pg_conn)
    with pytest.raises(LeaseLostError, match="took the run over"):
        async with PostgresStore(pg_url, lease=2, _clock=clock) as store, store.lock(run_id):
            await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
            pg_conn.execute("UPDATE polyloop_runs SET epoch = epoch + 1 WHERE run_id = %s", (run_id,))
            clock.advance(2 / 3)  # the time of the first renewal: it is refused
            await asyncio.sleep(30)  # a long model call: the refused renewal cancels it
            reached = True
    assert not reached


async def test_a_paused_process_finds_its_writes_refused(pg_url, pg_conn):
    run_id = fresh("pause")
    clock = FakeClock(pg_conn)
    async with PostgresStore(pg_url, lease=1, _clock=clock) as store:
        async with store.lock(run_id):
            await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
            clock.advance(1.2)  # the whole event loop stops, as in a long GC pause or SIGSTOP
            with pytest.raises(LeaseLostError, match="local deadline"):
                await store.write_intent(run_id, MI)
    assert [r[0] for r in pg_conn.execute(
        "SELECT kind FROM polyloop_records WHERE run_id = %s", (run_id,)
    ).fetchall()] == ["run_started"]


async def test_a_held_lease_is_renewed(pg_url):
    # The real clocks, end to end: renewals on time.monotonic keep a 1 s lease on the database's clock.
    run_id = fresh("renew")
    async with PostgresStore(pg_url, lease=1) as store, PostgresStore(pg_url, lease=1) as other:
        async with store.lock(run_id):
            await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
            await asyncio.sleep(2.2)  # more than two leases
            await store.write_intent(run_id, MI)
            with pytest.raises(RunActiveError):
                await other.claim(run_id)


async def test_an_unreachable_server_is_one_clear_store_error():
    async with PostgresStore("postgresql://postgres@127.0.0.1:1/test", connect_timeout=2) as store:
        with pytest.raises(StoreError, match=r"^cannot connect to PostgreSQL at postgres@127.0.0.1:1/test: [^\n]+$"):
            await store.read_log("x")


@pytest.mark.parametrize("change", [{"user": "polyloop_no_such_role"}, {"dbname": "polyloop_no_such_db"}],
                         ids=["unknown-role", "unknown-database"])
async def test_refused_credentials_are_one_clear_store_error(pg_url, change):
    from psycopg.conninfo import make_conninfo

    async with PostgresStore(make_conninfo(pg_url, **change), connect_timeout=2) as store:
        with pytest.raises(StoreError, match=r"^cannot connect to PostgreSQL at [^\n]+$") as info:
            await store.read_log("x")
    assert next(iter(change.values())) in str(info.value)


async def test_the_schema_is_versioned_and_a_missing_or_newer_one_is_refused(pg_url, pg_conn):
    schema = f"pl_{uuid.uuid4().hex[:10]}"
    pg_conn.execute(f"CREATE SCHEMA {schema}")
    try:
        url = with_search_path(pg_url, schema)
        async with PostgresStore(url, create=False) as store:
            with pytest.raises(StoreError, match="no PolyLoop schema"):
                await store.list_runs()
        async with PostgresStore(url) as store:
            assert await store.list_runs() == []
        from polyloop.stores._pg_schema import SCHEMA_VERSION

        assert pg_conn.execute(f"SELECT version FROM {schema}.polyloop_schema").fetchall() == [(SCHEMA_VERSION,)]
        pg_conn.execute(f"UPDATE {schema}.polyloop_schema SET version = 99")
        async with PostgresStore(url) as store:
            with pytest.raises(StoreError, match="version 99, newer"):
                await store.list_runs()
    finally:
        pg_conn.execute(f"DROP SCHEMA {schema} CASCADE")


async def test_a_missing_schema_is_named_with_how_to_create_it(pg_url):
    schema = f"pl_missing_{uuid.uuid4().hex[:10]}"
    async with PostgresStore(with_search_path(pg_url, schema)) as store:
        with pytest.raises(StoreError) as info:
            await store.list_runs()
    message = str(info.value)
    assert f"the schema {schema} named by the search_path does not exist" in message
    assert f"`CREATE SCHEMA {schema};`" in message and "\n" not in message
    assert "no schema has been selected" not in message


async def test_pgoptions_names_the_schema_of_a_url_without_options(pg_url, pg_conn, monkeypatch):
    # libpq's own rule: $PGOPTIONS applies when the URL has no options; the store adds its
    # session settings and must not drop it.
    schema = f"pl_env_{uuid.uuid4().hex[:10]}"
    pg_conn.execute(f"CREATE SCHEMA {schema}")
    try:
        bare = psycopg.conninfo.make_conninfo(pg_url, options="")  # the URL less its search_path
        monkeypatch.setenv("PGOPTIONS", f"-csearch_path={schema}")
        async with PostgresStore(bare) as store:
            await store.list_runs()
        tables = pg_conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)).fetchone()
        assert tables[0] >= 3, "the store made its tables elsewhere than $PGOPTIONS says"
    finally:
        pg_conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.parametrize("batch_table", [False, True], ids=["plain-v1", "v1-with-a-lazy-batch-table"])
async def test_a_version_1_database_is_migrated_keeping_its_runs_and_manifests(pg_url, pg_conn, batch_table):
    from polyloop.stores._pg_schema import _MIGRATIONS

    schema = f"pl_{uuid.uuid4().hex[:10]}"
    pg_conn.execute(f"CREATE SCHEMA {schema}")
    try:
        url = with_search_path(pg_url, schema)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(_MIGRATIONS[1])
            conn.execute("CREATE TABLE polyloop_schema (version integer NOT NULL)")
            conn.execute("INSERT INTO polyloop_schema VALUES (1)")
            if batch_table:  # as version-1 libraries created it, beside the schema
                conn.execute(
                    "CREATE TABLE polyloop_batches (name text PRIMARY KEY, target text NOT NULL, "
                    "runs jsonb NOT NULL, updated_at timestamptz NOT NULL DEFAULT clock_timestamp())"
                )
                conn.execute("""INSERT INTO polyloop_batches (name, target, runs) VALUES ('b', 't', '{}')""")
            conn.execute("SELECT polyloop_append('old', 0, NULL, 'run_started', %s::json, true)",
                         (encode_record(RunStarted(run_id="old", goal="g")).decode().strip(),))
        async with PostgresStore(url) as store:
            assert [r.TAG for r in await store.read_log("old")] == ["run_started"]
            await store.write_intent("old", MI)
        from polyloop.stores._pg_schema import SCHEMA_VERSION

        assert pg_conn.execute(f"SELECT version FROM {schema}.polyloop_schema").fetchall() == [(SCHEMA_VERSION,)]
        names = pg_conn.execute(f"SELECT name FROM {schema}.polyloop_batches").fetchall()
        assert names == ([("b",)] if batch_table else [])
    finally:
        pg_conn.execute(f"DROP SCHEMA {schema} CASCADE")


async def test_sessions_carry_the_server_side_timeouts(store):
    async with store._conn() as conn:
        settings = {}
        for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout", "synchronous_commit"):
            settings[name] = (await (await conn.execute(f"SHOW {name}")).fetchone())[0]
    assert settings == {
        "statement_timeout": "2s",
        "lock_timeout": "666ms",
        "idle_in_transaction_session_timeout": "2s",
        "synchronous_commit": "on",
    }


def test_psycopg_is_not_imported_by_the_jsonl_only_path():
    import subprocess
    import sys

    code = "import sys, polyloop, polyloop.stores, polyloop_cli.main; print('psycopg' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_driver_error_class_is_not_leaked(pg_url):
    # psycopg errors become StoreError (a PolyLoopError) with the cause chained.
    async def main():
        async with PostgresStore(pg_url) as store:
            async with store._conn() as conn:
                await conn.execute("SELECT 1/0")

    with pytest.raises(StoreError) as info:
        asyncio.run(main())
    assert isinstance(info.value.__cause__, psycopg.Error)


async def test_verify_checks_every_run_in_the_database(store, pg_conn):
    good = fresh("vgood")
    await store.write_run_started(RunStarted(run_id=good, goal="g"))
    await store.write_intent(good, MI)
    bad = fresh("vbad")
    await store.write_run_started(RunStarted(run_id=bad, goal="g"))
    # A result without its intent: a log no correct writer produces.
    pg_conn.execute("UPDATE polyloop_runs SET next_seq = 2 WHERE run_id = %s", (bad,))
    pg_conn.execute(
        "INSERT INTO polyloop_records (run_id, seq, epoch, kind, body) VALUES (%s, 1, 0, 'model_call_result', %s::json)",
        (bad, encode_record(MR).decode().strip()),
    )
    seen = []
    report = await verify_store(store, progress=lambda done, total: seen.append((done, total)))
    verdicts = {v.run_id: v for v in report.files}
    assert verdicts[good].status == "ok"
    assert verdicts[bad].status == "corrupt" and verdicts[bad].problems[0][0] == 2
    assert verdicts[bad].path.endswith(f"/{bad}")
    assert seen[-1][0] == seen[-1][1] == len(report.files)
    assert report.failed()


async def test_more_writers_than_connections_wait_their_turn(pg_url):
    async with PostgresStore(pg_url, max_connections=2) as store:
        run_ids = [fresh(f"pool{i}") for i in range(10)]

        async def write(run_id):
            await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
            for _ in range(5):
                await store.write_step_completed(run_id, SC)

        await asyncio.gather(*(write(r) for r in run_ids))
        assert store._conns._open <= 2
        for run_id in run_ids:
            assert len(await store.read_log(run_id)) == 6
