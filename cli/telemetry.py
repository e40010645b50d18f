"""`--otel`: report the runs a command runs as OpenTelemetry spans and metrics (polyloop[otel])."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, Any

import typer

from polyloop.for_cli import check_exporters, telemetry_by_env

from .errors import BadInput

Otel = Annotated[
    bool,
    typer.Option(
        "--otel",
        help="Send the run's spans and metrics to OpenTelemetry, as the OTEL_* variables say "
        "(default: OTLP/HTTP to localhost:4318); needs polyloop[otel]. Also on when "
        "OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME or OTEL_TRACES_EXPORTER is set.",
    ),
]

class Wrap:
    """Wraps a store so its runs are traced (the store itself when telemetry is off), and counts
    what a PostgreSQL worker's events tell (`polyloop.otel.WorkerMetrics`)."""

    def __init__(self, wrap: Callable[[Any], Any] | None = None, worker: Any = None) -> None:
        self._wrap = wrap
        self._worker = worker

    def __call__(self, store: Any) -> Any:
        return self._wrap(store) if self._wrap is not None else store

    def worker_event(self, event: Any, worker: Any = None) -> None:
        if self._worker is not None:
            self._worker.on_event(event, worker)

    @property
    def sampler(self) -> Callable[[Any], Awaitable[None]] | None:
        """What samples a worker's store for the metrics (the queue's depth); None when off."""
        return self._worker.sample if self._worker is not None else None


@contextlib.contextmanager
def telemetry(asked: bool) -> Iterator[Wrap]:
    """Yield what wraps a store so its runs are traced (the store itself when telemetry is off);
    flush and shut the exporters down on the way out."""
    if not asked and not telemetry_by_env():
        yield Wrap()
        return
    try:
        from polyloop import otel
    except ImportError:
        if asked:
            raise BadInput("--otel needs the otel extra: pip install 'polyloop[otel]'") from None
        sys.stderr.write("polyloop: OTEL_* variables are set, but polyloop[otel] is not installed: "
                         "no spans are sent\n")
        yield Wrap()
        return
    try:
        tracer_provider, meter_provider = otel.providers_from_env()
    except ValueError as exc:  # InvalidInputError: an exporter or protocol the extra does not ship
        raise BadInput(str(exc)) from None
    try:
        yield Wrap(otel.instrumenter(tracer_provider=tracer_provider, meter_provider=meter_provider),
                   otel.WorkerMetrics(meter_provider))
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()


def hand_down(asked: bool) -> None:
    """Ask the processes this one starts (a batch's workers) to trace their runs when `asked`
    (--otel); refused (exit 2) without polyloop[otel], and, asked or turned on by the OTEL_*
    variables, an exporter or protocol the extra does not ship: refused here, not in each worker."""
    if asked:
        try:
            import polyloop.otel  # noqa: F401
        except ImportError:
            raise BadInput("--otel needs the otel extra: pip install 'polyloop[otel]'") from None
        os.environ["POLYLOOP_OTEL"] = "1"
    if telemetry_by_env():
        try:
            check_exporters()
        except ValueError as exc:  # InvalidInputError
            raise BadInput(str(exc)) from None
