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

from .walker import Recovery, Walker, _tool_call, tool_calls_of
from .._log.ids import result_id as derive_result_id


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

    `why` is `first`, `replay` (an unknown `safe` attempt), `rerun` (an
    operator said the last attempt did not execute), `reconciled` (the
    tool's reconcile said so) or `approved` (a person approved the call;
    `args` are the approved ones, edited or not).
    """

    step: int
    attempt: int
    tool: str
    args: dict[str, Any]
    why: str = "first"
    call: int | None = None  # which tool call, in a step of several


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


@dataclass(frozen=True, slots=True)
class ContinueAction:
    """The action's intent is durable but its precondition was never checked: it has not run.

    Check the precondition now and, if it passes, run the tool under that intent.
    """

    step: int
    attempt: int
    result_id: str
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AbortAction:
    """The precondition failed (recorded): complete the step saying the action did not run."""

    step: int
    result_id: str
    tool: str
    reason: str


@dataclass(frozen=True, slots=True)
class Verify:
    """The tool returned (or reconcile said it executed): read the target back now."""

    step: int
    result_id: str
    tool: str
    observation: str


@dataclass(frozen=True, slots=True)
class Rollback:
    """Verification failed and the tool declares an undo/compensate rollback: run it as `attempt`."""

    step: int
    attempt: int
    action_id: str
    tool: str
    kind: str
    call: int | None = None  # which tool call, in a step of several


@dataclass(frozen=True, slots=True)
class Reconcile:
    """An unknown `never` action whose tool declares `reconcile`: ask the world."""

    step: int
    result_id: str
    tool: str


@dataclass(frozen=True, slots=True)
class Complete:
    """The action's outcome is recorded: complete the step with `observation`.

    `why` is `verified`, `returned` (a call of a step of several), `rolled_back`, `reconciled` or `settled` (an
    operator settled an alert).
    """

    step: int
    result_id: str
    tool: str
    observation: str
    is_error: bool
    why: str


@dataclass(frozen=True, slots=True)
class FinishToolFailures:
    """`tool` returned an error `failures` times in a row, its budget: end the run (log format 1.2)."""

    tool: str
    failures: int


@dataclass(frozen=True, slots=True)
class CrashLoopStop:
    """The run was resumed `resumes` times without completing a step: stop for a person (1.2).

    `step` is the step it keeps dying in; `execution` that step's latest
    action (or model call), where it dies (None when the step has no record).
    Only a resume decides this; the run loop's own plans never do.
    """

    resumes: int
    limit: int
    step: int
    execution: Any = None


@dataclass(frozen=True, slots=True)
class StepCalls:
    """A step of several tool calls (log format 1.2): one move per call, in the calls' order.

    Each move is what the call alone needs: `RunAction`, `ContinueAction`,
    `Verify`, `Rollback` or `Reconcile` (work to do, done together), or
    `Complete`, `ReuseResolution`, `AbortAction` or `Decided` (its outcome is
    known). When every call's outcome is known the step completes with all
    of them. A step any of whose calls waits for a person is never a
    `StepCalls`: it is an `AwaitDecision`, and nothing of it runs.
    """

    step: int
    moves: tuple[Any, ...]

    @property
    def pending(self) -> tuple[Any, ...]:
        """The moves that are work to do now (empty: the step can complete)."""
        return tuple(m for m in self.moves if not isinstance(m, SETTLED))


@dataclass(frozen=True, slots=True)
class AlertStop:
    """A failed verification nothing has undone: stop until an operator settles it."""

    executions: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class AwaitDecision:
    """Tool calls wait for a person (log format 1.2): stop until each is approved, denied or answered.

    Nothing of their step runs meanwhile, not even its calls that wait for
    nobody. `requests` are the waiting `RequestView`s, in log order.
    """

    requests: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Decided:
    """A person denied the call, or answered the question: complete the step with that.

    Nothing of the call runs; `observation` is what the model reads
    (`denied by X: reason`, or the answer).
    """

    step: int
    request_id: str
    tool: str
    observation: str
    is_error: bool


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
    ContinueAction,
    AbortAction,
    Verify,
    Rollback,
    Reconcile,
    Complete,
    AlertStop,
    StepCalls,
    AwaitDecision,
    Decided,
    FinishToolFailures,
    CrashLoopStop,
]

# A call's moves that say its outcome: nothing is left to run for it.
SETTLED = (Complete, ReuseResolution, AbortAction, Decided)


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
        if blocking[0].state == "alert":
            return AlertStop(tuple(blocking))
        return NeedsOperator(tuple(blocking))
    budgets = state.budgets if isinstance(state, Recovery) else state
    if budgets is not None and not getattr(state, "live", False):
        stop = _crash_loop(state, budgets)
        if stop is not None:
            return stop
    done = state.completed_steps
    view = steps[done] if len(steps) > done else None
    if view is None:
        last = steps[-1] if steps else None
        if last is not None and not last.actions and _tool_call(last.output) is None:
            out = last.output.output if last.output is not None else None
            return FinishFinal(last.step, out.get("text") if out else None)
        if budgets is not None and budgets.exhausted is not None:
            return FinishToolFailures(*budgets.exhausted)
        if state.max_steps is not None and done >= state.max_steps:
            return FinishBudget(state.max_steps)
        return CallModel(done + 1, 1)
    if view.output is None:
        calls = view.model_calls
        if len(calls) >= state.max_attempts:
            return FinishAttempts(view.step, len(calls))
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
    call = _tool_call(view.output)
    if call is None:
        return CompleteFinal(view.step, view.output.output.get("text") if view.output.output else None)
    return _call_move(state, view.step, None, view.actions, call)


def _call_move(state: Recovery | Walker, step: int, k: int | None, attempts: Sequence[Any],
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


def _crash_loop(state: Recovery | Walker, budgets: Any) -> CrashLoopStop | None:
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
    state: Recovery | Walker, step: int, k: int | None, attempts: Sequence[Any], call: dict[str, Any]
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


def _why(check: Any) -> str:
    return check.reason or "the verification returned False"


def describe(nxt: Next, run_id: str) -> str:
    """One sentence: what `resume` would do next (commands quoted for a shell)."""
    if isinstance(nxt, Finished):
        return f"nothing: the run finished ({nxt.reason})"
    if isinstance(nxt, NeedsOperator):
        e = nxt.executions[0]
        settle = f"polyloop mark-resolved {shlex.quote(run_id)} {shlex.quote(e.result_id)}"
        if e.kind == "rollback":
            return (
                f"stop: the outcome of the rollback of {e.tool} ({e.result_id}, step {e.step}) is "
                f"unknown and a rollback is never repeated silently; settle it with `{settle} "
                "--executed` (it undid the action) or `--not-executed` (run it again)"
            )
        return (
            f"stop: the outcome of {e.tool} ({e.result_id}, step {e.step}) is unknown and "
            f"the tool is `never` replay; settle it with `{settle} --executed` or `--not-executed`"
        )
    if isinstance(nxt, AlertStop):
        e = nxt.executions[0]
        settle = f"polyloop mark-resolved {shlex.quote(run_id)} {shlex.quote(e.result_id)}"
        ver = e.verification
        why = ver.reason if ver is not None and ver.reason else "it returned False"
        return (
            f"stop: the verification of {e.tool} ({e.result_id}, step {e.step}) failed ({why}) and "
            f"nothing undid it; check the world, then settle it with `{settle} --executed` "
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
            f"`polyloop resume {shlex.quote(run_id)} --accept-crash-loop --reason TEXT`"
        )
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
    rid, run = shlex.quote(r.result_id), shlex.quote(run_id)
    if r.kind == "answer":
        question = r.args.get("question", "")
        return (
            f"{r.tool} ({r.result_id}, step {r.step}) asks a person: {question!r}; answer it with "
            f"`polyloop answer {run} {rid} TEXT`, then resume"
        )
    why = f" ({r.request.reason})" if r.request.reason else ""
    return (
        f"{r.tool} ({r.result_id}, step {r.step}) waits for approval{why}; decide with "
        f"`polyloop approve {run} {rid} --reason TEXT` or `polyloop deny {run} {rid} --reason TEXT`, then resume"
    )
