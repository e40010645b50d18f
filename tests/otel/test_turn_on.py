"""What turns tracing on without `--otel`: the standard OTEL_* variables the issue names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyloop.otel import enabled_by_env
from tests.support.cli import clean_env, polyloop

AGENT = str(Path(__file__).with_name("agents.py")) + ":agent"


@pytest.mark.parametrize("name", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                                  "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME"])
def test_each_standard_variable_turns_tracing_on(name: str) -> None:
    value = "console" if name == "OTEL_TRACES_EXPORTER" else "http://127.0.0.1:9" if "ENDPOINT" in name else "svc"
    assert enabled_by_env({name: value})
    assert not enabled_by_env({name: value, "OTEL_SDK_DISABLED": "true"})


def test_nothing_set_or_the_none_exporter_leaves_it_off() -> None:
    assert not enabled_by_env({})
    assert not enabled_by_env({"OTEL_SERVICE_NAME": "svc", "OTEL_TRACES_EXPORTER": "none"})


def test_a_service_name_alone_traces_a_run_on_the_command_line(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    # The default endpoint (localhost:4318): nobody listens there, the spans are lost after a second.
    env = clean_env(OTEL_SERVICE_NAME="invoice-agent", OTEL_EXPORTER_OTLP_TIMEOUT="1", OTEL_METRICS_EXPORTER="none")
    done = polyloop("run", AGENT, "--goal", "tell ops", "--run-id", "s", "--dir", str(runs), env=env, timeout=120)
    assert done.code == 0, done.stderr
    first = json.loads((runs / "s.jsonl").read_text().splitlines()[0])
    assert first["trace"].startswith("00-")  # traced: the run's trace context is in its log
