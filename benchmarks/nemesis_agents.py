"""The agent the nemesis submits (benchmarks/nemesis.py): `never` and `safe` side effects on a ground-truth file.

Every tool execution appends one line to $NEMESIS_TRUTH and fsyncs it before
its (short, random) work: the line stands for a side effect in the world,
which the nemesis counts against the logs at the end.
"""

from __future__ import annotations

import os
import random
import time

from polyloop import Agent, ScriptedModel, ToolContext, tool


def _effect(ctx: ToolContext, name: str) -> None:
    line = f"{ctx.run_id} {ctx.step} {ctx.result_id} {name} {os.getpid()}\n"
    fd = os.open(os.environ["NEMESIS_TRUTH"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    time.sleep(random.uniform(0.02, float(os.environ.get("NEMESIS_SLOW", "0.3"))))


@tool(replay="never")
def charge(ctx: ToolContext, n: int) -> str:
    """An unrepeatable side effect."""
    _effect(ctx, "charge")
    return f"charged {n}"


@tool(replay="safe")
def look(ctx: ToolContext, n: int) -> str:
    """An idempotent read."""
    _effect(ctx, "look")
    return f"looked {n}"


def agent() -> Agent:
    """Alternating `look` and `charge` steps ($NEMESIS_STEPS of them), then a final answer."""
    steps = int(os.environ.get("NEMESIS_STEPS", "6"))
    script: list[dict] = [{"tool": "charge" if i % 2 else "look", "args": {"n": i}} for i in range(steps)]
    return Agent(model=ScriptedModel([*script, {"final": "done"}]), tools=[charge, look], max_steps=steps + 1)
