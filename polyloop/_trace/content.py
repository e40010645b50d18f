"""Message and argument content, recorded only when the user opts in (the conventions' switch)."""

from __future__ import annotations

import os
from typing import Any

import orjson

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
