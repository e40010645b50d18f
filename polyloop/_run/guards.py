"""The run loop's part for guarded actions: carrying out the planner's guard verdicts.

`polyloop._run.loop._Run.go` hands every guard `Next` (`ContinueAction`,
`AbortAction`, `Verify`, `Rollback`, `Reconcile`, `Complete`) to
`carry_out`, which does it intent first and writes through the run's
`write` (`polyloop._run.run_port.RunPort`), so the walker judges every record it writes (docs/how-to/guard-a-side-effect.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import contextlib
import inspect
from typing import TYPE_CHECKING, Any

from .._log.errors import RunMismatchError
from .._log.ids import result_id, rollback_key
from .._log.model_port import _History
from .._recovery.plan import AbortAction, Complete, ContinueAction, Reconcile, Rollback, Verify
from .artifacts import Artifacts
from .._log.records import ActionResult, GuardCheck, Intent, Resolution, representable
from .invoke import judge
from .context import ToolContext
from .observe import Reconciled, call_guard, observation_text
from .tools import Tool

if TYPE_CHECKING:
    from .run_port import RunPort


async def carry_out(run: RunPort, planned: Any, history: _History) -> None:
    """Do one guard verdict of the planner."""
    if isinstance(planned, Complete):
        await run.complete(planned.step, planned.result_id, planned.observation, planned.is_error, planned.tool, history)
        return
    if isinstance(planned, AbortAction):
        text = f"error: {planned.tool} did not run: its precondition failed: {planned.reason}"
        await run.complete(planned.step, planned.result_id, text, True, planned.tool, history)
        return
    tool = run.tools.get(planned.tool)
    if tool is None:
        raise RunMismatchError(run.run_id, "tools", planned.tool, sorted(run.tools))
    action = run.walker.execution(planned.action_id if isinstance(planned, Rollback) else planned.result_id)
    intent = action.intent
    assert intent.args is not None and intent.idempotency_key is not None
    ctx = ToolContext(run.run_id, planned.step, intent.attempt, intent.result_id, intent.idempotency_key, intent.call)
    if isinstance(planned, ContinueAction):
        ctx = dataclasses.replace(ctx, artifacts=Artifacts(run, intent.result_id))  # the tool runs: it may keep products
        await run.execute(tool, ctx, intent.args, history)
    elif isinstance(planned, Verify):
        await _verify(run, tool, ctx, intent.args, planned.observation)
    elif isinstance(planned, Rollback):
        await _rollback(run, tool, planned, intent, action)
    else:
        assert isinstance(planned, Reconcile)
        await _reconcile(run, tool, ctx, intent.args)


async def _verify(run: RunPort, tool: Tool, ctx: ToolContext, args: dict[str, Any], observation: str) -> None:
    assert tool.guards.verify is not None
    passed, reason = await judge(tool.guards.verify, "verification", args, observation, ctx)
    kind = None if passed else tool.guards.rollback_kind
    # Durable before anyone is told and before any rollback: the alert's record.
    await run.write(GuardCheck(result_id=ctx.result_id, guard="verify", passed=passed, reason=reason, rollback=kind))
    if not passed:
        run.alerted.add(ctx.result_id)
        await _alert(run, "verification_failed", tool, ctx, args, reason, kind)


async def _rollback(run: RunPort, tool: Tool, planned: Rollback, intent: Intent, action: Any) -> None:
    assert tool.guards.rollback is not None and intent.idempotency_key is not None
    await redeliver(run, action)
    rid = result_id("rollback", planned.step, planned.attempt, intent.call)
    key = rollback_key(intent.idempotency_key)
    # Its own durable intent: a crash inside the rollback leaves an unknown
    # rollback that stops for an operator, never a silent repeat.
    await run.write(
        Intent(kind="rollback", step=planned.step, attempt=planned.attempt, result_id=rid, tool=tool.name,
               args=intent.args, replay="never", idempotency_key=key, call=intent.call)
    )
    returned = action.returned.observation if action.returned is not None else (
        action.reconciled.observation if action.reconciled is not None else "")
    ctx = ToolContext(run.run_id, planned.step, planned.attempt, rid, key, intent.call)
    done = asyncio.ensure_future(_undo(tool.guards.rollback, intent.args, returned, ctx))
    cancelled = False
    while True:
        try:
            observation, failed = await asyncio.shield(done)
            break
        except asyncio.CancelledError:
            if done.done() and done.cancelled():
                raise
            if inspect.iscoroutinefunction(tool.guards.rollback):
                done.cancel()  # an async rollback is cancelled with the run: it stays unknown
                with contextlib.suppress(asyncio.CancelledError):
                    await done
                raise
            # A sync rollback's thread cannot be stopped: hold the run until it ends,
            # then record what it did, as for a tool (polyloop._run.invoke.invoke).
            cancelled = True
    await run.write(ActionResult(result_id=rid, observation=representable(observation), is_error=failed))
    if cancelled:
        raise asyncio.CancelledError()
    if failed:
        await _alert(run, "rollback_failed", tool, ctx, intent.args or {}, observation, planned.kind)


async def _undo(fn: Any, args: Any, returned: str, ctx: ToolContext) -> tuple[str, bool]:
    try:
        return observation_text(await call_guard(fn, args, returned, ctx)), False
    except asyncio.CancelledError:
        raise
    except (Exception, SystemExit) as exc:  # a failed rollback is recorded and alerts
        return f"error: {type(exc).__name__}: {exc}", True


async def _reconcile(run: RunPort, tool: Tool, ctx: ToolContext, args: dict[str, Any]) -> None:
    assert tool.guards.reconcile is not None
    try:
        found = await call_guard(tool.guards.reconcile, args, ctx)
    except asyncio.CancelledError:
        raise
    except (Exception, SystemExit) as exc:
        found = Reconciled("unknown", reason=f"reconcile raised {type(exc).__name__}: {exc}")
    if not isinstance(found, Reconciled):
        found = Reconciled(
            "unknown", reason=f"reconcile returned {type(found).__name__}, not executed(), not_executed() or unknown()"
        )
    if found.outcome == "unknown":
        reason = found.reason or "reconcile could not tell whether it happened"
        await run.write(GuardCheck(result_id=ctx.result_id, guard="reconcile", passed=False, reason=reason))
        return  # the planner stops for an operator
    await run.write(
        Resolution(
            result_id=ctx.result_id,
            outcome=found.outcome,
            observation=representable(found.observation or "") if found.outcome == "executed" else None,
            by="reconcile",
            reason=f"settled by {tool.name}'s reconcile on resume",
            source="reconcile",
        )
    )


async def redeliver(run: RunPort, action: Any) -> None:
    """Tell `on_alert` about a failed verification no call in this process reported.

    The process that recorded it may have died before (or while) it called
    `on_alert`; a resume that finds the alert unsettled tells again, so the
    call comes at least once (`redelivered` marks the repeats).
    """
    intent = action.intent
    if intent.result_id in run.alerted or action.verification is None or action.verification.passed:
        return
    run.alerted.add(intent.result_id)
    tool = run.tools.get(intent.tool)
    if tool is None:
        return
    ctx = ToolContext(run.run_id, intent.step, intent.attempt, intent.result_id, intent.idempotency_key, intent.call)
    ver = action.verification
    await _alert(run, "verification_failed", tool, ctx, intent.args or {}, ver.reason, ver.rollback,
                 redelivered=True)


async def _alert(
    run: RunPort, event: str, tool: Tool, ctx: ToolContext, args: dict[str, Any], reason: str | None, kind: str | None,
    *, redelivered: bool = False,
) -> None:
    """Tell the agent's `on_alert` (the durable record is already written)."""
    callback = run.agent.on_alert
    if callback is None:
        return
    payload = {
        "event": event,
        "run_id": run.run_id,
        "step": ctx.step,
        "result_id": ctx.result_id,
        "tool": tool.name,
        "args": args,
        "idempotency_key": ctx.idempotency_key,
        "reason": reason,
        "rollback": kind,
        "redelivered": redelivered,
    }
    value = callback(payload)
    if inspect.isawaitable(value):
        await value
