"""Calling a tool or a guard: its failure is data (an observation), never a crash of the run.

Shared by the run loop (`polyloop._run.loop`) and the guard code
(`polyloop._run.guards`); it knows nothing of the log.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .context import ToolContext
from .observe import call_guard, guard_verdict, observation_text
from .tools import Tool, ToolAnswerLostError


async def judge(fn: Any, what: str, *args: Any) -> tuple[bool, str | None]:
    """(passed, reason) of a precondition or verify; an exception fails it, with its text."""
    try:
        return guard_verdict(await call_guard(fn, *args))
    except asyncio.CancelledError:
        raise
    except (Exception, SystemExit) as exc:
        return False, f"the {what} raised {type(exc).__name__}: {exc}"


async def invoke(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> tuple[str, bool]:
    """Run a tool; its failure is data (an error observation), never a crash of the run.

    An async tool is cancelled with the run (its outcome is then unknown,
    as after a crash); so is a plain `def` tool declared `inline` (it runs on the
    loop, and a cancellation can only come while it does not). A synchronous
    tool runs in a thread that cancellation cannot stop. When
    the run is cancelled (Ctrl-C) meanwhile, this waits for the thread to end
    before letting the cancellation through, so the run's lock is never
    released while an action this process started may still be running; the
    outcome, known by then, is raised with `CancelledAfter` for the caller to record.
    """
    if tool.is_async or tool.inline:
        return await _call(tool, args, ctx)  # cancelled with the run, like any coroutine
    done = asyncio.ensure_future(_call(tool, args, ctx))
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(done)
            break
        except asyncio.CancelledError:
            if done.done() and done.cancelled():
                raise
            cancelled = True  # the thread runs on: wait for it, holding the run
    if cancelled:
        raise CancelledAfter(result)
    return result


class CancelledAfter(asyncio.CancelledError):
    """Cancelled while a tool thread ran; carries the outcome it reached meanwhile."""

    def __init__(self, outcome: tuple[str, bool]) -> None:
        super().__init__()
        self.outcome = outcome


async def _call(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> tuple[str, bool]:
    try:
        return observation_text(await tool.invoke(args, ctx)), False
    except (asyncio.CancelledError, ToolAnswerLostError):  # a lost answer is an unknown outcome, not a failure
        raise
    except (Exception, SystemExit) as exc:  # SystemExit: a tool does not pick polyloop's exit code
        return f"error: {type(exc).__name__}: {exc}", True
