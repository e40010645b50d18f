"""Message and argument content, recorded only when the user opts in (the conventions' switch); what
the OTEL_* variables ask for (read without importing OpenTelemetry)."""

from __future__ import annotations

import os
from typing import Any

import orjson

from .._log.errors import InvalidInputError
from .._log.records import representable

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def capture_from_env() -> bool:
    """Whether `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` asks for content (off by default)."""
    return os.environ.get(CAPTURE, "").strip().lower() in ("true", "1", "yes")


def to_json(value: Any) -> str:
    return orjson.dumps(representable(value), option=orjson.OPT_SORT_KEYS).decode()


def output_messages(output: dict[str, Any]) -> str:
    """A model call's output as `gen_ai.output.messages`: one assistant message of parts."""
    parts: list[dict[str, Any]] = []
    if output.get("text"):
        parts.append({"type": "text", "content": output["text"]})
    calls = output.get("tool_calls") or ([output["tool_call"]] if output.get("tool_call") else [])
    for c in calls:
        if isinstance(c, dict):
            parts.append({"type": "tool_call", "name": c.get("name"), "arguments": c.get("args")})
    return to_json([{"role": "assistant", "parts": parts}])


# What turns telemetry on without `--otel`: the standard variables the OpenTelemetry SDK reads.
TURN_ON = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
           "OTEL_SERVICE_NAME")


def telemetry_by_env(environ: Any = None) -> bool:
    """Whether the environment asks for telemetry: an OTLP endpoint, a service name or a traces
    exporter other than `none` is set (or `POLYLOOP_OTEL=1`, which `polyloop batch --otel` hands its worker
    processes), and `OTEL_SDK_DISABLED` is not `true`. Reads variables only."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return env.get("POLYLOOP_OTEL") == "1" or any(env.get(name) for name in TURN_ON)


SHIPPED = ("otlp", "console", "none")  # the exporters polyloop[otel] ships


def exporter_choice(variable: str, environ: Any = None) -> str:
    """What `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` asks for: `otlp` (the default),
    `console` or `none`.

    Raises:
        InvalidInputError: an exporter polyloop[otel] does not ship.
    """
    env = os.environ if environ is None else environ
    chosen = (env.get(variable) or "otlp").strip().lower()
    if chosen not in SHIPPED:
        raise InvalidInputError(f"{variable}={chosen}: polyloop[otel] ships the otlp, console and none exporters")
    return chosen


def check_exporters(environ: Any = None) -> None:
    """Refuse what the OTEL_* variables ask for that polyloop[otel] does not ship (a gRPC protocol,
    another exporter): before a batch starts worker processes that would each fail on it.

    Raises:
        InvalidInputError: an exporter or protocol the extra does not ship.
    """
    env = os.environ if environ is None else environ
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol.strip() != "http/protobuf":
        raise InvalidInputError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: polyloop[otel] exports OTLP over "
                                "http/protobuf only")
    exporter_choice("OTEL_TRACES_EXPORTER", env)
    exporter_choice("OTEL_METRICS_EXPORTER", env)
