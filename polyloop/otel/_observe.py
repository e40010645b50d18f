"""The live observer: a store that reports, as SDK spans and metric points, the records a run writes.

`TracedStore` forwards everything to the store it wraps; its `write_*`
methods first feed the record to the run's `polyloop._trace.spans.Trace`
(the one mapping from records to spans) and carry out what it says with the
OpenTelemetry SDK. A run's first `invoke_agent` span and each resume's are
recorded in the log (`trace`, log format 1.4) before the record is written,
so every later process continues the same trace. Only installed when
tracing is on: a run without it never reaches this module.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from .._log.records import Record, Resumed, RunStarted
from .._log.store_port import capabilities_of
from .._trace import names as N
from .._trace.spans import Change, Span, Trace, derived_id, traceparent

_log = logging.getLogger("polyloop.otel")
_HISTORIC = (N.ERROR_CUT, N.ERROR_CRASHED)  # spans a crashed process could not report: its resumer does


class _Chosen(IdGenerator):
    """The tracer's id generator, made to hand out the ids the mapping chose when asked to."""

    def __init__(self, inner: IdGenerator) -> None:
        self.inner = inner
        self.span: int | None = None
        self.trace: int | None = None

    def generate_span_id(self) -> int:
        chosen, self.span = self.span, None
        return chosen if chosen is not None else self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        chosen, self.trace = self.trace, None
        return chosen if chosen is not None else self.inner.generate_trace_id()


class Telemetry:
    """A tracer and the instruments of a run's metrics, with what to do with each `Change`."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None, *, content: bool = False) -> None:
        self.content = content
        self.tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer("polyloop")
        inner = getattr(self.tracer, "id_generator", None)  # an SDK tracer: the ids can be chosen
        self.ids = _Chosen(inner) if isinstance(inner, IdGenerator) else None
        if self.ids is not None:
            self.tracer.id_generator = self.ids
        self._lock = threading.Lock()
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("polyloop")
        self.instruments: dict[str, Any] = {
            N.M_TOKENS: gen_ai_metrics.create_gen_ai_client_token_usage(meter),
            N.M_DURATION: gen_ai_metrics.create_gen_ai_client_operation_duration(meter),
            N.M_STARTED: meter.create_counter(N.M_STARTED, "{run}", "Runs started."),
            N.M_FINISHED: meter.create_counter(N.M_FINISHED, "{run}", "Runs finished, by reason."),
            N.M_STOPPED: meter.create_counter(N.M_STOPPED, "{run}", "Runs stopped resumable, by cause."),
            N.M_RESUMES: meter.create_counter(N.M_RESUMES, "{resume}", "Resumes that went on to act."),
            N.M_UNKNOWN: meter.create_counter(N.M_UNKNOWN, "{execution}",
                                              "Executions a resume found cut by a crash (outcome unknown)."),
            N.M_REPLAYS: meter.create_counter(N.M_REPLAYS, "{execution}",
                                              "Attempts made again after one whose outcome was unknown."),
            N.M_WAITING: meter.create_up_down_counter(N.M_WAITING, "{request}", "Tool calls waiting for a person."),
            N.M_WAIT_AGE: meter.create_histogram(N.M_WAIT_AGE, "s", "How long a tool call waited for a person."),
        }
        self.live: dict[tuple[str, str], Any] = {}  # (run id, span key) -> the SDK span

    # -- changes -----------------------------------------------------------------------

    def apply(self, run: Trace, changes: list[Change]) -> None:
        for c in changes:
            if c.op == "metric":
                instrument = self.instruments[c.metric]
                (instrument.add if hasattr(instrument, "add") else instrument.record)(c.amount, c.attributes or {})
            elif c.op == "open" and c.span is not None and c.span.live:
                self._open(run, c.span)
            elif c.op == "event" and c.span is not None and c.event is not None:
                sdk = self.live.get((run.run_id, c.span.key))
                if sdk is not None:
                    sdk.add_event(c.event.name, c.event.attributes, timestamp=c.event.time)
            elif c.op == "close" and c.span is not None:
                self._close(run, c.span)

    def _open(self, run: Trace, span: Span) -> None:
        assert run.trace_id is not None
        if span.parent_id is None:  # the run's first span: under the caller's span, if there is one
            parent_ctx = otel_context.get_current()
            current = trace.get_current_span(parent_ctx).get_span_context()
            if current.is_valid:
                run.trace_id = format(current.trace_id, "032x")
                span.span_id = derived_id(run.trace_id, span.key)
        else:
            parent = self.live.get((run.run_id, f"p{span.process}")) if span.key != f"p{span.process}" else None
            parent_ctx = trace.set_span_in_context(parent) if parent is not None else _remote(run.trace_id, span.parent_id)
        sdk = self._start(run.trace_id, span, parent_ctx)
        got = sdk.get_span_context()
        if got.is_valid:
            run.trace_id, span.span_id = format(got.trace_id, "032x"), format(got.span_id, "016x")
        self.live[(run.run_id, span.key)] = sdk

    def _start(self, trace_id: str, span: Span, parent_ctx: Any) -> Any:
        links = [Link(_context(trace_id, s)) for s in span.links]
        kind = SpanKind.CLIENT if span.kind == "client" else SpanKind.INTERNAL
        with self._lock:
            if self.ids is not None:
                self.ids.span, self.ids.trace = int(span.span_id, 16), int(trace_id, 16)
            sdk = self.tracer.start_span(span.name, context=parent_ctx, kind=kind, attributes=span.attributes,
                                         links=links, start_time=span.start)
            if self.ids is not None:
                self.ids.span = self.ids.trace = None
        for e in span.events:
            sdk.add_event(e.name, e.attributes, timestamp=e.time)
        return sdk

    def _close(self, run: Trace, span: Span) -> None:
        sdk = self.live.pop((run.run_id, span.key), None)
        if sdk is None:
            if span.live or span.error not in _HISTORIC or run.trace_id is None:
                return
            # A span of a process that died: report it as what it is, from the log.
            parent = _remote(run.trace_id, span.parent_id) if span.parent_id else otel_context.Context()
            sdk = self._start(run.trace_id, span, parent)
        else:
            sdk.set_attributes(span.attributes)
        if span.error is not None:
            sdk.set_status(Status(StatusCode.ERROR, span.error))
        sdk.end(end_time=span.end)

    def abandon(self, run_id: str) -> None:
        """Forget what is open of `run_id` (its spans are never ended: a resume reports them)."""
        for key in [k for k in self.live if k[0] == run_id]:
            del self.live[key]


def _context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _remote(trace_id: str, span_id: str) -> Any:
    return trace.set_span_in_context(NonRecordingSpan(_context(trace_id, span_id)))


def _now() -> int:
    return time.time_ns()


class TracedStore:
    """A store whose runs are traced (`polyloop.otel.instrument` makes one); everything else is the store's.

    Capabilities, reads and every other method are the wrapped store's. A
    write first reports what its record means (spans, events, metrics), then
    goes to the store. The `run_started` and `resumed` records carry the
    `traceparent` of their process's span (`trace`, log format 1.4).
    """

    def __init__(self, store: Any, telemetry: Telemetry, *, on_release: Any = None) -> None:
        self._inner = store
        self._telemetry = telemetry
        self._on_release = on_release  # e.g. flush the exporters: a batch kills its workers at the end
        self._runs: dict[str, Trace] = {}
        self._untraced: set[str] = set()  # runs whose tracing failed: they go on, unreported
        self.capabilities = capabilities_of(store)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> TracedStore:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        self.close()
        return await self._inner.__aexit__(*exc)

    @property
    def wrapped(self) -> Any:
        """The store this one reports for."""
        return self._inner

    async def _seen(self, run_id: str, record: Record) -> Record:
        """`record` as it is to be written, after reporting what it means.

        Tracing never fails a run: an error of the mapping, the SDK or an
        exporter stops the tracing of that run (said once, as a warning)
        and the record is written as it would be untraced.
        """
        if run_id in self._untraced:
            return record
        run = self._runs.get(run_id)
        if run is None:
            epoch = self._inner.lease_epoch(run_id) if self.capabilities.fencing else None
            history = [] if isinstance(record, RunStarted) else list(await self._inner.read_log(run_id))
            try:
                run = Trace(run_id, content=self._telemetry.content, live=True, lease_epoch=epoch)
                for old in history:
                    run.feed(old)
                run.go_live()
            except Exception as exc:
                self._give_up(run_id, exc)
                return record
            self._runs[run_id] = run
        try:
            self._telemetry.apply(run, run.feed(record))
            if isinstance(record, (RunStarted, Resumed)) and run.processes and run.processes[-1].live:
                assert run.trace_id is not None
                record = replace(record, trace=traceparent(run.trace_id, run.processes[-1].span_id))
        except Exception as exc:
            self._give_up(run_id, exc)
        return record

    def _give_up(self, run_id: str, exc: Exception) -> None:
        self._runs.pop(run_id, None)
        self._untraced.add(run_id)
        with contextlib.suppress(Exception):
            self._telemetry.abandon(run_id)
        _log.warning("polyloop: tracing of run %s stopped (%s: %s); the run goes on untraced",
                     run_id, type(exc).__name__, exc)

    def release(self, run_id: str, error: str | None = None) -> None:
        """This process lets the run go: end its `invoke_agent` span."""
        self._untraced.discard(run_id)
        run = self._runs.pop(run_id, None)
        if run is not None:
            try:
                self._telemetry.apply(run, run.end_process(_now(), error))
                self._telemetry.abandon(run_id)
                if self._on_release is not None:
                    self._on_release()
            except Exception as exc:
                _log.warning("polyloop: the trace of run %s could not be ended (%s: %s)",
                             run_id, type(exc).__name__, exc)

    def close(self) -> None:
        """End the span of every run this store still reports for."""
        for run_id in list(self._runs):
            self.release(run_id)

    @contextlib.asynccontextmanager
    async def _held(self, run_id: str) -> AsyncIterator[Any]:
        async with self._inner.lock(run_id) as taken:
            try:
                yield taken
            finally:
                self.release(run_id)

    def lock(self, run_id: str) -> Any:
        return self._held(run_id)

    async def write_run_started(self, record: RunStarted) -> None:
        await self._inner.write_run_started(await self._seen(record.run_id, record))

    async def write_intents(self, run_id: str, records: Sequence[Any]) -> None:
        for r in records:
            await self._seen(run_id, r)
        await self._inner.write_intents(run_id, records)


def _writer(name: str) -> Any:
    async def write(self: TracedStore, run_id: str, record: Any) -> None:
        await getattr(self._inner, name)(run_id, await self._seen(run_id, record))

    write.__name__ = name
    write.__doc__ = f"`{name}` of the wrapped store, after reporting what the record means."
    return write


for _name in ("write_intent", "write_model_call_result", "write_step_completed", "write_run_finished",
              "write_resolution", "write_guard_check", "write_action_result", "write_approval_request",
              "write_decision", "write_checkpoint_accepted", "write_resumed", "write_crash_loop_accepted",
              "write_artifact", "write_run_stopped"):
    setattr(TracedStore, _name, _writer(_name))
