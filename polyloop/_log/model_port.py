"""The model port: what the run loop asks of a model, and the scripted model."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import orjson

from .._files import read_regular

Message = dict[str, Any]
"""One history entry. Shapes:

* `{"role": "system", "content": str}`
* `{"role": "user", "content": str}` (the goal)
* `{"role": "assistant", "content": str | None, "tool_call": {"id", "name", "args"} | None}`
  for a turn with at most one tool call;
* `{"role": "assistant", "content": str | None, "tool_call": {"id", "name", "args"},
  "tool_calls": [{"id", "name", "args"}, ...]}` for a turn with several: `tool_calls` lists them
  all in the model's order and `tool_call` repeats the first, so code that reads only
  `tool_call` keeps working. A turn without `tool_calls` has exactly the calls in `tool_call`.
* `{"role": "tool", "tool_call_id": str, "name": str | None, "content": str}`: one per tool call,
  in the order of the calls, right after their assistant turn; `tool_call_id` is the call's `id`.

Ids are unique within a run and the same on every resume.
"""


def message_tool_calls(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of an assistant history message, in order (see `Message`)."""
    calls = message.get("tool_calls")
    if calls:
        return list(calls)
    call = message.get("tool_call")
    return [] if call is None else [call]


class _History:
    """The run loop's history: append-only, with its assistant turns counted as it grows."""

    __slots__ = ("_items", "_assistant")

    def __init__(self) -> None:
        self._items: list[Message] = []
        self._assistant = 0

    def append(self, message: Message) -> None:
        self._items.append(message)
        if message.get("role") == "assistant":
            self._assistant += 1

    def view(self) -> HistoryView:
        return HistoryView(self._items, len(self._items), self._assistant)


class HistoryView(Sequence[Message]):
    """The history a model is given: a read-only snapshot, made in constant time.

    The loop only ever appends to its history, so the first `len(view)`
    messages never change and the view needs no copy: a step costs the same
    at step 10,000 as at step 10. It is a `Sequence` (index, slice, iterate,
    compare with a list); call `list(view)` for a list of your own.
    """

    __slots__ = ("_items", "_n", "_assistant")

    def __init__(self, items: list[Message], n: int, assistant: int) -> None:
        self._items = items
        self._n = n
        self._assistant = assistant

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self._items[slice(*index.indices(self._n))]
        i = index.__index__()
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("history index out of range")
        return self._items[i]

    def __iter__(self) -> Iterator[Message]:
        return itertools.islice(self._items, self._n)

    def __reversed__(self) -> Iterator[Message]:
        items = self._items
        return (items[i] for i in range(self._n - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (HistoryView, list)):
            return len(other) == self._n and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"HistoryView({list(self)!r})"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call a model decided on."""

    name: str
    args: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "args": self.args}


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens a model call spent.

    Attributes:
        input_tokens: prompt tokens as the provider counts them (Anthropic's
            count leaves out the cache reads and writes below; OpenAI's
            includes cached tokens).
        output_tokens: generated tokens.
        cache_read_input_tokens: prompt tokens read from the provider's
            prompt cache, when it reports them (None: not reported).
        cache_creation_input_tokens: prompt tokens written to the cache,
            when reported.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    def to_json(self) -> dict[str, int]:
        """The log's form: the two counts, plus each cache count that was reported."""
        doc = {"input_tokens": int(self.input_tokens), "output_tokens": int(self.output_tokens)}
        if self.cache_read_input_tokens is not None:
            doc["cache_read_input_tokens"] = int(self.cache_read_input_tokens)
        if self.cache_creation_input_tokens is not None:
            doc["cache_creation_input_tokens"] = int(self.cache_creation_input_tokens)
        return doc

    @classmethod
    def from_json(cls, usage: Mapping[str, Any]) -> Usage:
        read = usage.get("cache_read_input_tokens")
        made = usage.get("cache_creation_input_tokens")
        return cls(
            int(usage.get("input_tokens", 0)),
            int(usage.get("output_tokens", 0)),
            None if read is None else int(read),
            None if made is None else int(made),
        )


@dataclass(frozen=True, slots=True, init=False)
class ModelOutput:
    """What a model call returned: text and/or tool calls, plus usage.

    Tool calls mean "run these next" (in the order given); no tool call
    means `text` is the final answer.

    Args:
        text: the model's text (the final answer when there is no call).
        tool_call: one tool call; the same as `tool_calls=(call,)`.
        usage: the tokens the call spent.
        tool_calls: every tool call of the answer. Give `tool_call` or
            `tool_calls`; given both, `tool_call` must be the first.
        stop_reason: why the model stopped, as the provider says it
            (`"tool_use"`, `"end_turn"`, `"max_tokens"`, ...), when the
            adapter records it; None otherwise.
        model: the model that answered, as the provider names it in its
            answer (OpenAI's and Anthropic's response `model`, which may be
            more precise than the model asked for), when the adapter
            records it; None otherwise. Nothing in a run or its recovery
            reads it: it is reported (`gen_ai.response.model` of the
            call's `chat` span), never replayed or compared.

    Attributes:
        tool_call: the first tool call, or None (a property).

    Raises:
        ValueError: `tool_call` and `tool_calls` disagree.
    """

    text: str | None
    tool_calls: tuple[ToolCall, ...]
    usage: Usage | None
    stop_reason: str | None
    model: str | None

    def __init__(
        self,
        text: str | None = None,
        tool_call: ToolCall | None = None,
        usage: Usage | None = None,
        *,
        tool_calls: Sequence[ToolCall] = (),
        stop_reason: str | None = None,
        model: str | None = None,
    ) -> None:
        calls = tuple(tool_calls)
        if tool_call is not None:
            if calls and calls[0] != tool_call:
                raise ValueError("tool_call must be the first of tool_calls")
            calls = calls or (tool_call,)
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "tool_calls", calls)
        object.__setattr__(self, "usage", usage)
        object.__setattr__(self, "stop_reason", stop_reason)
        object.__setattr__(self, "model", model)

    @property
    def tool_call(self) -> ToolCall | None:
        """The first tool call, or None when the output is a final answer."""
        return self.tool_calls[0] if self.tool_calls else None

    def to_json(self) -> dict[str, Any]:
        """The log's form (`model_call_result.output`).

        `{"text", "tool_call"}` (the first call or None); with two or more
        calls also `"tool_calls"` listing all of them; with a stop reason
        also `"stop_reason"`; with the answering model also `"model"` (log
        format 1.4). An output with at most one call and neither is written
        exactly as before tool calls could be several.
        """
        calls = self.tool_calls
        doc: dict[str, Any] = {"text": self.text, "tool_call": calls[0].to_json() if calls else None}
        if len(calls) > 1:
            doc["tool_calls"] = [c.to_json() for c in calls]
        if self.stop_reason is not None:
            doc["stop_reason"] = self.stop_reason
        if self.model is not None:
            doc["model"] = self.model
        return doc

    @classmethod
    def from_json(cls, output: Mapping[str, Any], usage: Mapping[str, Any] | None = None) -> ModelOutput:
        """Read `to_json`'s form (both the one-call and the several-calls shape)."""
        listed = output.get("tool_calls")
        first = output.get("tool_call")
        raw = listed if listed else ([] if first is None else [first])
        return cls(
            text=output.get("text"),
            tool_calls=tuple(ToolCall(c["name"], dict(c["args"])) for c in raw),
            usage=None if usage is None else Usage.from_json(usage),
            stop_reason=output.get("stop_reason"),
            model=output.get("model"),
        )


@runtime_checkable
class Model(Protocol):
    """The port a model implements.

    `complete` receives the whole history so far (see `Message`) as a
    read-only sequence (a snapshot made in constant time; `list(messages)`
    gives a list of your own) and the specs of the available tools
    (`{"name", "description", "parameters"}`, parameters as JSON Schema) and
    returns one `ModelOutput`.

    A model must decide from what it is given, not from hidden state: a
    resumed run rebuilds the history from the log and must get the same
    decisions. Raising is allowed; the attempt is recorded as failed and the
    run stops resumable. Transient failures may be retried inside
    `complete` (each retry is then invisible) or left to resume, which issues
    a new, visible attempt.
    """

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelOutput: ...


class ScriptedModel:
    """A model that plays back a fixed script: the embedded default for demos and tests.

    Each output is `{"tool": NAME, "args": {...}}` (one tool call),
    `{"calls": [{"tool": NAME, "args": {...}}, ...]}` (several tool calls in
    one output, in order) or `{"final": TEXT}`, and may carry `"text"`
    (thoughts shown with the tool calls) and `"usage"`
    (`{"input_tokens", "output_tokens"}`). Output *i* answers the step whose
    history holds *i* earlier assistant turns, so the choice depends only on
    the history given and a resumed run sees the same decisions.
    """

    def __init__(self, outputs: Sequence[Mapping[str, Any]]) -> None:
        # Each output is copied (a script changed later does not change the
        # run), once per distinct object: a script written as `[call] * 1000`
        # keeps one copy, not a thousand, in every run that plays it.
        # (The original is kept beside its copy until the end, so that its id
        # cannot be reused by a later output of a generator.)
        copies: dict[int, tuple[Any, dict[str, Any]]] = {}
        self.outputs: list[dict[str, Any]] = []
        for i, o in enumerate(outputs):
            seen = copies.get(id(o))
            if seen is None:
                seen = copies[id(o)] = (o, self._check(i, o))
            self.outputs.append(seen[1])

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Read one output per line of a JSONL file (blank lines skipped).

        Raises:
            ValueError: a line is not a JSON object of the shape above.
            OSError: the file cannot be read, or is not a regular file (a
                FIFO is refused, never waited on).
        """
        outputs = []
        for number, line in enumerate(read_regular(path).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                outputs.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
        return cls(outputs)

    @staticmethod
    def _check(index: int, output: Any) -> dict[str, Any]:
        kinds = [k for k in ("tool", "calls", "final") if isinstance(output, Mapping) and k in output]
        if len(kinds) != 1:
            raise ValueError(
                f"scripted output {index}: expected {{'tool': NAME, 'args': {{...}}}}, "
                f"{{'calls': [{{'tool': NAME, 'args': {{...}}}}, ...]}} or {{'final': TEXT}}, got {output!r}"
            )
        calls = output["calls"] if kinds == ["calls"] else [output] if kinds == ["tool"] else []
        if kinds == ["calls"] and (not isinstance(calls, Sequence) or isinstance(calls, str) or not calls):
            raise ValueError(f"scripted output {index}: 'calls' must be a non-empty list")
        for call in calls:
            if not isinstance(call, Mapping) or "tool" not in call:
                raise ValueError(f"scripted output {index}: each call needs a 'tool', got {call!r}")
            if not isinstance(call.get("args", {}), Mapping):
                raise ValueError(f"scripted output {index}: 'args' must be an object")
        return dict(output)

    def describe(self) -> dict[str, Any]:
        return {"type": "ScriptedModel", "outputs": len(self.outputs)}

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelOutput:
        if type(messages) is HistoryView:
            index = messages._assistant  # the same count, kept as the history grew
        else:
            index = sum(1 for m in messages if m.get("role") == "assistant")
        if index >= len(self.outputs):
            raise IndexError(
                f"the script has {len(self.outputs)} outputs; step {index + 1} asked for more"
            )
        out = self.outputs[index]
        usage = out.get("usage")
        usage_obj = Usage(**usage) if usage is not None and isinstance(usage, Mapping) else None  # None skips the ABC check
        if "final" in out:
            return ModelOutput(text=str(out["final"]), usage=usage_obj)
        calls = out["calls"] if "calls" in out else [out]
        return ModelOutput(
            text=out.get("text"),
            tool_calls=tuple(ToolCall(str(c["tool"]), dict(c.get("args") or {})) for c in calls),
            usage=usage_obj,
        )
