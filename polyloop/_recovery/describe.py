"""What the planner's next move means, in one sentence with the exact commands (quoted for a shell).

Decide once (`polyloop._recovery.plan.plan`), render many times: `inspect`,
`resume`'s refusals and the command line's "what next" all say it this way.
"""

from __future__ import annotations

from typing import Any

from .._log import commands
from .._log.names import execution_name

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
    StepCalls,
    Verify,
)


def crash_loop_reason(stop: CrashLoopStop) -> str:
    """Why a crash loop stops the run, in one clause."""
    e = stop.execution
    if e is None:
        where = f"step {stop.step} before its first record"
    elif e.kind == "model_call":
        where = f"step {stop.step}, at its model call ({e.result_id})"
    else:
        where = f"step {stop.step}, at {e.tool} ({e.result_id})"
    return (
        f"the run was resumed {stop.resumes} times without completing a step (its crash-loop budget "
        f"is {stop.limit}); it keeps dying in {where}"
    )


def describe(planned: Next, run_id: str) -> str:
    """One sentence: what `resume` would do next (commands quoted for a shell)."""
    if isinstance(planned, Finished):
        return f"nothing: the run finished ({planned.reason})"
    if isinstance(planned, NeedsOperator):
        e = planned.executions[0]
        settle = commands.mark_resolved(run_id, e.result_id, executed=True)
        if e.kind == "rollback":
            return (
                f"stop: {execution_name(e)} is in doubt: its outcome is "
                f"unknown and a rollback is never repeated silently; settle it with `{settle}` "
                "(it undid the action) or `--not-executed` (run it again)"
            )
        return (
            f"stop: the outcome of {e.tool} ({e.result_id}, step {e.step}) is unknown and "
            f"the tool is `never` replay; settle it with `{settle}` or `--not-executed`"
        )
    if isinstance(planned, AlertStop):
        e = planned.executions[0]
        settle = commands.mark_resolved(run_id, e.result_id, executed=True)
        ver = e.verification
        why = ver.reason if ver is not None and ver.reason else "it returned False"
        return (
            f"stop: the verification of {e.tool} ({e.result_id}, step {e.step}) failed ({why}) and "
            f"nothing undid it; check the world, then settle it with `{settle}` "
            "(the effect stands) or `--not-executed` (it has no effect)"
        )
    if isinstance(planned, StepCalls):
        todo = planned.pending
        if not todo:
            return f"complete step {planned.step} with the outcomes of its {len(planned.moves)} tool calls and continue"
        return f"step {planned.step} ({len(planned.moves)} tool calls): " + "; ".join(describe(m, run_id) for m in todo)
    if isinstance(planned, AwaitDecision):
        return "stop: " + "; ".join(waits_for(r, run_id) for r in planned.requests)
    if isinstance(planned, Decided):
        how = "the denial" if planned.is_error else "the recorded answer"
        return f"complete step {planned.step} with {how} ({planned.tool}, {planned.request_id}) and continue"
    if isinstance(planned, CrashLoopStop):
        return (
            f"stop: {crash_loop_reason(planned)}; find out why, then lift the stop with "
            f"`{commands.accept_crash_loop(run_id)}`"
        )
    return _describe_work(planned)


def _describe_work(planned: Next) -> str:
    """What `describe` says of a move that is work to do (no stop, no command to print)."""
    if isinstance(planned, FinishToolFailures):
        return f"finish the run: {planned.tool} failed {planned.failures} times in a row, its failure budget"
    if isinstance(planned, ContinueAction):
        return f"check the precondition of {planned.tool} (step {planned.step}), then run it: it has not run yet"
    if isinstance(planned, AbortAction):
        return f"record that {planned.tool} (step {planned.step}) did not run: its precondition failed"
    if isinstance(planned, Verify):
        return f"verify {planned.tool} (step {planned.step}, {planned.result_id}) by reading its target back"
    if isinstance(planned, Rollback):
        return (
            f"roll back {planned.tool} (step {planned.step}, {planned.kind}) after its failed verification, "
            f"as rollback attempt {planned.attempt}"
        )
    if isinstance(planned, Reconcile):
        return (
            f"ask {planned.tool}'s reconcile whether {planned.result_id} (step {planned.step}) happened, "
            "instead of an operator"
        )
    if isinstance(planned, Complete):
        how = {
            "verified": "its verified result",
            "rolled_back": "the news that it was rolled back",
            "reconciled": "the observation its reconcile reported",
            "settled": "the operator's settlement",
            "returned": "what it returned",
        }[planned.why]
        return f"complete step {planned.step} with {how} ({planned.tool}) and continue"
    if isinstance(planned, FinishFinal):
        return f"record the end of the run: step {planned.step} gave the final answer"
    if isinstance(planned, FinishBudget):
        return f"finish the run: the step budget of {planned.max_steps} is spent"
    if isinstance(planned, FinishAttempts):
        return (
            f"finish the run with an error: the model call of step {planned.step} "
            f"failed {planned.attempts} times"
        )
    if isinstance(planned, CallModel):
        if planned.attempt == 1:
            return f"start step {planned.step} with a model call"
        again = "retry the failed" if planned.after_failure else "re-issue the unanswered"
        return f"{again} model call of step {planned.step} as attempt {planned.attempt}"
    if isinstance(planned, CompleteFinal):
        return f"record the final answer of step {planned.step} and finish"
    if isinstance(planned, ReuseResolution):
        return f"reuse the operator's observation for {planned.tool} (step {planned.step}) and continue"
    if planned.why == "first":
        return f"run {planned.tool} (step {planned.step})"
    if planned.why == "approved":
        return f"run {planned.tool} (step {planned.step}) with the approved arguments"
    if planned.why == "rerun":
        return f"run {planned.tool} again (step {planned.step}, attempt {planned.attempt})"
    if planned.why == "reconciled":
        return (
            f"run {planned.tool} again (step {planned.step}, attempt {planned.attempt}): its reconcile "
            "said it did not execute"
        )
    return f"replay the safe action {planned.tool} (step {planned.step}) as attempt {planned.attempt}"


def waits_for(r: Any, run_id: str) -> str:
    """What one waiting request needs, with the exact commands (quoted for a shell)."""
    if r.kind == "answer":
        question = r.args.get("question", "")
        return (
            f"{r.tool} ({r.result_id}, step {r.step}) asks a person: {question!r}; answer it with "
            f"`{commands.answer(run_id, r.result_id)}`, then resume"
        )
    why = f" ({r.request.reason})" if r.request.reason else ""
    return (
        f"{r.tool} ({r.result_id}, step {r.step}) waits for approval{why}; decide with "
        f"`{commands.approve(run_id, r.result_id)}` or `{commands.deny(run_id, r.result_id)}`, then resume"
    )
