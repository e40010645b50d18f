"""`polyloop worker --otel`: a claimed run's spans reach a real OTLP/HTTP receiver; its trace is in the database's log."""

from __future__ import annotations

from pathlib import Path

import psycopg
from pg_clock import lapse
from support import TESTS
from tests.otel.receiver import otlp_receiver
from tests.support.cli import clean_env, polyloop

AGENT = str(Path(TESTS) / "otel" / "agents.py") + ":agent"


def test_a_worker_with_otel_traces_the_runs_it_claims(own_db) -> None:
    assert polyloop("submit", AGENT, "--goal", "tell ops", "--run-id", "w1", "--store", own_db).code == 0
    with otlp_receiver() as live:
        env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=live.url, OTEL_METRIC_EXPORT_INTERVAL="60000")
        done = polyloop("worker", "--store", own_db, "--until-idle", "--otel", env=env, timeout=120)
        assert done.code == 0, done.stderr
    names = sorted(s.name.split(" ")[0] for s in live.spans)
    assert names == ["chat"] * 3 + ["execute_tool"] * 2 + ["invoke_agent"]
    assert len({s.trace_id for s in live.spans}) == 1
    assert live.metric_posts >= 1  # the worker's metrics were flushed on the way out
    # Its own: how long the claim took, and the queue's depth (sampled while it ran).
    assert {"polyloop.worker.claim.duration", "polyloop.queue.depth"} <= live.metrics, live.metrics
    assert "gen_ai.client.operation.duration" in live.metrics, live.metrics
    shown = polyloop("trace", "w1", "--store", own_db, "--json")
    assert shown.code == 0, shown.stderr
    assert shown.json()["trace_id"] == live.spans[0].trace_id  # recorded in the log, so the trace is the same


def test_a_workers_spans_carry_its_lease_epoch_and_a_takeover_carries_the_higher_one(own_db, tmp_path) -> None:
    assert polyloop("submit", AGENT, "--goal", "tell ops", "--run-id", "w2", "--store", own_db).code == 0
    with otlp_receiver() as live:
        env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=live.url, OTEL_BSP_SCHEDULE_DELAY="20",
                        OTEL_METRIC_EXPORT_INTERVAL="60000", POLYLOOP_TEST_KILL_IN="fetch",
                        POLYLOOP_TEST_MARKS=str(tmp_path), POLYLOOP_TEST_DIE_AFTER="0.5")
        # The first worker dies in the run's first tool call, holding a long lease nobody renews.
        dead = polyloop("worker", "--store", own_db, "--until-idle", "--otel", "--lease", "120", env=env, timeout=120)
        assert dead.code == -9, dead.stderr
        with psycopg.connect(own_db, autocommit=True) as conn:
            lapse(conn, "w2")  # its lease runs out now: the next worker takes the run over
            [(first,)] = conn.execute("SELECT DISTINCT epoch FROM polyloop_records WHERE run_id = 'w2'").fetchall()
        done = polyloop("worker", "--store", own_db, "--until-idle", "--otel", "--json", env=env, timeout=120)
        assert done.code == 0, done.stderr
        with psycopg.connect(own_db, autocommit=True) as conn:
            epochs = conn.execute("SELECT DISTINCT epoch FROM polyloop_records WHERE run_id = 'w2' "
                                  "ORDER BY epoch").fetchall()
    assert '"takeover"' in done.stdout, done.stdout
    assert "polyloop.worker.takeovers" in live.metrics, live.metrics  # the taking-over worker's metric, flushed at exit
    second = first + 1
    assert epochs == [(first,), (second,)]  # the writes of each holder, fenced by its epoch
    rid = {s.attributes.get("polyloop.result.id"): s for s in live.spans}
    processes = {s.attributes["polyloop.process"]: s for s in live.named("invoke_agent")}
    # The dead worker's own spans, exported before it died, carry its epoch.
    assert rid["s1-m1"].attributes["polyloop.lease.epoch"] == first
    # The taking-over worker's span and every execution under it carry the higher one.
    assert processes[1].attributes["polyloop.lease.epoch"] == second
    for key in ("s1-a2", "s2-m1", "s2-a1", "s3-m1"):
        assert rid[key].attributes["polyloop.lease.epoch"] == second, key
        assert rid[key].parent_id == processes[1].span_id
    # What it reports for the dead worker from the log (the cut call, the crashed process) claims no
    # epoch: the log does not say which lease wrote it.
    assert rid["s1-a1"].attributes["error.type"] == "polyloop.unknown"
    assert "polyloop.lease.epoch" not in rid["s1-a1"].attributes
    assert processes[0].attributes["error.type"] == "polyloop.crashed"
    assert "polyloop.lease.epoch" not in processes[0].attributes


async def test_a_run_held_directly_on_postgresql_carries_its_lease_epoch_too(own_db) -> None:
    from polyloop import Agent, ScriptedModel
    from polyloop.otel import instrument
    from polyloop.stores import PostgresStore
    from tests.otel.conftest import Sink

    sink = Sink()
    agent = Agent(model=ScriptedModel([{"final": "done"}]))
    async with PostgresStore(own_db) as store:
        assert store.capabilities.fencing and store.lease_epoch("d1") is None  # held by nobody here
        await agent.run("go", run_id="d1", store=instrument(store, tracer_provider=sink.tracer_provider))
        assert store.lease_epoch("d1") is None  # let go
    with psycopg.connect(own_db) as conn:
        [(epoch,)] = conn.execute("SELECT DISTINCT epoch FROM polyloop_records WHERE run_id = 'd1'").fetchall()
    assert {s.name.split(" ")[0]: s.attributes.get("polyloop.lease.epoch") for s in sink.spans()} == {
        "invoke_agent": epoch, "chat": epoch}
