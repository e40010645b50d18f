"""Tracing tests: an SDK tracer provider whose spans land in memory, and a run that crashes once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Sink:
    """A tracer provider and a meter provider whose output the test reads."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self) -> list:
        return list(self.exporter.get_finished_spans())

    def points(self) -> dict[str, list]:
        """Metric name -> its data points."""
        data = self.reader.get_metrics_data()
        out: dict[str, list] = {}
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    out.setdefault(m.name, []).extend(m.data.data_points)
        return out


@pytest.fixture
def sink() -> Iterator[Sink]:
    s = Sink()
    yield s
    s.tracer_provider.shutdown()
    s.meter_provider.shutdown()


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
