"""Agent targets the batch tests run as `tests/fleet/batch/agents.py:NAME`, in real worker processes.

The world keeps its own record, independent of the logs:

* `BATCH_EFFECTS`: every `stamp` (a `never` tool) appends one fsync'd JSON line
  `{"run_id", "step", "result_id", "attempt", "pid"}` before it returns, as the
  crash tests' tools do; counting them is how a test proves that no `never`
  action ran twice and none was lost.
* `BATCH_PIDS`: importing this module creates `BATCH_PIDS/<pid>`, so a test can
  find the worker processes (and leave the parent, which imports it too, alone).
* `BATCH_SLOW`: seconds each tool waits before and after its effect, so random
  kills land inside runs.
* `BATCH_KILL_ONCE`: a path; the first `stamp` to find it missing creates it and
  SIGKILLs its own (worker) process right after its effect.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import orjson

from polyloop import Agent, ScriptedModel, ToolContext, tool

if os.environ.get("BATCH_PIDS"):
    Path(os.environ["BATCH_PIDS"]).mkdir(parents=True, exist_ok=True)
    Path(os.environ["BATCH_PIDS"], str(os.getpid())).touch()


def _slow() -> float:
    return float(os.environ.get("BATCH_SLOW") or 0)


def _append_fsynced(path: str, obj: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, orjson.dumps(obj) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


@tool(replay="safe")
async def look(topic: str) -> str:
    """Read something (idempotent)."""
    await asyncio.sleep(_slow())
    return f"notes on {topic}"


@tool
async def stamp(label: str, ctx: ToolContext) -> str:
    """A side effect that must not repeat: one fsync'd line in the world's effects file."""
    await asyncio.sleep(_slow())
    effects = os.environ.get("BATCH_EFFECTS")
    if effects:
        _append_fsynced(
            effects,
            {"run_id": ctx.run_id, "step": ctx.step, "result_id": ctx.result_id,
             "attempt": ctx.attempt, "label": label, "pid": os.getpid()},
        )
    marker = os.environ.get("BATCH_KILL_ONCE")
    if marker:
        try:
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            pass
        else:
            os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.sleep(_slow())
    return f"stamped {label}"


# look, stamp, stamp, answer: two `never` actions per run.
stamper = Agent(
    model=ScriptedModel(
        [
            {"tool": "look", "args": {"topic": "batch"}},
            {"tool": "stamp", "args": {"label": "first"}},
            {"tool": "stamp", "args": {"label": "second"}},
            {"final": "stamped twice"},
        ]
    ),
    tools=[look, stamp],
)

# One safe step, then an answer.
quick = Agent(
    model=ScriptedModel([{"tool": "look", "args": {"topic": "x"}}, {"final": "done"}]),
    tools=[look],
)


class _Broken:
    async def complete(self, messages, tools):
        raise ConnectionError("model server unreachable")


# Ends with reason `error` at its first model call.
broken = Agent(model=_Broken(), max_attempts=1)

NASTY = "\x1b[31mred\x1b[0m [red]x[/red] [/x] \u202eevil\u202c \x07bell\r\x9b2J"


class _Hostile:
    async def complete(self, messages, tools):
        raise ConnectionError(f"server said {NASTY}")


# Its model call fails (the run stops, resumable) with text hostile to terminals.
hostile = Agent(model=_Hostile(), max_attempts=3)


@tool(replay="safe")
def die() -> str:
    """Kills its own process, every time (a run that takes its worker down)."""
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


# Every attempt kills the worker process running it.
killer = Agent(model=ScriptedModel([{"tool": "die", "args": {}}, {"final": "never"}]), tools=[die])


@tool(replay="safe")
def block(seconds: float) -> str:
    """A sync tool that ignores cancellation: it sleeps in its thread."""
    import time

    marker = os.environ.get("BATCH_STARTED")
    if marker:
        Path(marker).touch()
    time.sleep(seconds)
    return "woke up"


# Its only tool blocks its thread for BATCH_BLOCK seconds (default 2).
sleeper = Agent(
    model=ScriptedModel([{"tool": "block", "args": {"seconds": float(os.environ.get("BATCH_BLOCK") or 2)}},
                         {"final": "done"}]),
    tools=[block],
)
