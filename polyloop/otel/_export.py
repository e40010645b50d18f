"""A trace rebuilt from a log, handed to an OpenTelemetry exporter with its recorded ids and times."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SdkEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from .._operate.trace import otlp_traces_url
from .._trace.spans import Trace

_SCOPE = InstrumentationScope("polyloop")


def readable_spans(trace: Trace, resource: Resource | None = None) -> list[ReadableSpan]:
    """Every span of a rebuilt trace as the SDK's `ReadableSpan`, ready for any span exporter
    (none for a log without records)."""
    if trace.trace_id is None:
        return []
    tid = int(trace.trace_id, 16)
    resource = resource or Resource.create({"service.name": "polyloop"})

    def ctx(span_id: str) -> SpanContext:
        return SpanContext(tid, int(span_id, 16), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))

    out = []
    for s in trace.spans:
        status = Status(StatusCode.ERROR, s.error) if s.error else Status(StatusCode.UNSET)
        out.append(ReadableSpan(
            name=s.name, context=ctx(s.span_id), parent=ctx(s.parent_id) if s.parent_id else None,
            resource=resource, attributes=dict(s.attributes),
            events=[SdkEvent(e.name, e.attributes, e.time) for e in s.events],
            links=[Link(ctx(i)) for i in s.links],
            kind=SpanKind.CLIENT if s.kind == "client" else SpanKind.INTERNAL,
            status=status, start_time=s.start, end_time=s.end if s.end is not None else s.start,
            instrumentation_scope=_SCOPE,
        ))
    return out


def export(trace: Trace, endpoint: str, *, timeout: float = 10.0) -> None:
    """Send a rebuilt trace to an OTLP/HTTP receiver (`http://host:4318`, or the full `/v1/traces` URL).

    A trace without spans (a log without records) sends nothing.

    Raises:
        InvalidInputError: `endpoint` is not an http:// or https:// URL.
        OSError: the receiver refused or could not be reached.
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    url = otlp_traces_url(endpoint)
    if not trace.spans:
        return
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout)
    try:
        result = exporter.export(readable_spans(trace, _resource()))
    finally:
        exporter.shutdown()
    if result is not SpanExportResult.SUCCESS:
        raise OSError(f"the OTLP receiver at {url} did not take the trace")


def _resource() -> Any:
    import os

    return Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "polyloop"})
