"""Reading a model server's answer strictly, before the run loop trusts any of it.

A hosted model's 200 answer is untrusted input: a proxy, a local server or a
broken deployment can send a body that is not JSON, a field of the wrong type,
a name full of control characters or a count of `NaN`. The adapters decode
the body here (`decode_answer`) and read each field through a `Fields`, which
checks its type and bounds and names the field's path when it refuses it.
Every refusal is a `MalformedResponseError`: a failed attempt, asked again as
a new attempt — never a raw exception ending the run at its first attempt.

What is checked (see docs/how-to/use-an-openai-compatible-model.md):

* the body: at most `MAX_ANSWER_BYTES`, valid UTF-8 JSON (no `NaN`, no lone
  surrogate), an object at the top;
* names (tool names, call ids, stop reasons, the model name): non-empty
  strings of printable characters, at most `MAX_NAME_LENGTH`;
* token counts: whole numbers from 0 to `MAX_TOKEN_COUNT` (not booleans,
  not floats);
* text and tool arguments: any JSON string or object — they are data, kept
  verbatim in the log and escaped when shown on a terminal.
"""

from __future__ import annotations

from typing import Any

import orjson

from .._log.errors import TransientModelError
from .._log.model_port import Usage

MAX_ANSWER_BYTES = 16 << 20
"""The largest answer body read (16 MiB); a larger one is malformed."""

MAX_NAME_LENGTH = 256
"""The longest tool name, call id, stop reason or model name accepted."""

MAX_TOKEN_COUNT = 2**53 - 1
"""The largest token count accepted: exact in every JSON reader."""


class MalformedResponseError(TransientModelError):
    """The server answered, but the answer cannot be read as a decision.

    Raised when the body is not a JSON object, when a field the adapter reads
    is missing, of the wrong type or out of bounds (the message names its
    path, such as `choices[0].message.tool_calls[1].function.name`), or when
    one of the model's tool calls carries arguments that are not a JSON
    object (small models do this). It is a `TransientModelError`: the run
    loop records the failed attempt, with the reason in its error, and asks
    the model again as a new attempt — a fresh sample usually parses. No
    action intent is written for an answer that could not be read.

    Attributes:
        raw: the unreadable tool-call arguments (None for other problems).
        usage: the tokens the server says the unreadable answer cost, if it
            said (recorded in the failed attempt's `model_call_result`).
    """

    def __init__(self, message: str, *, raw: str | None = None, usage: Usage | None = None) -> None:
        super().__init__(message, usage=usage)
        self.raw = raw


def bad_arguments(name: str, raw: Any, usage: Usage | None) -> MalformedResponseError:
    """The error for a tool call whose arguments are not a JSON object."""
    shown = raw if isinstance(raw, str) else repr(raw)
    shown = shown if len(shown) <= 500 else shown[:497] + "..."
    return MalformedResponseError(
        f"the model called {name!r} with arguments that are not a JSON object: {shown!r}",
        raw=raw if isinstance(raw, str) else repr(raw),
        usage=usage,
    )


def decode_answer(data: bytes) -> dict[str, Any]:
    """The answer body as a JSON object.

    Raises:
        MalformedResponseError: the body is empty, too large, not JSON (or
            JSON the log could not hold: `NaN`, a lone surrogate) or not an
            object.
    """
    if len(data) > MAX_ANSWER_BYTES:
        raise MalformedResponseError(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
    if not data.strip():
        raise MalformedResponseError("the answer's body is empty")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedResponseError(f"the answer is not JSON ({exc}): {_preview(data)}") from None
    if not isinstance(doc, dict):
        raise MalformedResponseError(f"the answer is a JSON {_kind(doc)}, not an object: {_preview(data)}")
    return doc


class Fields:
    """Reads the fields of one decoded answer, refusing each bad one by its path.

    `usage` (once read) rides on every error raised, so the tokens an
    unreadable answer cost are still recorded.
    """

    def __init__(self) -> None:
        self.usage: Usage | None = None

    def fail(self, path: str, what: str, value: Any = None) -> MalformedResponseError:
        got = "" if what == "is missing" else f" (got {_shown(value)})"
        return MalformedResponseError(f"the answer's {path} {what}{got}", usage=self.usage)

    def get(self, doc: dict[str, Any], key: str, path: str, *, required: bool, nullable: bool = False) -> Any:
        """`doc[key]`, or None. Refused when `required` and missing, or `required`, null and not `nullable`."""
        if key not in doc:
            if required:
                raise self.fail(path, "is missing")
            return None
        value = doc[key]
        if value is None and required and not nullable:
            raise self.fail(path, "is null", value)
        return value

    def object(self, doc: dict[str, Any], key: str, path: str, *, required: bool = True) -> Any:
        """The object at `key` (None when optional and missing or null)."""
        value = self.get(doc, key, path, required=required)
        if value is not None and not isinstance(value, dict):
            raise self.fail(path, "is not an object", value)
        return value

    def items(self, doc: dict[str, Any], key: str, path: str, *, required: bool = True) -> list[Any]:
        """The list at `key` ([] when optional and missing or null)."""
        value = self.get(doc, key, path, required=required)
        if value is not None and not isinstance(value, list):
            raise self.fail(path, "is not a list", value)
        return value or []

    def text(self, doc: dict[str, Any], key: str, path: str, *, required: bool = False) -> Any:
        """Free text: any string (data, kept verbatim); None when optional and missing or null."""
        value = self.get(doc, key, path, required=required)
        if value is not None and not isinstance(value, str):
            raise self.fail(path, "is not a string", value)
        return value

    def name(self, doc: dict[str, Any], key: str, path: str, *, required: bool = True, nullable: bool = False) -> Any:
        """A name (tool, id, reason, model): printable, 1 to `MAX_NAME_LENGTH` characters."""
        value = self.get(doc, key, path, required=required, nullable=nullable)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(path, "is not a string", value)
        if not 0 < len(value) <= MAX_NAME_LENGTH:
            raise self.fail(path, f"is not 1 to {MAX_NAME_LENGTH} characters long", value)
        if not value.isprintable():
            raise self.fail(path, "holds control or format characters", value)
        return value

    def count(self, doc: dict[str, Any], key: str, path: str, *, required: bool = True) -> Any:
        """A token count: a whole number from 0 to `MAX_TOKEN_COUNT` (None when optional and absent)."""
        value = self.get(doc, key, path, required=required)
        if value is None:
            return None
        if type(value) is not int:
            raise self.fail(path, "is not a whole number", value)
        if not 0 <= value <= MAX_TOKEN_COUNT:
            raise self.fail(path, f"is not from 0 to {MAX_TOKEN_COUNT}", value)
        return value

    def arguments(self, name: str, raw: Any) -> dict[str, Any]:
        """Tool arguments sent as a JSON string (OpenAI's shape): an object; empty means none."""
        if isinstance(raw, str) and not raw.strip():
            return {}
        try:
            args = orjson.loads(raw) if isinstance(raw, str) else None
        except orjson.JSONDecodeError:
            args = None  # also NaN and lone surrogates: values the log could not hold
        if not isinstance(args, dict):
            raise bad_arguments(name, raw, self.usage)
        return args


def _kind(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _preview(data: bytes) -> str:
    shown = repr(data[:60])
    return shown + ("..." if len(data) > 60 else "")
