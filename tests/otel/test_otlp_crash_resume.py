"""End to end: a run SIGKILLed in a tool and resumed, as real `polyloop` processes with --otel, seen by
a real OTLP/HTTP receiver; then the same trace rebuilt from the log alone (`polyloop trace --to`)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import clean_env, polyloop

from .receiver import otlp_receiver

AGENT = str(Path(__file__).with_name("agents.py")) + ":agent"


def _env(tmp_path: Path, url: str, **more: str) -> dict[str, str]:
    return clean_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=url, OTEL_BSP_SCHEDULE_DELAY="20", OTEL_METRIC_EXPORT_INTERVAL="60000",
        POLYLOOP_TEST_KILL_IN="fetch", POLYLOOP_TEST_MARKS=str(tmp_path), POLYLOOP_TEST_DIE_AFTER="0.5", **more,
    )


def test_a_killed_and_resumed_run_is_one_trace_with_its_cut_spans_and_no_effect_counted_twice(tmp_path: Path) -> None:
    runs = str(tmp_path / "runs")
    with otlp_receiver() as live:
        env = _env(tmp_path, live.url)
        crashed = polyloop("run", AGENT, "--goal", "tell ops", "--run-id", "r", "--dir", runs, "--otel", env=env)
        assert crashed.code == -9, crashed.stderr
        done = polyloop("resume", "r", "--dir", runs, "--otel", env=env)
        assert done.code == 0, done.stderr
    spans = live.spans
    ids = {s.span_id for s in spans}
    assert len(ids) == len(spans), "a span was reported twice"
    assert {s.trace_id for s in spans} == {spans[0].trace_id}, "one trace"
    assert all(s.parent_id is None or s.parent_id in ids for s in spans), "every parent was reported"
    by_rid: dict[str, list] = {}
    for s in spans:
        if "polyloop.result.id" in s.attributes:
            by_rid.setdefault(s.attributes["polyloop.result.id"], []).append(s)
    assert all(len(v) == 1 for v in by_rid.values()), "no execution reported twice"
    assert set(by_rid) == {"s1-m1", "s1-a1", "s1-a2", "s2-m1", "s2-a1", "s3-m1"}
    processes = sorted(live.named("invoke_agent"), key=lambda s: s.start)
    assert [p.attributes["polyloop.process"] for p in processes] == [0, 1]
    dead, resumed = processes
    assert dead.error and dead.attributes["error.type"] == "polyloop.crashed"
    assert resumed.parent_id == dead.span_id and resumed.links == [(dead.trace_id, dead.span_id)]
    assert by_rid["s1-m1"][0].parent_id == dead.span_id  # exported by the process before it died
    assert by_rid["s1-a1"][0].attributes["polyloop.execution.state"] == "unknown"  # reported by the resume
    assert by_rid["s1-a2"][0].attributes["polyloop.replay"] is True
    assert {e[0] for e in resumed.events} >= {"polyloop.reused", "polyloop.unknown"}
    log = [json.loads(line) for line in Path(runs, "r.jsonl").read_text().splitlines()]
    keys = [r["idempotency_key"] for r in log if r.get("idempotency_key")]
    everything = json.dumps([(s.attributes, s.events) for s in spans])
    assert keys and not any(k in everything for k in keys), "no raw idempotency key"
    assert "open invoices" not in everything and "ops@example.test" not in everything, "no content"
    assert log[0]["trace"] == f"00-{dead.trace_id}-{dead.span_id}-01"
    assert [r.get("trace") for r in log if r["record"] == "resumed"] == [f"00-{dead.trace_id}-{resumed.span_id}-01"]

    # The log alone gives the same trace, span for span, and content only when asked for.
    with otlp_receiver() as again:
        sent = polyloop("trace", "r", "--dir", runs, "--to", again.url,
                        env=clean_env(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true"))
        assert sent.code == 0, sent.stderr
    assert {s.span_id for s in again.spans} == ids
    assert {s.trace_id for s in again.spans} == {dead.trace_id}
    assert "open invoices" in json.dumps([s.attributes for s in again.spans])
