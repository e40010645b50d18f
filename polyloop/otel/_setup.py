"""Tracing and metrics from the standard OTEL_* variables, and the PostgreSQL worker's metrics."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from opentelemetry import metrics

from .._trace.content import check_exporters, exporter_choice
from .._trace.content import telemetry_by_env as enabled_by_env  # noqa: F401  (re-exported)

def providers_from_env() -> tuple[Any, Any]:
    """A `TracerProvider` and a `MeterProvider` exporting as the OTEL_* variables say.

    `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER`: `otlp` (the default;
    OTLP over HTTP/protobuf to `OTEL_EXPORTER_OTLP_ENDPOINT`, default
    http://localhost:4318), `console` or `none`. The service is
    `OTEL_SERVICE_NAME` (default `polyloop`), with `OTEL_RESOURCE_ATTRIBUTES`.

    Raises:
        InvalidInputError: an exporter or protocol this extra does not ship.
    """
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    check_exporters()
    resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "polyloop"})
    tracer_provider = TracerProvider(resource=resource)
    span_exporter = _exporter("OTEL_TRACES_EXPORTER", "traces")
    if span_exporter is not None:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    readers = []
    metric_exporter = _exporter("OTEL_METRICS_EXPORTER", "metrics")
    if metric_exporter is not None:
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        readers.append(PeriodicExportingMetricReader(metric_exporter))
    return tracer_provider, MeterProvider(resource=resource, metric_readers=readers)


def _exporter(variable: str, signal: str) -> Any:
    chosen = exporter_choice(variable)
    if chosen == "none":
        return None
    if chosen == "console":
        if signal == "traces":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            return ConsoleSpanExporter()
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if signal == "traces":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()


class WorkerMetrics:
    """The PostgreSQL worker's own metrics; call these where the worker learns them.

    `takeover()` when it takes over a dead worker's run, `fenced()` when a
    write was refused because its lease was taken over (a fenced writer),
    `claim_latency(seconds)` how long a claim took, `queue_depth(n)` how many
    runs are queued; `on_event(event)` counts a `WorkerEvent` (takeovers).
    """

    def __init__(self, meter_provider: Any = None) -> None:
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("polyloop")
        self._takeovers = meter.create_counter("polyloop.worker.takeovers", "{run}",
                                               "Runs of a dead worker taken over.")
        self._fenced = meter.create_counter("polyloop.worker.fenced_rejections", "{write}",
                                            "Writes refused because the writer's lease was taken over.")
        self._claims = meter.create_histogram("polyloop.worker.claim.duration", "s", "How long a claim took.")
        self._depth = meter.create_gauge("polyloop.queue.depth", "{run}", "Runs waiting in the queue.")

    def takeover(self, count: int = 1) -> None:
        self._takeovers.add(count)

    def fenced(self, count: int = 1) -> None:
        self._fenced.add(count)

    def claim_latency(self, seconds: float) -> None:
        self._claims.record(seconds)

    def queue_depth(self, runs: int) -> None:
        self._depth.set(runs)

    def on_event(self, event: Any, worker: Any = None) -> None:
        """Count what a worker event (`polyloop.stores.WorkerEvent`) tells: a takeover, a lease
        lost to another worker (a fenced writer); and, given the `Worker`, the latency of the
        claim a `claim` or `takeover` event reports (its `claim_seconds`)."""
        kind = getattr(event, "event", None)
        if kind == "takeover":
            self.takeover()
        elif kind == "lost":
            self.fenced()
        if kind in ("claim", "takeover") and worker is not None and worker.claim_seconds:
            self.claim_latency(worker.claim_seconds[-1])

    async def sample(self, store: Any, every: float = 5.0) -> None:
        """Set the queue's depth from `store.queued()` every `every` seconds until cancelled, and once
        more as it is cancelled: a worker that ends before a look has finished still reports one."""
        try:
            while True:
                await self._look(store)
                await asyncio.sleep(every)
        except asyncio.CancelledError:
            await self._look(store)
            raise

    async def _look(self, store: Any) -> None:
        try:
            self.queue_depth(await store.queued())
        except Exception:  # noqa: BLE001  (a store that cannot answer now: the worker reports it)
            pass
