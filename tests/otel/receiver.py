"""A real OTLP/HTTP receiver for the tests: decodes what exporters POST to /v1/traces and /v1/metrics."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@dataclass
class Received:
    """One span as the receiver decoded it (ids in hex)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    links: list[tuple[str, str]]
    error: bool
    start: int
    end: int


@dataclass
class Receiver:
    url: str
    spans: list[Received] = field(default_factory=list)
    metric_posts: int = 0
    metrics: set[str] = field(default_factory=set)  # the names of the metrics received

    def named(self, prefix: str) -> list[Received]:
        return [s for s in self.spans if s.name.startswith(prefix)]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def _decode(body: bytes) -> list[Received]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(Received(
                    name=s.name, trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                    parent_id=s.parent_span_id.hex() or None, attributes=_attrs(s.attributes),
                    events=[(e.name, _attrs(e.attributes)) for e in s.events],
                    links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                    error=s.status.code == 2, start=s.start_time_unix_nano, end=s.end_time_unix_nano,
                ))
    return out


def _metric_names(body: bytes) -> set[str]:
    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    return {m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


@contextmanager
def otlp_receiver(status: int = 200) -> Iterator[Receiver]:
    """An OTLP/HTTP (protobuf) receiver on a free port of 127.0.0.1, for as long as the block runs
    (answering `status`: 400 refuses every export for good)."""
    lock = threading.Lock()
    receiver = Receiver("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802  (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                if self.path == "/v1/traces":
                    receiver.spans.extend(_decode(body))
                else:
                    receiver.metric_posts += 1
                    receiver.metrics |= _metric_names(body)
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
