"""The append statements on a real server: one statement per append or batch, every refusal explained."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest

from polyloop import (
    Intent,
    ModelCallResult,
    RunActiveError,
    RunFinished,
    RunNotFoundError,
    RunStarted,
    StepCompleted,
    StoreError,
)
from polyloop.stores import LeaseLostError

MI = Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1")


def fresh(label: str) -> str:
    return f"pgappend-{label}-{uuid.uuid4().hex[:10]}"


def calls(n: int, step: int = 1) -> list[Intent]:
    return [
        Intent(kind="action", step=step, attempt=1, result_id=f"s{step}-c{k}-a1", tool="t", args={"k": k},
               replay="never", idempotency_key=f"k{step}-{k}", call=k)
        for k in range(1, n + 1)
    ]


def rows(pg_conn, run_id: str) -> list[tuple]:
    return pg_conn.execute(
        "SELECT seq, epoch, kind, body->>'result_id' FROM polyloop_records WHERE run_id = %s ORDER BY seq",
        (run_id,),
    ).fetchall()


async def test_a_batch_is_one_transaction_with_a_number_each_and_the_holders_epoch(store, pg_conn):
    run_id = fresh("one")
    lease = await store.claim(run_id)
    async with lease:
        await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
        await store.write_intents(run_id, calls(3))
        await store.write_intent(run_id, MI)
    assert rows(pg_conn, run_id) == [
        (0, lease.epoch, "run_started", None),
        (1, lease.epoch, "intent", "s1-c1-a1"),
        (2, lease.epoch, "intent", "s1-c2-a1"),
        (3, lease.epoch, "intent", "s1-c3-a1"),
        (4, lease.epoch, "intent", "s1-m1"),
    ]
    # Rows inserted by one transaction share its id.
    (xids,) = pg_conn.execute(
        "SELECT count(DISTINCT xmin::text) FROM polyloop_records WHERE run_id = %s AND seq BETWEEN 1 AND 3",
        (run_id,),
    ).fetchone()
    assert xids == 1
    assert pg_conn.execute("SELECT next_seq FROM polyloop_runs WHERE run_id = %s", (run_id,)).fetchone() == (5,)


async def test_a_fenced_batch_writes_none_of_its_intents(store, other, pg_conn):
    run_id = fresh("fenced")
    lease = await store.claim(run_id)
    async with lease:
        await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
        pg_conn.execute("UPDATE polyloop_runs SET lease_until = clock_timestamp() WHERE run_id = %s", (run_id,))
        taken = await other.claim(run_id)
        async with taken:
            with pytest.raises(LeaseLostError, match=f"epoch {taken.epoch}"):
                await store.write_intents(run_id, calls(2))
    assert [r[2] for r in rows(pg_conn, run_id)] == ["run_started"]


async def test_a_stale_batch_writes_none_of_its_intents(store, other, pg_conn):
    run_id = fresh("stale")
    await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
    await other.read_log(run_id)
    await store.write_intent(run_id, MI)
    with pytest.raises(StoreError, match="has 2 records but this writer expected 1"):
        await other.write_intents(run_id, calls(2))
    assert [r[3] for r in rows(pg_conn, run_id)] == [None, "s1-m1"]
    # Once refused, the writer does not guess: it reads again, then appends.
    await other.read_log(run_id)
    await other.write_intents(run_id, calls(2))
    assert [r[0] for r in rows(pg_conn, run_id)] == [0, 1, 2, 3]


async def test_a_lease_expired_on_the_database_clock_is_refused(store, pg_conn):
    run_id = fresh("expired")
    lease = await store.claim(run_id)
    async with lease:
        await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
        # Still live by this process's clock; lapsed by the database's.
        pg_conn.execute("UPDATE polyloop_runs SET lease_until = clock_timestamp() WHERE run_id = %s", (run_id,))
        with pytest.raises(LeaseLostError, match="expired on the database clock"):
            await store.write_intent(run_id, MI)
    assert [r[2] for r in rows(pg_conn, run_id)] == ["run_started"]


async def test_unleased_writes_are_refused_while_someone_holds_the_run(store, other, pg_conn):
    run_id = fresh("held")
    await other.write_run_started(RunStarted(run_id=run_id, goal="g"))
    await other.read_log(run_id)
    async with store.lock(run_id):
        with pytest.raises(RunActiveError, match=store.name):
            await other.write_intents(run_id, calls(2))
        with pytest.raises(RunActiveError, match=store.name):
            await other.write_intent(run_id, MI)
    await other.read_log(run_id)
    await other.write_intent(run_id, MI)  # the hold is gone: an unleased writer may append again
    assert [r[2] for r in rows(pg_conn, run_id)] == ["run_started", "intent"]


async def test_a_run_the_database_does_not_know_is_not_found(store):
    run_id = fresh("missing")
    with pytest.raises(RunNotFoundError):
        await store.write_intents(run_id, calls(2))


async def test_a_held_run_without_a_log_takes_nothing_before_its_run_started(store, pg_conn):
    run_id = fresh("nolog")
    async with store.lock(run_id):
        with pytest.raises(RunNotFoundError):
            await store.write_intent(run_id, MI)
        with pytest.raises(RunNotFoundError):
            await store.write_intents(run_id, calls(2))
        await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
        await store.write_intents(run_id, calls(2))
    assert [r[0] for r in rows(pg_conn, run_id)] == [0, 1, 2]


async def test_a_workers_view_of_its_lease_batches_too(store, pg_conn):
    from polyloop._log.store_port import BatchingStore

    run_id = fresh("view")
    lease = await store.claim(run_id)
    async with lease:
        view = lease.store  # what a worker hands the run loop
        assert isinstance(view, BatchingStore)
        await view.write_run_started(RunStarted(run_id=run_id, goal="g"))
        await view.write_intents(run_id, calls(2))
    assert rows(pg_conn, run_id) == [(0, lease.epoch, "run_started", None),
                                     (1, lease.epoch, "intent", "s1-c1-a1"), (2, lease.epoch, "intent", "s1-c2-a1")]


async def test_the_end_marker_finishes_the_runs_queue_status(store, pg_conn):
    run_id = fresh("finish")
    async with store.lock(run_id):
        await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
        await store.write_run_finished(run_id, RunFinished(reason="final_answer", result="r", steps=0))
    assert pg_conn.execute("SELECT status FROM polyloop_runs WHERE run_id = %s", (run_id,)).fetchone() == ("finished",)


# -- a held run's unsynced records travel with its next durable one ---------------------

MR = ModelCallResult(result_id="s1-m1", output={"text": "thinking"})
STEP = StepCompleted(step=1, result_id="s1-m1", observation="done")
MI2 = Intent(kind="model_call", step=2, attempt=1, result_id="s2-m1")


def transactions(pg_conn, run_id: str) -> list[list[int]]:
    """The run's sequence numbers grouped by the transaction that inserted them, in order."""
    groups: list[list[int]] = []
    last = None
    for seq, xid in pg_conn.execute(
        "SELECT seq, xmin::text FROM polyloop_records WHERE run_id = %s ORDER BY seq", (run_id,)
    ).fetchall():
        if xid != last:
            groups.append([])
            last = xid
        groups[-1].append(seq)
    return groups


@contextlib.asynccontextmanager
async def held(store, run_id: str, *, lost: bool = False):
    """A run held by `store` with its first two records; `lost`: the lease ends inside the block."""
    lease = await store.claim(run_id)
    await lease.__aenter__()
    try:
        await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
        await store.write_intent(run_id, MI)
        yield lease
    finally:
        with contextlib.suppress(*((StoreError,) if lost else ())):
            await lease.__aexit__(None, None, None)  # no yield between the block's last write and this


async def test_unsynced_records_of_a_held_run_go_in_the_next_durable_statement(store, pg_conn):
    run_id = fresh("ride")
    async with held(store, run_id):
        await store.write_model_call_result(run_id, MR)
        await store.write_step_completed(run_id, STEP)
        await store.write_intent(run_id, MI2)
    assert [r[2] for r in rows(pg_conn, run_id)] == ["run_started", "intent", "model_call_result", "step_completed", "intent"]
    assert transactions(pg_conn, run_id) == [[0], [1], [2, 3, 4]]
    assert pg_conn.execute("SELECT next_seq FROM polyloop_runs WHERE run_id = %s", (run_id,)).fetchone() == (5,)


async def test_unsynced_records_go_on_their_own_once_the_run_waits_on_something_else(store, pg_conn):
    run_id = fresh("alone")
    async with held(store, run_id):
        await store.write_model_call_result(run_id, MR)
        for _ in range(100):  # the run waits (a tool, a guard, a backoff): the result lands meanwhile
            await asyncio.sleep(0.01)
            if len(rows(pg_conn, run_id)) == 3:
                break
        assert [r[2] for r in rows(pg_conn, run_id)] == ["run_started", "intent", "model_call_result"]
        await store.write_intent(run_id, MI2)
    assert transactions(pg_conn, run_id) == [[0], [1], [2], [3]]


async def test_the_holder_reads_its_unsynced_records_and_the_lease_ends_after_they_landed(store, other, pg_conn):
    run_id = fresh("read")
    async with held(store, run_id):
        await store.write_model_call_result(run_id, MR)
        assert [r.TAG for r in await store.read_log(run_id)] == ["run_started", "intent", "model_call_result"]
        await store.write_step_completed(run_id, STEP)
    assert [r[2] for r in rows(pg_conn, run_id)][-1] == "step_completed"
    assert [r.TAG for r in await other.read_log(run_id)][-2:] == ["model_call_result", "step_completed"]
    assert await other.holder(run_id) is None


async def test_a_fenced_holder_loses_its_unsynced_records_and_writes_nothing_after(store, other, pg_conn):
    run_id = fresh("fenced-pending")
    async with held(store, run_id, lost=True):
        await store.write_model_call_result(run_id, MR)
        # The lease ends before the result was sent (on its own while the
        # other worker claims, or with the intent): it never lands, and the
        # holder's writes are refused from then on.
        pg_conn.execute("UPDATE polyloop_runs SET lease_until = clock_timestamp() WHERE run_id = %s", (run_id,))
        taken = await other.claim(run_id)
        async with taken:
            with pytest.raises(LeaseLostError):
                await store.write_intent(run_id, MI2)
            with pytest.raises(StoreError):
                await store.write_step_completed(run_id, STEP)
    assert [r[2] for r in rows(pg_conn, run_id)] == ["run_started", "intent"]


async def test_a_failed_send_on_its_own_fails_the_runs_next_write(store, other, pg_conn):
    run_id = fresh("failed-alone")
    async with held(store, run_id, lost=True):
        pg_conn.execute("UPDATE polyloop_runs SET lease_until = clock_timestamp() WHERE run_id = %s", (run_id,))
        taken = await other.claim(run_id)
        async with taken:
            await store.write_model_call_result(run_id, MR)
            await asyncio.sleep(0.2)  # sent on its own meanwhile, and refused
            with pytest.raises(LeaseLostError, match=f"epoch {taken.epoch}"):
                await store.write_intent(run_id, MI2)
    assert [r[2] for r in rows(pg_conn, run_id)] == ["run_started", "intent"]


async def test_records_sent_together_read_back_exactly(store, other, pg_conn):
    run_id = fresh("exact")
    tricky = 'quotes " and \\ backslashes, commas, braces {"x": [1]} and é ✓\nnew line\t'
    answer = ModelCallResult(result_id="s1-m1", output={"text": tricky, "tool_call": {"name": "t", "args": {"q": tricky}}})
    step = StepCompleted(step=1, result_id="s1-m1", observation=tricky)
    async with held(store, run_id):
        await store.write_model_call_result(run_id, answer)
        await store.write_step_completed(run_id, step)
        await store.write_intents(run_id, calls(2, step=2))
    assert transactions(pg_conn, run_id) == [[0], [1], [2, 3, 4, 5]]
    records = await other.read_log(run_id)
    assert records[2:4] == [answer, step]
    assert [r.TAG for r in records] == ["run_started", "intent", "model_call_result", "step_completed", "intent", "intent"]
    assert pg_conn.execute(
        "SELECT body->'output'->>'text' FROM polyloop_records WHERE run_id = %s AND seq = 2", (run_id,)
    ).fetchone() == (tricky,)
