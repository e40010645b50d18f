"""Tools: the `tool` decorator, the replay policy and the context a tool receives."""

from __future__ import annotations

import asyncio
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, overload

Replay = Literal["safe", "never"]


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool learns about the execution it is part of.

    Declare a parameter named `ctx` (or annotated `ToolContext`) to receive it.

    Attributes:
        run_id: the run.
        step: the step (from 1).
        attempt: the attempt of this action within the step (from 1); a replay
            of an unknown `safe` action, or a re-run after an operator said
            `not_executed`, has a higher attempt.
        result_id: the id its result is stored under.
        idempotency_key: the same for every attempt of this logical action;
            pass it to external services so they can de-duplicate.
    """

    run_id: str
    step: int
    attempt: int
    result_id: str
    idempotency_key: str


_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


class Tool:
    """A function the model can call, with its declared replay policy.

    Create one with the `tool` decorator. Calling the `Tool` object calls the
    function as written (useful in tests).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        replay: Replay = "never",
    ) -> None:
        if replay not in ("safe", "never"):
            raise ValueError(f"replay must be 'safe' or 'never', not {replay!r}")
        self.fn = fn
        self.name = name or fn.__name__
        self.description = description if description is not None else inspect.getdoc(fn) or ""
        self.replay: Replay = replay
        self.is_async = inspect.iscoroutinefunction(fn)
        self._ctx_param, self.parameters = _signature_schema(fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Tool {self.name} replay={self.replay}>"

    def spec(self) -> dict[str, Any]:
        """`{"name", "description", "parameters"}` with parameters as JSON Schema."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    async def invoke(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        """Run the tool with `args`; sync functions run in a worker thread."""
        kwargs = dict(args)
        if self._ctx_param is not None:
            kwargs[self._ctx_param] = ctx
        if self.is_async:
            return await self.fn(**kwargs)
        return await asyncio.to_thread(self.fn, **kwargs)


def _signature_schema(fn: Callable[..., Any]) -> tuple[str | None, dict[str, Any]]:
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable annotations only cost the schema its types
        hints = {}
    ctx_param = None
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in sig.parameters.items():
        hint = hints.get(pname, param.annotation)
        if pname == "ctx" or hint is ToolContext:
            ctx_param = pname
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        properties[pname] = _json_schema(hint)
        if param.default is param.empty:
            required.append(pname)
    schema = {"type": "object", "properties": properties, "required": required}
    return ctx_param, schema


def _json_schema(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return _json_schema(options[0]) if len(options) == 1 else {}
    if origin is not None:
        hint = origin
    name = _JSON_TYPES.get(hint)
    return {"type": name} if name else {}


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, replay: Replay = "never", name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    replay: Replay = "never",
    name: str | None = None,
    description: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a function (sync or async) as a tool.

    Bare `@tool` declares `replay="never"`: after a crash that leaves its
    outcome unknown, the run stops for an operator. Use
    `@tool(replay="safe")` only for idempotent tools (reads, searches); an
    unknown execution of those is simply run again.

    The docstring becomes the description the model sees; the parameters'
    annotations become a JSON Schema. A parameter named `ctx` receives a
    `ToolContext`. Exceptions raised by the tool are recorded as error
    observations the model sees, not crashes of the run.

    Args:
        replay: `"never"` (default) or `"safe"`.
        name: the name the model uses; defaults to the function's name.
        description: overrides the docstring.
    """
    if fn is not None:
        return Tool(fn, replay=replay, name=name, description=description)

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, replay=replay, name=name, description=description)

    return wrap
