"""`polyloop batch --otel`: the worker processes trace their runs, each run one trace."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import clean_env, polyloop

from .receiver import otlp_receiver

AGENT = str(Path(__file__).with_name("agents.py")) + ":agent"


def test_a_batch_with_otel_sends_one_trace_per_run(tmp_path: Path) -> None:
    goals = tmp_path / "goals.txt"
    goals.write_text("tell ops\ntell dev\n")
    with otlp_receiver() as live:
        env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=live.url, OTEL_METRIC_EXPORT_INTERVAL="60000")
        done = polyloop("batch", AGENT, str(goals), "--dir", str(tmp_path / "runs"), "--processes", "1", "--otel",
                        env=env, timeout=120)
        assert done.code == 0, done.stderr
    roots = live.named("invoke_agent")
    assert sorted(r.attributes["gen_ai.conversation.id"] for r in roots) == ["goals-00001", "goals-00002"]
    assert len({s.trace_id for s in live.spans}) == 2 and len(live.spans) == 12


def test_a_batch_refuses_an_exporter_the_extra_does_not_ship_before_any_worker_starts(tmp_path: Path) -> None:
    goals = tmp_path / "goals.txt"
    goals.write_text("tell ops\n")
    runs = tmp_path / "runs"
    for flag, env in ((["--otel"], clean_env(OTEL_EXPORTER_OTLP_PROTOCOL="grpc")),
                      ([], clean_env(OTEL_TRACES_EXPORTER="jaeger"))):  # the variable alone turns tracing on
        done = polyloop("batch", AGENT, str(goals), "--dir", str(runs), "--processes", "1", *flag, env=env,
                        timeout=120)
        assert done.code == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "polyloop[otel]" in done.stderr, done.stderr
        assert not list(runs.glob("*.jsonl")) if runs.exists() else True  # nothing ran
