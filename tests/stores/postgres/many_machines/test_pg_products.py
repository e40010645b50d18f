"""Intermediate products (`ctx.artifacts`) on PostgresStore: chunked, content-addressed, fenced, verified."""

from __future__ import annotations

import asyncio
import hashlib
import os
import uuid

import pytest

from polyloop import Agent, ToolContext, tool
from polyloop._log.records import RunStarted
from polyloop._operate.verify import verify_store
from polyloop import StoreError
from polyloop.stores import LeaseLostError, PostgresStore
from polyloop.stores._pg_products import CHUNK
from polyloop._log.model_port import ScriptedModel


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_a_large_product_is_chunked_streamed_and_read_back_whole(store, pg_conn):
    run_id = fresh("big")
    data = os.urandom(CHUNK * 3 + 17)
    await store.put_product(run_id, "big.bin", data)
    digest = hashlib.sha256(data).hexdigest()
    rows = pg_conn.execute(
        "SELECT n, length(data) FROM polyloop_product_chunks WHERE sha256 = %s ORDER BY n", (digest,)
    ).fetchall()
    assert rows == [(0, CHUNK), (1, CHUNK), (2, CHUNK), (3, 17)]
    assert await store.get_product(run_id, "big.bin") == data
    streamed = [chunk async for chunk in store.product_chunks(run_id, "big.bin")]
    assert [len(c) for c in streamed] == [CHUNK, CHUNK, CHUNK, 17] and b"".join(streamed) == data


async def test_equal_products_share_their_chunks_and_a_replaced_ones_are_deleted(store, pg_conn):
    one, two = fresh("a"), fresh("b")
    await store.put_product(one, "x", b"same bytes")
    await store.put_product(two, "y", b"same bytes")
    digest = hashlib.sha256(b"same bytes").hexdigest()
    count = "SELECT count(*) FROM polyloop_product_chunks WHERE sha256 = %s"
    assert pg_conn.execute(count, (digest,)).fetchone()[0] == 1
    await store.put_product(one, "x", b"other")
    assert pg_conn.execute(count, (digest,)).fetchone()[0] == 1  # run two still references it
    await store.put_product(two, "y", b"")
    assert pg_conn.execute(count, (digest,)).fetchone()[0] == 0
    assert await store.get_product(two, "y") == b""
    assert await store.get_product(one, "x") == b"other"


async def test_a_product_is_fenced_by_the_lease(store, other, pg_conn):
    run_id = fresh("fence")
    lease = await store.claim(run_id)
    async with lease:
        await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
        await store.put_product(run_id, "mine", b"1")
        pg_conn.execute("UPDATE polyloop_runs SET lease_until = clock_timestamp() WHERE run_id = %s", (run_id,))
        taken = await other.claim(run_id)
        async with taken:
            with pytest.raises(LeaseLostError):
                await store.put_product(run_id, "mine", b"2 from the fenced-out holder")
            await other.put_product(run_id, "mine", b"3")
    assert await store.get_product(run_id, "mine") == b"3"


async def test_a_writer_without_a_lease_is_refused_while_another_holds_the_run(store, other):
    run_id = fresh("held")
    async with other.lock(run_id):
        await other.write_run_started(RunStarted(run_id=run_id, goal="g"))
        with pytest.raises(Exception, match="active|held|holds"):
            await store.put_product(run_id, "p", b"x")


async def test_the_quota_of_a_run_refuses_a_product_and_writes_nothing(pg_url):
    run_id = fresh("quota")
    async with PostgresStore(pg_url, lease=2, product_quota=10) as store:
        await store.put_product(run_id, "a", b"123456")
        await store.put_product(run_id, "a", b"1234567890")  # replaces: counted instead of the old one
        with pytest.raises(StoreError, match="quota of 10"):
            await store.put_product(run_id, "b", b"1")
        assert await store.get_product(run_id, "b") is None


async def test_verify_store_checks_every_product_against_its_hash(store, pg_conn):
    run_id = fresh("verify")

    @tool(replay="safe")
    def keep(ctx: ToolContext) -> object:
        return ctx.artifacts.write("kept.txt", "kept " * 100_000)

    agent = Agent(model=ScriptedModel([{"tool": "keep", "args": {}}, {"final": "ok"}]), tools=[keep])
    result = await agent.run("keep", run_id=run_id, store=store)
    assert result.text == "ok"
    report = await verify_store(store)
    mine = [f for f in report.files if f.run_id == run_id]
    assert mine[0].status == "ok" and mine[0].products[0].state == "ok"
    # Someone rewrites a stored chunk behind the library's back: the content no longer has its address.
    pg_conn.execute(
        "UPDATE polyloop_product_chunks SET data = 'tampered'::bytea WHERE sha256 = "
        "(SELECT sha256 FROM polyloop_products WHERE run_id = %s) AND n = 1", (run_id,),
    )
    report = await verify_store(store)
    bad = [f for f in report.files if f.run_id == run_id][0]
    assert bad.status == "bad_product" and "altered" in bad.problems[0][1]
    pg_conn.execute("DELETE FROM polyloop_products WHERE run_id = %s", (run_id,))
    bad = [f for f in (await verify_store(store)).files if f.run_id == run_id][0]
    assert bad.status == "bad_product" and "missing" in bad.problems[0][1]


async def test_concurrent_writers_of_the_same_bytes_and_their_replacement_never_lose_chunks(pg_url):
    async with PostgresStore(pg_url, lease=5) as a, PostgresStore(pg_url, lease=5) as b:
        runs = [fresh("race") for _ in range(6)]
        blob = os.urandom(CHUNK + 5)

        async def churn(store: PostgresStore, run_id: str) -> None:
            for i in range(4):
                await store.put_product(run_id, "p", blob if i % 2 == 0 else b"other %d" % i)
            await store.put_product(run_id, "p", blob)

        await asyncio.gather(*(churn(a if i % 2 else b, r) for i, r in enumerate(runs)))
        for run_id in runs:
            assert await a.get_product(run_id, "p") == blob


async def test_inspect_and_resume_hash_a_product_a_chunk_at_a_time_never_reading_it_whole(pg_url, pg_conn):
    from polyloop import inspect_run

    whole: list[str] = []

    class Watched(PostgresStore):
        async def get_product(self, run_id, name):
            data = await super().get_product(run_id, name)
            if data:  # (an empty product, or none, may be asked whole: it costs nothing)
                whole.append(name)
            return data

    @tool(replay="safe")
    def keep(ctx: ToolContext) -> object:
        return ctx.artifacts.write("big.bin", bytes(range(256)) * (CHUNK // 256) * 3 + b"tail")

    run_id = fresh("streamed")
    async with Watched(pg_url, lease=5) as store:
        agent = Agent(model=ScriptedModel([{"tool": "keep", "args": {}}, {"final": "ok"}]), tools=[keep])
        await agent.run("g", run_id=run_id, store=store)
        whole.clear()  # what the run itself read is not the check
        report = await inspect_run(store, run_id)
        assert [(a.ref.name, a.state) for a in report.artifacts] == [("big.bin", "ok")]
        pg_conn.execute(
            "UPDATE polyloop_product_chunks SET data = overlay(data placing '\\xff'::bytea from 1 for 1) "
            "WHERE n = 2 AND sha256 = (SELECT sha256 FROM polyloop_products WHERE run_id = %s)", (run_id,))
        report = await inspect_run(store, run_id)
        assert [(a.ref.name, a.state) for a in report.artifacts] == [("big.bin", "altered")]
        pg_conn.execute("DELETE FROM polyloop_products WHERE run_id = %s", (run_id,))
        report = await inspect_run(store, run_id)
        assert [(a.ref.name, a.state) for a in report.artifacts] == [("big.bin", "missing")]
    assert whole == [], "a product was read whole to be checked"
