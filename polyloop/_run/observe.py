"""What a tool or a guard returns, as the run records it: observation text, guard verdicts, reconcile findings."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Literal
from collections.abc import Callable

import orjson

from .._log.records import representable


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What a `reconcile` guard found: build it with `executed`, `not_executed` or `unknown`.

    Attributes:
        outcome: `"executed"`, `"not_executed"` or `"unknown"`.
        observation: with `executed`, what the model reads as the action's result.
        reason: with `unknown`, why the world could not tell (shown to the operator).
    """

    outcome: Literal["executed", "not_executed", "unknown"]
    observation: str | None = None
    reason: str | None = None


def executed(observation: Any = "") -> Reconciled:
    """The action did happen; `observation` (made text like a tool's return value) completes it."""
    return Reconciled("executed", observation=observation_text(observation))


def not_executed() -> Reconciled:
    """The action did not happen: resume runs it again (its precondition is checked again)."""
    return Reconciled("not_executed")


def unknown(reason: str | None = None) -> Reconciled:
    """The world cannot tell: the run stops for an operator, as without reconcile."""
    return Reconciled("unknown", reason=reason)


async def call_guard(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a guard, sync ones in a worker thread so the event loop others share never waits."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    value = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(value):
        value = await value
    return value


def guard_verdict(value: Any) -> tuple[bool, str | None]:
    """(passed, reason) for what a precondition or verify returned: only `True` passes."""
    if value is True:
        return True, None
    if value is False:
        return False, None
    if isinstance(value, str):
        return False, value
    return False, f"the guard returned {type(value).__name__}, not True, False or a reason"


def observation_text(value: Any) -> str:
    """What the model reads for a tool's return value.

    A `str` is used as is and None becomes "". Pydantic models are dumped in
    JSON mode, dataclasses through `dataclasses.asdict`, and everything else
    is serialized as JSON (values JSON cannot hold are written with `str`).
    """
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if _is_model(value):
        value = value.model_dump(mode="json")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    try:
        return orjson.dumps(value, default=_json_default).decode()
    except TypeError:  # text UTF-8 cannot carry, e.g. a file name from os.listdir
        return orjson.dumps(representable(value), default=_json_default).decode()


def _is_model(value: Any) -> bool:
    pydantic = sys.modules.get("pydantic")  # not loaded: no value can be a pydantic model
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


def _json_default(value: Any) -> Any:
    if _is_model(value):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)
