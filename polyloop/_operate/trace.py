"""`polyloop trace RUN`: the whole trace of a run, rebuilt from its log alone.

The spans are the ones a live traced run reports (`polyloop._trace.spans`,
one mapping), with the times the log recorded and the same ids, so a run
that crashed before any exporter flushed, or that was never traced, or that
was imported from another machine, is still seen end to end. The JSON
document is `trace_json`'s (docs/reference/json.md).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any
from urllib.parse import urlsplit

from .._log.errors import InvalidInputError, RunNotFoundError
from .._log.store_port import Store
from .._run.hold import read_or_none
from .._trace.spans import Span, Trace, rebuild
from .shapes import JSON_SCHEMA


async def trace_run(store: Store, run_id: str, *, content: bool = False) -> Trace:
    """The trace of `run_id` rebuilt from its log (content only when `content`).

    Raises:
        RunNotFoundError: the run has no log.
        StoreError: the store failed.
    """
    records = await read_or_none(store, run_id)
    if records is None:
        raise RunNotFoundError(run_id)
    return rebuild(records, run_id, content=content)


def otlp_traces_url(endpoint: str) -> str:
    """Where an OTLP/HTTP receiver takes traces: `endpoint` (`http://host:4318`) with `/v1/traces`
    appended, or as given when it already ends so (a trailing `/` dropped).

    Raises:
        InvalidInputError: `endpoint` is not an http:// or https:// URL with a host.
    """
    base = endpoint.strip().rstrip("/")
    try:
        parts = urlsplit(base)
        usable = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError:  # an unclosed [ipv6], a port that is no number
        usable = False
    if not usable:
        raise InvalidInputError(f"not an OTLP/HTTP receiver URL: {endpoint!r} (give http://host:4318, or the "
                                "full .../v1/traces URL)")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def stamp(nanos: int) -> str:
    """Nanoseconds since the epoch as ISO 8601 UTC with microseconds (the log's form)."""
    return _dt.datetime.fromtimestamp(nanos / 1e9, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def span_json(s: Span) -> dict[str, Any]:
    end = s.end if s.end is not None else s.start
    return {
        "name": s.name,
        "span_id": s.span_id,
        "parent_span_id": s.parent_id,
        "kind": s.kind,
        "start": stamp(s.start),
        "end": stamp(end),
        "start_unix_nano": s.start,
        "end_unix_nano": end,
        "status": "error" if s.error else "unset",
        "error_type": s.error,
        "attributes": dict(s.attributes),
        "events": [{"name": e.name, "time": stamp(e.time), "attributes": dict(e.attributes)} for e in s.events],
        "links": list(s.links),
    }


def trace_json(trace: Trace) -> dict[str, Any]:
    """`polyloop trace --json`: `{"schema", "run_id", "trace_id", "spans": [...]}`, spans in start order."""
    return {
        "schema": JSON_SCHEMA,
        "run_id": trace.run_id,
        "trace_id": trace.trace_id,
        "spans": [span_json(s) for s in sorted(trace.spans, key=lambda s: (s.start, s.process))],
    }
