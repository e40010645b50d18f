"""Runs in your tracing tool: OpenTelemetry spans and metrics of runs, true across crashes.

Needs the `otel` extra (`pip install 'polyloop[otel]'`); the rest of
PolyLoop never imports OpenTelemetry. The spans follow the OpenTelemetry
semantic conventions for generative AI (docs/how-to/see-runs-in-your-tracing-tool.md):
one `invoke_agent {agent}` span per process's share of a run, a
`chat {model}` span per model call attempt and an `execute_tool {tool}`
span per tool execution, all derived from the records the run writes, so a
result reused on resume is never reported as executed again.

    store = polyloop.otel.instrument(JsonlStore("runs"), tracer_provider=provider)
    await agent.run("goal", store=store)

`rebuild(records, run_id)` and `export(...)` give the whole trace of a run
from its log alone (`polyloop trace RUN`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._extras import needs_extra
from .._trace.content import capture_from_env
from .._trace.spans import Span, Trace, rebuild

with needs_extra("opentelemetry", "otel", "polyloop.otel needs OpenTelemetry"):
    from ._export import export, readable_spans
    from ._observe import Telemetry, TracedStore
    from ._setup import WorkerMetrics, enabled_by_env, providers_from_env

__all__ = [
    "Span",
    "Trace",
    "TracedStore",
    "WorkerMetrics",
    "enabled_by_env",
    "export",
    "instrument",
    "instrumenter",
    "observe_from_env",
    "providers_from_env",
    "readable_spans",
    "rebuild",
]


def instrument(
    store: Any, *, tracer_provider: Any = None, meter_provider: Any = None, capture_content: bool | None = None
) -> TracedStore:
    """`store`, reporting the runs written through it as spans and metrics.

    Args:
        store: any store (`JsonlStore`, `PostgresStore`, `MemoryStore`, yours).
        tracer_provider: where spans go (default: the global one,
            `opentelemetry.trace.get_tracer_provider()`).
        meter_provider: where metric points go (default: the global one).
        capture_content: record message and argument content
            (`gen_ai.output.messages`, `gen_ai.tool.call.arguments`,
            `gen_ai.tool.call.result`); default: what
            `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` says (off).
            An idempotency key is never recorded, only its SHA-256.
    """
    content = capture_from_env() if capture_content is None else capture_content
    return TracedStore(store, Telemetry(tracer_provider, meter_provider, content=content))


def instrumenter(
    *, tracer_provider: Any = None, meter_provider: Any = None, capture_content: bool | None = None
) -> Callable[[Any], TracedStore]:
    """What `instrument`s many stores with one tracer and one set of instruments (a worker's runs,
    `Worker(observe=...)`)."""
    content = capture_from_env() if capture_content is None else capture_content
    telemetry = Telemetry(tracer_provider, meter_provider, content=content)
    return lambda store: TracedStore(store, telemetry)


def observe_from_env(store: Any) -> tuple[TracedStore, Callable[[], None]]:
    """`store` traced with exporters from the OTEL_* variables, and what flushes and shuts them
    down (a batch's worker processes, under `polyloop batch --otel`)."""
    tracer_provider, meter_provider = providers_from_env()

    def shutdown() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()

    def flush() -> None:  # each run's spans as it lets go: a batch's workers are killed at its end
        tracer_provider.force_flush()
        meter_provider.force_flush()

    telemetry = Telemetry(tracer_provider, meter_provider, content=capture_from_env())
    return TracedStore(store, telemetry, on_release=flush), shutdown
