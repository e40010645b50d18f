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
