"""The model port: what the run loop asks of a model, and the scripted model."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import orjson

Message = dict[str, Any]
"""One history entry. Shapes:

* `{"role": "system", "content": str}`
* `{"role": "user", "content": str}` (the goal)
* `{"role": "assistant", "content": str | None, "tool_call": {"id", "name", "args"} | None}`
* `{"role": "tool", "tool_call_id": str, "name": str | None, "content": str}`
"""


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
    """The one tool call a model decided on."""

    name: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens a model call spent."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ModelOutput:
    """What a model call returned: text and/or one tool call, plus usage.

    A tool call means "run this next"; no tool call means `text` is the final
    answer.
    """

    text: str | None = None
    tool_call: ToolCall | None = None
    usage: Usage | None = None

    def to_json(self) -> dict[str, Any]:
        call = self.tool_call
        return {
            "text": self.text,
            "tool_call": None if call is None else {"name": call.name, "args": call.args},
        }

    @classmethod
    def from_json(cls, output: Mapping[str, Any], usage: Mapping[str, Any] | None = None) -> ModelOutput:
        call = output.get("tool_call")
        return cls(
            text=output.get("text"),
            tool_call=None if call is None else ToolCall(call["name"], dict(call["args"])),
            usage=None
            if usage is None
            else Usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))),
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

    Each output is `{"tool": NAME, "args": {...}}` or `{"final": TEXT}` and may
    carry `"text"` (thoughts shown with a tool call) and `"usage"`
    (`{"input_tokens", "output_tokens"}`). Output *i* answers the step whose
    history holds *i* earlier assistant turns, so the choice depends only on
    the history given and a resumed run sees the same decisions.
    """

    def __init__(self, outputs: Sequence[Mapping[str, Any]]) -> None:
        self.outputs = [self._check(i, o) for i, o in enumerate(outputs)]

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Read one output per line of a JSONL file (blank lines skipped).

        Raises:
            ValueError: a line is not a JSON object of the shape above.
            OSError: the file cannot be read.
        """
        outputs = []
        for number, line in enumerate(Path(path).read_bytes().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                outputs.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
        return cls(outputs)

    @staticmethod
    def _check(index: int, output: Any) -> dict[str, Any]:
        if not isinstance(output, Mapping) or ("tool" in output) == ("final" in output):
            raise ValueError(
                f"scripted output {index}: expected {{'tool': NAME, 'args': {{...}}}} "
                f"or {{'final': TEXT}}, got {output!r}"
            )
        if "tool" in output and not isinstance(output.get("args", {}), Mapping):
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
        usage_obj = Usage(**usage) if isinstance(usage, Mapping) else None
        if "final" in out:
            return ModelOutput(text=str(out["final"]), usage=usage_obj)
        return ModelOutput(
            text=out.get("text"),
            tool_call=ToolCall(str(out["tool"]), dict(out.get("args") or {})),
            usage=usage_obj,
        )
