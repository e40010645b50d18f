"""Agents the worker tests submit. Every tool execution appends a line to $PL_TEST_EFFECTS.

The line is written when the tool starts, before its (slow) work: it stands
for a side effect in the world, which the tests count against the log.
"""

from __future__ import annotations

import asyncio
import os
import time

from polyloop import Agent, ScriptedModel, ToolContext, tool


def _effect(ctx: ToolContext, name: str) -> None:
    line = f"{ctx.run_id} {ctx.step} {ctx.result_id} {name} {os.getpid()}\n"
    fd = os.open(os.environ["PL_TEST_EFFECTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    time.sleep(float(os.environ.get("PL_TEST_SLOW", "0.2")))


@tool
def charge(ctx: ToolContext, n: int) -> str:
    """An unrepeatable side effect (`never`, the default)."""
    _effect(ctx, "charge")
    return f"charged {n}"


@tool(replay="safe")
def look(ctx: ToolContext, n: int) -> str:
    """An idempotent read (`safe`)."""
    _effect(ctx, "look")
    return f"looked {n}"


def mixed() -> Agent:
    """Alternating `look` and `charge` steps, then a final answer."""
    steps = int(os.environ.get("PL_TEST_STEPS", "6"))
    script: list[dict] = [{"tool": "charge" if i % 2 else "look", "args": {"n": i}} for i in range(steps)]
    return Agent(model=ScriptedModel([*script, {"final": "done"}]), tools=[charge, look], max_steps=steps + 1)


def reads() -> Agent:
    """Only `safe` steps: a takeover replays what was in flight and finishes."""
    steps = int(os.environ.get("PL_TEST_STEPS", "6"))
    script: list[dict] = [{"tool": "look", "args": {"n": i}} for i in range(steps)]
    return Agent(model=ScriptedModel([*script, {"final": "done"}]), tools=[look], max_steps=steps + 1)


@tool(approval="required")
def wire(ctx: ToolContext, n: int) -> str:
    """A side effect that waits for a person's approval (log format 1.2)."""
    _effect(ctx, "wire")
    return f"wired {n}"


def approving() -> Agent:
    """One `wire` that waits for approval, then a final answer."""
    return Agent(model=ScriptedModel([{"tool": "wire", "args": {"n": 1}}, {"final": "done"}]), tools=[wire])


class _Thinking:
    """A model each of whose calls takes $PL_TEST_SLOW seconds (a call in hand when a signal comes)."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model

    async def complete(self, messages, tools):
        await asyncio.sleep(float(os.environ.get("PL_TEST_SLOW", "0.2")))
        return await self.model.complete(messages, tools)


def thinking() -> Agent:
    """One slow model call, then a final answer."""
    return Agent(model=_Thinking(ScriptedModel([{"final": "done"}])), tools=[])
