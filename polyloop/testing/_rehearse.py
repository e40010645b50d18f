"""Rehearse a tool's rollback: its verify-fail -> rollback path, end to end, in a test."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._run.agent import Agent
from .._recovery.walker import classify
from .._log.model_port import ScriptedModel
from .._log.records import Record
from .._recovery.verdict import Execution
from .._run.tools import Tool
from ._memory import MemoryStore


@dataclass(frozen=True, slots=True)
class Rehearsal:
    """What happened when a rollback was rehearsed.

    Attributes:
        action: the action's `Execution` (state `rolled_back` when the rollback undid it).
        rollbacks: its rollback executions, in order.
        observation: what the model was told in the end (None if the run stopped).
        alerts: every event `on_alert` received.
        records: the whole log of the rehearsal run.
        stopped: the `NeedsOperatorError` (an `AlertError` when nothing undid the
            action) the run stopped with, or None when it went on.
    """

    action: Execution
    rollbacks: tuple[Execution, ...]
    observation: str | None
    alerts: tuple[dict[str, Any], ...]
    records: tuple[Record, ...]
    stopped: Exception | None

    @property
    def rolled_back(self) -> bool:
        """The rollback ran once, returned normally and the run went on."""
        return self.action.state == "rolled_back" and self.stopped is None


async def rehearse_rollback(
    tool: Tool,
    args: dict[str, Any],
    *,
    break_effect: Callable[[], Any],
    run_id: str = "rehearsal",
) -> Rehearsal:
    """Run `tool` once through the real run loop, break its effect, and let verify and rollback act.

    A one-step agent calls `tool` with `args` on a fresh `MemoryStore`;
    right after the tool returns (and before its verification runs)
    `break_effect()` damages what the tool did, as a bug or a third party
    would. The tool's verify must then fail, an alert is raised, and the
    declared rollback runs under its own intent: what you rehearse is the
    path production takes, not a call of the rollback function alone. The
    tool's world (a test database, a fake API) is yours to set up and check.

    Args:
        tool: a tool that declares `verify` (and usually a rollback).
        args: the arguments the model would send.
        break_effect: called once, after the tool returned; sync or async.
        run_id: the rehearsal run's id.

    Returns:
        A `Rehearsal`; assert on `rolled_back`, `alerts` and your world.

    Raises:
        ValueError: the tool declares no verify (there is nothing to rehearse).
    """
    if tool.guards.verify is None:
        raise ValueError(f"tool {tool.name!r} declares no verify: there is no rollback path to rehearse")
    rehearsed = _breaking(tool, break_effect)
    alerts: list[dict[str, Any]] = []
    model = ScriptedModel([{"tool": tool.name, "args": args}, {"final": "rehearsal over"}])
    store = MemoryStore()
    # A rehearsal of the rollback path, not of approvals: the copy carries no `approval`, and an
    # irreversible tool is not gated either (the opt-out is recorded in the rehearsal's log).
    agent = Agent(model=model, tools=[rehearsed], on_alert=alerts.append, max_steps=2, approve_irreversible=False)
    stopped: Exception | None = None
    try:
        await agent.run("rehearse the rollback", run_id=run_id, store=store)
    except Exception as exc:  # NeedsOperatorError and its AlertError: the rehearsal's finding
        from .._log.errors import NeedsOperatorError

        if not isinstance(exc, NeedsOperatorError):
            raise
        stopped = exc
    records = tuple(await store.read_log(run_id))
    recovery = classify(records, run_id=run_id)
    action = recovery.steps[0].actions[0]
    done = recovery.steps[0].completed
    return Rehearsal(
        action=action,
        rollbacks=action.rollbacks,
        observation=done.observation if done is not None else None,
        alerts=tuple(alerts),
        records=records,
        stopped=stopped,
    )


def _breaking(tool: Tool, break_effect: Callable[[], Any]) -> Tool:
    """A copy of `tool` whose function breaks its own effect right after it returns."""
    fn = tool.fn

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapped(*a: Any, **kw: Any) -> Any:
            value = await fn(*a, **kw)
            broken = break_effect()
            if inspect.isawaitable(broken):
                await broken
            return value
    else:
        @functools.wraps(fn)
        def wrapped(*a: Any, **kw: Any) -> Any:
            value = fn(*a, **kw)
            broken = break_effect()
            if inspect.isawaitable(broken):
                raise TypeError("an async break_effect needs an async tool")
            return value

    copy = Tool(wrapped, name=tool.name, description=tool.description, replay=tool.replay,
                irreversible=tool.irreversible)
    copy.guards = tool.guards
    return copy
