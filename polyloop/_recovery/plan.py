"""The planner: what must happen next in a run, decided once, rendered everywhere.

`plan` is a pure function of what the log says (a `Recovery`, or the run
loop's live `Walker`). It returns one small value of the `Next` union
(`polyloop._recovery.moves`); the run loop carries it out, and `inspect`,
`resume`'s refusals and the command line's "what next" only render it
(`describe`). Nothing else decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .._log.ids import result_id as derive_result_id
from .._log.records import ModelCallResult
from .describe import crash_loop_reason, describe, waits_for
from .moves import (
    AbortAction,
    AlertStop,
    AwaitDecision,
    CallModel,
    Complete,
    CompleteFinal,
    ContinueAction,
    CrashLoopStop,
    Decided,
    FinishAttempts,
    FinishBudget,
    FinishFinal,
    FinishToolFailures,
    Finished,
    NeedsOperator,
    Next,
    Reconcile,
    ReuseResolution,
    Rollback,
    RunAction,
    SETTLED,
    StepCalls,
    Verify,
)
from .state import WalkState, tool_call, tool_calls_of

__all__ = [
    "AbortAction",
    "AlertStop",
    "AwaitDecision",
    "CallModel",
    "Complete",
    "CompleteFinal",
    "ContinueAction",
    "CrashLoopStop",
    "Decided",
    "FinishAttempts",
    "FinishBudget",
    "FinishFinal",
    "FinishToolFailures",
    "Finished",
    "NeedsOperator",
    "Next",
    "Reconcile",
    "ReuseResolution",
    "Rollback",
    "RunAction",
    "SETTLED",
    "StepCalls",
    "Verify",
    "Planned",
    "crash_loop_reason",
    "describe",
    "plan",
    "waits_for",
]


class Planned(Protocol):
    """What the planner reads: a `Recovery` (a whole log, classified) or a `WalkState` (a live walk)."""

    @property
    def finished(self) -> Any: ...
    @property
    def steps(self) -> Sequence[Any]: ...
    @property
    def completed_steps(self) -> int: ...
    @property
    def max_steps(self) -> int | None: ...
    @property
    def max_attempts(self) -> int: ...
    def request_of(self, rid: str) -> Any: ...
    def waiting_requests(self) -> list[Any]: ...


def plan(state: Planned) -> Next:
    """Decide what the run must do next, from what its log says.

    Args:
        state: a `Recovery` (a whole log, classified) or the run loop's `Walker`
            (a live one never plans the crash-loop stop: that is a resume's decision).

    Returns:
        One `Next` value.
    """
    if state.finished is not None:
        return Finished(state.finished.reason)
    steps = state.steps
    if isinstance(state, WalkState):
        blocking: Sequence[Any] = state.blocking()
        budgets: Any = state  # a walk keeps its budget counts itself
        live = state.live
    else:
        verdict: Any = state
        blocking, budgets, live = verdict.blocking, verdict.budgets, False
    if blocking:
        if blocking[0].state == "alert":
            return AlertStop(tuple(blocking))
        return NeedsOperator(tuple(blocking))
    if budgets is not None and not live:
        stop = _crash_loop(state, budgets)
        if stop is not None:
            return stop
    done = state.completed_steps
    view = steps[done] if len(steps) > done else None
    if view is None:
        last = steps[-1] if steps else None
        if last is not None and not last.actions and tool_call(last.output) is None:
            out = last.output.output if last.output is not None else None
            return FinishFinal(last.step, out.get("text") if out else None)
        if budgets is not None and budgets.exhausted is not None:
            return FinishToolFailures(*budgets.exhausted)
        if state.max_steps is not None and done >= state.max_steps:
            return FinishBudget(state.max_steps)
        return CallModel(done + 1, 1)
    if view.output is None:
        calls = view.model_calls
        # A transient failure (log format 1.3) spends the outage budget, never this one.
        spent = sum(1 for c in calls if not (isinstance(c.result, ModelCallResult) and c.result.transient))
        if spent >= state.max_attempts:
            return FinishAttempts(view.step, spent)
        return CallModel(view.step, len(calls) + 1, after_failure=calls[-1].error is not None)
    if view.calls is not None:
        calls = tool_calls_of(view.output)
        moves = tuple(
            _call_move(state, view.step, k, a, c) for k, (a, c) in enumerate(zip(view.calls, calls), start=1)
        )
        if any(isinstance(m, AwaitDecision) for m in moves):
            # Nothing of a step runs while any of its calls waits for a person: the
            # other calls run with the approved ones once every request is decided.
            return AwaitDecision(tuple(state.waiting_requests()))
        return StepCalls(view.step, moves)
    call = tool_call(view.output)
    if call is None:
        return CompleteFinal(view.step, view.output.output.get("text") if view.output.output else None)
    return _call_move(state, view.step, None, view.actions, call)


def _call_move(state: Planned, step: int, k: int | None, attempts: Sequence[Any],
               call: dict[str, Any]) -> Next:
    """The next move for one tool call (`k` None: the step's only call), from its attempts."""
    gated, call = _gated(state, step, k, attempts, call)
    if gated is not None:
        return gated
    if not attempts:
        approved = state.request_of(derive_result_id("action", step, 1, k)) is not None
        return RunAction(step, 1, call["name"], call["args"], "approved" if approved else "first", call=k)
    last = attempts[-1]
    guarded = _guarded(step, last, call, k)
    if guarded is not None:
        return guarded
    res = last.resolution or last.reconciled
    if res is not None and res.outcome == "executed":
        return ReuseResolution(step, last.result_id, call["name"], res.observation or "")
    if res is not None and res.source == "reconcile":
        return RunAction(step, last.attempt + 1, call["name"], call["args"], "reconciled", call=k)
    why = "rerun" if res is not None else "replay"
    return RunAction(step, last.attempt + 1, call["name"], call["args"], why, call=k)


def _crash_loop(state: Planned, budgets: Any) -> CrashLoopStop | None:
    """A resume's stop once `max_resumes_without_progress` resumes completed no step."""
    limit = budgets.max_resumes
    if limit is None or budgets.idle_resumes < limit:
        return None
    step = state.completed_steps + 1
    view = state.steps[step - 1] if len(state.steps) >= step else None
    last = None
    if view is not None:
        last = view.actions[-1] if view.actions else (view.model_calls[-1] if view.model_calls else None)
    return CrashLoopStop(budgets.idle_resumes, limit, step, last)


def _gated(
    state: Planned, step: int, k: int | None, attempts: Sequence[Any], call: dict[str, Any]
) -> tuple[Next | None, dict[str, Any]]:
    """For a tool call that waited for a person: the next move (None: run it) and the call to run.

    The call to run carries the approved arguments (edited or not); a call
    without an approval request is returned as the model made it.
    """
    first = attempts[0].result_id if attempts else derive_result_id("action", step, 1, k)
    req = state.request_of(first)
    if req is None:
        return None, call
    if req.decision is None:
        return AwaitDecision(tuple(state.waiting_requests())), call
    if req.decision.decision != "approved":
        denied = req.decision.decision == "denied"
        return Decided(step, req.result_id, req.tool, req.observation(), denied), call
    return None, {"name": call["name"], "args": req.approved_args}


def _guarded(step: int, last: Any, call: dict[str, Any], k: int | None = None) -> Next | None:
    """The next move for an action with guard records, or a returned call of a step of several
    (None: decide as for any action)."""
    tool, rid = call["name"], last.result_id
    state = last.state
    if state == "pending":
        return ContinueAction(step, last.attempt, rid, tool, call["args"])
    pre = last.precondition
    if pre is not None and not pre.passed:
        return AbortAction(step, rid, tool, pre.reason or "the precondition returned False")
    ver = last.verification
    if state == "alert" or state == "rolled_back":
        assert ver is not None
        rb = last.rollbacks[-1] if last.rollbacks else None
        if state == "alert":  # the blocking check let it through: a rollback is to run
            attempt = 1 if rb is None else rb.attempt + 1
            return Rollback(step, attempt, rid, tool, ver.rollback or "", call=k)
        assert rb is not None
        said = rb.returned.observation if rb.returned is not None else (rb.resolution.observation or "")
        text = f"{tool} was rolled back ({ver.rollback}) because its verification failed: {_why(ver)}"
        return Complete(step, rid, tool, text + (f"; the rollback returned: {said}" if said else ""), True,
                        "rolled_back")
    if ver is not None and not ver.passed:  # an operator settled the alert
        res = last.resolution
        if res.outcome == "executed":
            return Complete(step, rid, tool, res.observation or "", False, "settled")
        text = f"{tool} did not take effect (an operator settled its failed verification)"
        return Complete(step, rid, tool, text + (f": {res.reason}" if res.reason else ""), True, "settled")
    reconciled = last.reconciled
    if last.resolution is None and reconciled is not None and reconciled.outcome == "executed":
        if ver is None and (last.guards or {}).get("verify"):
            return Verify(step, rid, tool, reconciled.observation or "")
        return Complete(step, rid, tool, reconciled.observation or "", False, "reconciled")
    returned = last.returned
    if returned is not None:
        if ver is None and not returned.is_error and (last.guards or {}).get("verify"):
            return Verify(step, rid, tool, returned.observation)
        return Complete(step, rid, tool, returned.observation, returned.is_error,
                        "verified" if ver is not None else "returned")
    if state == "unknown" and last.replay != "safe" and (last.guards or {}).get("reconcile"):
        return Reconcile(step, rid, tool)
    return None


def _why(check: Any) -> str:
    return check.reason or "the verification returned False"
