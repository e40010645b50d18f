"""`polyloop worker --otel`: a claimed run's spans reach a real OTLP/HTTP receiver; its trace is in the database's log."""

from __future__ import annotations

from pathlib import Path

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
