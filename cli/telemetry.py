"""`--otel`: report the runs a command runs as OpenTelemetry spans and metrics (polyloop[otel])."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import typer

from polyloop.for_cli import telemetry_by_env

from .errors import BadInput

Otel = Annotated[
    bool,
    typer.Option(
        "--otel",
        help="Send the run's spans and metrics to OpenTelemetry, as the OTEL_* variables say "
        "(default: OTLP/HTTP to localhost:4318); needs polyloop[otel]. Also on when "
        "OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER is set.",
    ),
]

Wrap = Callable[[Any], Any]


@contextlib.contextmanager
def telemetry(asked: bool) -> Iterator[Wrap]:
    """Yield what wraps a store so its runs are traced (the store itself when telemetry is off);
    flush and shut the exporters down on the way out."""
    if not asked and not telemetry_by_env():
        yield _same
        return
    try:
        from polyloop import otel
    except ImportError:
        if asked:
            raise BadInput("--otel needs the otel extra: pip install 'polyloop[otel]'") from None
        sys.stderr.write("polyloop: OTEL_* variables are set, but polyloop[otel] is not installed: "
                         "no spans are sent\n")
        yield _same
        return
    try:
        tracer_provider, meter_provider = otel.providers_from_env()
    except ValueError as exc:  # InvalidInputError: an exporter or protocol the extra does not ship
        raise BadInput(str(exc)) from None
    try:
        yield lambda store: otel.instrument(store, tracer_provider=tracer_provider, meter_provider=meter_provider)
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()


def _same(store: Any) -> Any:
    return store
