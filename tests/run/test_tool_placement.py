"""Where a tool's function runs: async and `inline=True` on the event loop, a plain `def` in a thread."""

from __future__ import annotations

import threading

import pytest

from polyloop import Agent, ScriptedModel, tool
from polyloop.testing import MemoryStore


def _agent(t, calls: int = 2) -> Agent:
    script = [{"tool": t.name, "args": {"x": k}} for k in range(calls)] + [{"final": "done"}]
    return Agent(model=ScriptedModel(script), tools=[t], max_steps=calls + 1)


async def test_a_plain_def_tool_runs_in_a_worker_thread_by_default() -> None:
    seen: list[int] = []

    @tool(replay="safe")
    def where(x: int) -> str:
        """Note the thread."""
        seen.append(threading.get_ident())
        return str(x)

    assert where.inline is False
    result = await _agent(where).run("g", run_id="thread", store=MemoryStore())
    assert result.reason == "final_answer"
    assert len(seen) == 2 and threading.get_ident() not in seen


async def test_an_inline_def_tool_runs_on_the_event_loop_and_records_the_same_log() -> None:
    seen: list[int] = []

    @tool(replay="safe", inline=True)
    def where(x: int) -> str:
        """Note the thread."""
        seen.append(threading.get_ident())
        return str(x)

    @tool(name="where", replay="safe")
    def threaded(x: int) -> str:
        """Note the thread."""
        return str(x)

    inline_store, thread_store = MemoryStore(), MemoryStore()
    assert (await _agent(where).run("g", run_id="r", store=inline_store)).reason == "final_answer"
    assert seen == [threading.get_ident()] * 2
    await _agent(threaded).run("g", run_id="r", store=thread_store)

    def shape(store: MemoryStore) -> list[str]:  # the records without their times
        return [line.split(b',"at":')[0].decode() for line in store.raw("r").splitlines()]

    assert shape(inline_store) == shape(thread_store)


async def test_an_inline_tool_that_raises_is_an_error_observation() -> None:
    @tool(replay="safe", inline=True)
    def boom(x: int) -> str:
        """Fail."""
        raise RuntimeError(f"no {x}")

    store = MemoryStore()
    result = await _agent(boom, calls=1).run("g", run_id="boom", store=store)
    assert result.reason == "final_answer"
    assert b'"observation":"error: RuntimeError: no 0","is_error":true' in store.raw("boom")


def test_inline_is_refused_for_an_async_tool() -> None:
    async def fetch(x: int) -> str:
        """Already on the loop."""
        return ""

    with pytest.raises(ValueError, match="inline=True is for plain `def` tools"):
        tool(inline=True)(fetch)


# -- the fast check of plain scalar parameters gives what pydantic gives -------------------

def _both(fn, args):
    """(fast path's result or None, pydantic's result or the error text)."""
    from polyloop._run.schema import BadArguments, Signature, _plain_values

    sig = Signature(fn, {})
    fast = _plain_values(sig.plain, args) if sig.plain is not None and type(args) is dict else None
    sig.plain = None  # pydantic alone
    try:
        slow = sig.validate(args)
    except BadArguments as exc:
        slow = str(exc)
    return fast, slow


def _optional(a: str, note: str | None = None) -> None:
    """An optional parameter: pydantic's way."""


def _plain(a: str, n: int = 3, x: float = 0.5, flag: bool = False) -> None:
    """Plain scalars only."""


@pytest.mark.parametrize(
    ("args", "fast_answers"),
    [
        ({"a": "q"}, True), ({"a": "q", "n": 5, "x": 1.5, "flag": True}, True), ({"a": "\udcff"}, True),
        ({"a": "q", "n": 5.0}, False), ({"a": "q", "n": True}, False), ({"a": "q", "x": 2}, False),
        ({"a": 1}, False), ({}, False), ({"a": "q", "zz": 1}, False), ({"a": "q", "flag": 1}, False),
    ],
)
def test_the_fast_check_agrees_with_pydantic(args, fast_answers) -> None:
    fast, slow = _both(_plain, args)
    assert (fast is not None) is fast_answers
    if fast is not None:  # exactly what pydantic gives, defaults filled in
        assert slow == ([], fast), (args, fast, slow)


def test_only_signatures_of_plain_scalars_take_the_fast_check() -> None:
    from typing import Annotated

    from pydantic import Field

    from polyloop._run.schema import Signature

    def bounded(a: Annotated[int, Field(ge=0)]) -> None: ...
    def listed(a: list[int]) -> None: ...
    def extra(a: str, **rest: int) -> None: ...
    def mutable_default(a: str, b: int = 1, c: float = 0.0) -> None: ...

    assert Signature(_plain, {}).plain is not None and Signature(mutable_default, {}).plain is not None
    for fn in (bounded, listed, extra, _optional):
        assert Signature(fn, {}).plain is None, fn
