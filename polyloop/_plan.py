"""The planner: what must happen next in a run, decided once, rendered everywhere.

`plan` is a pure function of what the log says (a `Recovery`, or the run
loop's live `Walker`). It returns one small value of the `Next` union; the
run loop carries it out, and `inspect`, `resume`'s refusals and the command
line's "what next" only render it (`describe`). Nothing else decides.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

from ._classify import Recovery, Walker, _tool_call


@dataclass(frozen=True, slots=True)
class Finished:
    """The run has finished: nothing to do."""

    reason: str


@dataclass(frozen=True, slots=True)
class NeedsOperator:
    """Unknown `never` actions stop the run until an operator settles each."""

    executions: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class CallModel:
    """Call the model for `step` as `attempt` (after a failed or unanswered one if > 1)."""

    step: int
    attempt: int
    after_failure: bool = False


@dataclass(frozen=True, slots=True)
class RunAction:
    """Run the tool call the model chose, as `attempt` of the step's action.

    `why` is `first`, `replay` (an unknown `safe` attempt) or `rerun` (an
    operator said the last attempt did not execute).
    """

    step: int
    attempt: int
    tool: str
    args: dict[str, Any]
    why: str = "first"


@dataclass(frozen=True, slots=True)
class ReuseResolution:
    """An operator said the action executed: its observation completes the step."""

    step: int
    result_id: str
    tool: str
    observation: str


@dataclass(frozen=True, slots=True)
class CompleteFinal:
    """The model gave the final answer of `step`: record the step, then finish."""

    step: int
    text: str | None


@dataclass(frozen=True, slots=True)
class FinishFinal:
    """The final answer's step is recorded: write `run_finished`."""

    step: int
    text: str | None


@dataclass(frozen=True, slots=True)
class FinishBudget:
    """Every step of the budget is done without a final answer."""

    max_steps: int


@dataclass(frozen=True, slots=True)
class FinishAttempts:
    """The model call of `step` failed (or went unanswered) `attempts` times: give up."""

    step: int
    attempts: int


Next = Union[
    Finished,
    NeedsOperator,
    CallModel,
    RunAction,
    ReuseResolution,
    CompleteFinal,
    FinishFinal,
    FinishBudget,
    FinishAttempts,
]


def plan(state: Recovery | Walker) -> Next:
    """Decide what the run must do next, from what its log says.

    Args:
        state: a `Recovery` (a whole log, classified) or the run loop's `Walker`.

    Returns:
        One `Next` value.
    """
    if state.finished is not None:
        return Finished(state.finished.reason)
    if isinstance(state, Recovery):
        blocking: Sequence[Any] = state.blocking
        steps: Sequence[Any] = state.steps
    else:
        blocking = state.blocking()
        steps = state.steps
    if blocking:
        return NeedsOperator(tuple(blocking))
    done = state.completed_steps
    view = steps[done] if len(steps) > done else None
    if view is None:
        last = steps[-1] if steps else None
        if last is not None and not last.actions and _tool_call(last.output) is None:
            out = last.output.output if last.output is not None else None
            return FinishFinal(last.step, out.get("text") if out else None)
        if state.max_steps is not None and done >= state.max_steps:
            return FinishBudget(state.max_steps)
        return CallModel(done + 1, 1)
    if view.output is None:
        calls = view.model_calls
        if len(calls) >= state.max_attempts:
            return FinishAttempts(view.step, len(calls))
        return CallModel(view.step, len(calls) + 1, after_failure=calls[-1].error is not None)
    call = _tool_call(view.output)
    if call is None:
        return CompleteFinal(view.step, view.output.output.get("text") if view.output.output else None)
    if not view.actions:
        return RunAction(view.step, 1, call["name"], call["args"])
    last = view.actions[-1]
    res = last.resolution
    if res is not None and res.outcome == "executed":
        return ReuseResolution(view.step, last.result_id, call["name"], res.observation or "")
    why = "rerun" if res is not None else "replay"
    return RunAction(view.step, last.attempt + 1, call["name"], call["args"], why)


def describe(nxt: Next, run_id: str) -> str:
    """One sentence: what `resume` would do next (commands quoted for a shell)."""
    if isinstance(nxt, Finished):
        return f"nothing: the run finished ({nxt.reason})"
    if isinstance(nxt, NeedsOperator):
        e = nxt.executions[0]
        settle = f"polyloop mark-resolved {shlex.quote(run_id)} {shlex.quote(e.result_id)}"
        return (
            f"stop: the outcome of {e.tool} ({e.result_id}, step {e.step}) is unknown and "
            f"the tool is `never` replay; settle it with `{settle} --executed` or `--not-executed`"
        )
    if isinstance(nxt, FinishFinal):
        return f"record the end of the run: step {nxt.step} gave the final answer"
    if isinstance(nxt, FinishBudget):
        return f"finish the run: the step budget of {nxt.max_steps} is spent"
    if isinstance(nxt, FinishAttempts):
        return (
            f"finish the run with an error: the model call of step {nxt.step} "
            f"failed {nxt.attempts} times"
        )
    if isinstance(nxt, CallModel):
        if nxt.attempt == 1:
            return f"start step {nxt.step} with a model call"
        again = "retry the failed" if nxt.after_failure else "re-issue the unanswered"
        return f"{again} model call of step {nxt.step} as attempt {nxt.attempt}"
    if isinstance(nxt, CompleteFinal):
        return f"record the final answer of step {nxt.step} and finish"
    if isinstance(nxt, ReuseResolution):
        return f"reuse the operator's observation for {nxt.tool} (step {nxt.step}) and continue"
    if nxt.why == "first":
        return f"run {nxt.tool} (step {nxt.step})"
    if nxt.why == "rerun":
        return f"run {nxt.tool} again (step {nxt.step}, attempt {nxt.attempt})"
    return f"replay the safe action {nxt.tool} (step {nxt.step}) as attempt {nxt.attempt}"
