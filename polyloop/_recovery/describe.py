"""What the planner's next move means, in one sentence with the exact commands (quoted for a shell).

Decide once (`polyloop._recovery.plan.plan`), render many times: `inspect`,
`resume`'s refusals and the command line's "what next" all say it this way.
"""

from __future__ import annotations

from typing import Any

from .._log import commands

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


def describe(nxt: Next, run_id: str) -> str:
    """One sentence: what `resume` would do next (commands quoted for a shell)."""
    if isinstance(nxt, Finished):
        return f"nothing: the run finished ({nxt.reason})"
    if isinstance(nxt, NeedsOperator):
        e = nxt.executions[0]
        settle = commands.mark_resolved(run_id, e.result_id, executed=True)
        if e.kind == "rollback":
            return (
                f"stop: the outcome of the rollback of {e.tool} ({e.result_id}, step {e.step}) is "
                f"unknown and a rollback is never repeated silently; settle it with `{settle}` "
                "(it undid the action) or `--not-executed` (run it again)"
            )
        return (
            f"stop: the outcome of {e.tool} ({e.result_id}, step {e.step}) is unknown and "
            f"the tool is `never` replay; settle it with `{settle}` or `--not-executed`"
        )
    if isinstance(nxt, AlertStop):
        e = nxt.executions[0]
        settle = commands.mark_resolved(run_id, e.result_id, executed=True)
        ver = e.verification
        why = ver.reason if ver is not None and ver.reason else "it returned False"
        return (
            f"stop: the verification of {e.tool} ({e.result_id}, step {e.step}) failed ({why}) and "
            f"nothing undid it; check the world, then settle it with `{settle}` "
            "(the effect stands) or `--not-executed` (it has no effect)"
        )
    if isinstance(nxt, StepCalls):
        todo = nxt.pending
        if not todo:
            return f"complete step {nxt.step} with the outcomes of its {len(nxt.moves)} tool calls and continue"
        return f"step {nxt.step} ({len(nxt.moves)} tool calls): " + "; ".join(describe(m, run_id) for m in todo)
    if isinstance(nxt, AwaitDecision):
        return "stop: " + "; ".join(waits_for(r, run_id) for r in nxt.requests)
    if isinstance(nxt, Decided):
        how = "the denial" if nxt.is_error else "the recorded answer"
        return f"complete step {nxt.step} with {how} ({nxt.tool}, {nxt.request_id}) and continue"
    if isinstance(nxt, CrashLoopStop):
        return (
            f"stop: {crash_loop_reason(nxt)}; find out why, then lift the stop with "
            f"`{commands.accept_crash_loop(run_id)}`"
        )
    return _describe_work(nxt)


def _describe_work(nxt: Next) -> str:
    """What `describe` says of a move that is work to do (no stop, no command to print)."""
    if isinstance(nxt, FinishToolFailures):
        return f"finish the run: {nxt.tool} failed {nxt.failures} times in a row, its failure budget"
    if isinstance(nxt, ContinueAction):
        return f"check the precondition of {nxt.tool} (step {nxt.step}), then run it: it has not run yet"
    if isinstance(nxt, AbortAction):
        return f"record that {nxt.tool} (step {nxt.step}) did not run: its precondition failed"
    if isinstance(nxt, Verify):
        return f"verify {nxt.tool} (step {nxt.step}, {nxt.result_id}) by reading its target back"
    if isinstance(nxt, Rollback):
        return (
            f"roll back {nxt.tool} (step {nxt.step}, {nxt.kind}) after its failed verification, "
            f"as rollback attempt {nxt.attempt}"
        )
    if isinstance(nxt, Reconcile):
        return (
            f"ask {nxt.tool}'s reconcile whether {nxt.result_id} (step {nxt.step}) happened, "
            "instead of an operator"
        )
    if isinstance(nxt, Complete):
        how = {
            "verified": "its verified result",
            "rolled_back": "the news that it was rolled back",
            "reconciled": "the observation its reconcile reported",
            "settled": "the operator's settlement",
            "returned": "what it returned",
        }[nxt.why]
        return f"complete step {nxt.step} with {how} ({nxt.tool}) and continue"
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
    if nxt.why == "approved":
        return f"run {nxt.tool} (step {nxt.step}) with the approved arguments"
    if nxt.why == "rerun":
        return f"run {nxt.tool} again (step {nxt.step}, attempt {nxt.attempt})"
    if nxt.why == "reconciled":
        return (
            f"run {nxt.tool} again (step {nxt.step}, attempt {nxt.attempt}): its reconcile "
            "said it did not execute"
        )
    return f"replay the safe action {nxt.tool} (step {nxt.step}) as attempt {nxt.attempt}"


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
