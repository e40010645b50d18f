"""The verdict on a log: its executions, steps and status, as frozen values.

`freeze` makes them from a walk's state (`polyloop._recovery.walker` calls
it); everything that reads a log (inspect, resume, the CLI) reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .._log.records import (
    ActionResult,
    GuardCheck,
    Intent,
    ModelCallResult,
    Resolution,
    RunFinished,
    RunStarted,
    RunStopped,
    StepCompleted,
)

from .plan import describe, plan
from .state import DEFAULT_MAX_ATTEMPTS, Budgets, IntentFields, RequestView, State, WalkState

__all__ = [
    "DEFAULT_MAX_ATTEMPTS", "Execution", "IntentFields", "Recovery", "State", "Status", "StepView", "freeze",
    "max_attempts_of", "max_steps_of", "observed",
]

Status = Literal["finished", "needs_operator", "resumable"]


@dataclass(frozen=True, slots=True)
class Execution(IntentFields):
    """One model call or action attempt, as the log tells it.

    Attributes:
        result_id: the id its result is (or would be) stored under.
        kind: `"model_call"`, `"action"` or `"rollback"` (log format 1.1).
        step, attempt: where it belongs (both from 1).
        state: `done`, `unknown`, `superseded` or `resolved`; for guarded
            actions also `pending` (intent durable, precondition not yet
            checked: it has not run), `alert` (its verification failed and
            nothing has settled it) or `rolled_back`.
        intent: the intent record.
        result: the `ModelCallResult` or `StepCompleted` naming it, if any.
        resolution: an operator's `Resolution`, if any (see `verdict`).
        index: position of the intent in the log (0-based).
        precondition: its precondition `GuardCheck`, if recorded.
        returned: what a verified tool or a rollback returned (`ActionResult`).
        verification: its verify `GuardCheck`, if recorded.
        reconciled: the tool's reconcile `Resolution`, if any.
        reconcile_check: a reconcile that could not tell (`GuardCheck`), if any.
        rollbacks: its rollback executions, in order.
        guards: what `run_started` recorded about the tool's guards (None or empty: none).
        rolls_back: for a rollback, the result id of the action it undoes or
            compensates (None otherwise).
    """

    result_id: str
    kind: str
    step: int
    attempt: int
    state: State
    intent: Intent
    result: ModelCallResult | StepCompleted | None
    resolution: Resolution | None
    index: int
    precondition: GuardCheck | None = None
    returned: ActionResult | None = None
    verification: GuardCheck | None = None
    reconciled: Resolution | None = None
    reconcile_check: GuardCheck | None = None
    rollbacks: tuple[Execution, ...] = ()
    guards: dict[str, Any] | None = None
    rolls_back: str | None = None

    @property
    def verdict(self) -> Resolution | None:
        """The resolution that decides: an operator's wins over the tool's reconcile."""
        return self.resolution or self.reconciled

    @property
    def observed(self) -> tuple[str, bool] | None:
        """(observation, is_error) that its recorded result gave the model; None without one."""
        return observed(self)



@dataclass(frozen=True, slots=True)
class StepView:
    """What the log says about one step.

    `output` is the successful model call result (None until the model
    answered); `completed` the step's `StepCompleted` record. `actions`
    holds every action attempt in log order; when the model asked for
    several tool calls at once (log format 1.2), `calls` holds each call's
    attempts, call 1 first (None for a step of at most one call).
    """

    step: int
    model_calls: tuple[Execution, ...]
    actions: tuple[Execution, ...]
    output: ModelCallResult | None
    completed: StepCompleted | None
    calls: tuple[tuple[Execution, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class Recovery:
    """The verdict on a log that a correct writer could have produced.

    Attributes:
        run_id: the run.
        started: its `run_started` record.
        finished: its `run_finished` record, or None.
        executions: every execution in log order.
        steps: one `StepView` per step that has any record, in order.
        status: `finished`, `needs_operator` (something in `blocking`, or an
            approval request that waits for a decision) or `resumable`.
        blocking: what a person must settle: unknown, unresolved `never`
            actions and rollbacks, and alerted actions (state `alert`).
        resolutions: every `resolution` record in log order.
        requests: every approval request (log format 1.2) as a `RequestView`
            with its decision, in log order.
        budgets: how much of its retry budgets the run spent (log format 1.2).
        overrides: every `checkpoint_accepted` and `crash_loop_accepted`
            record in log order (log format 1.2).
        stops: every `run_stopped` record in log order (log format 1.3).
        stopped: the latest of them while nothing was attempted after it:
            the run is stopped, resumable, because a dependency stayed
            unavailable (None otherwise).
    """

    run_id: str
    started: RunStarted
    finished: RunFinished | None
    executions: tuple[Execution, ...]
    steps: tuple[StepView, ...]
    status: Status
    blocking: tuple[Execution, ...]
    resolutions: tuple[Resolution, ...] = ()
    requests: tuple[Any, ...] = ()
    budgets: Budgets | None = None
    overrides: tuple[Any, ...] = ()
    stops: tuple[RunStopped, ...] = ()
    stopped: RunStopped | None = None

    def __repr__(self) -> str:
        # Short on purpose: a 100,000-step verdict printed in full takes seconds
        # (asyncio itself reprs the result of a finished task).
        return (
            f"Recovery(run_id={self.run_id!r}, status={self.status!r}, "
            f"steps={len(self.steps)}, executions={len(self.executions)})"
        )

    @property
    def completed_steps(self) -> int:
        # Steps complete in order, so only the last view can be open.
        n = len(self.steps)
        return n - 1 if n and self.steps[-1].completed is None else n

    def execution(self, result_id: str) -> Execution | None:
        for e in self.executions:
            if e.result_id == result_id:
                return e
        return None

    def request_of(self, result_id: str) -> Any:
        """The approval request recorded under `result_id` (a `RequestView`), or None."""
        for r in self.requests:
            if r.result_id == result_id:
                return r
        return None

    def waiting_requests(self) -> list[Any]:
        """Approval requests and questions no decision settled yet (none once finished)."""
        if self.finished is not None:
            return []
        return [r for r in self.requests if r.decision is None]

    @property
    def max_steps(self) -> int | None:
        return max_steps_of(self.started)

    @property
    def max_attempts(self) -> int:
        """Model call attempts a step may use, as recorded at the start."""
        return max_attempts_of(self.started)

    def next_action(self) -> str:
        """One sentence: the planner's next move, rendered.

        The checkpoint is not judged here (that reads the store and imports
        the target): what `resume` does, a refusal included, is
        `inspect_run(store, run_id, validity=True)`'s `next`.
        """
        return describe(plan(self), self.run_id)


def observed(e: Any) -> tuple[str, bool] | None:
    """(observation, is_error) an action's result recorded, or None when it has none.

    A step's only call records it in its `step_completed` (or, verified, its
    `action_result`); a call of a step of several in its `action_result`,
    and its step's `step_completed` lists the outcome the model was given.
    """
    done = e.result
    if isinstance(done, StepCompleted) and done.calls is not None:
        for c in done.calls:
            if c["result_id"] == e.result_id:
                return c["observation"], c["is_error"]
        done = None
    if done is None or isinstance(done, ModelCallResult):
        done = getattr(e, "returned", None)
    if done is None or done.observation is None:
        return None
    return done.observation, done.is_error


def max_steps_of(started: RunStarted) -> int | None:
    value = started.config.get("max_steps")
    return value if type(value) is int else None


def max_attempts_of(started: RunStarted) -> int:
    value = started.config.get("max_attempts")
    return value if type(value) is int else DEFAULT_MAX_ATTEMPTS


def freeze(s: WalkState) -> Recovery:
    """The frozen verdict on what a walk's state holds (its `started` must be set)."""
    assert s.started is not None
    frozen: dict[int, Execution] = {}
    for x in reversed(s.order):  # a rollback (later in the log) is frozen before its action
        i = x.intent
        if not x.guards:  # positional and without the guard fields: a long log has many
            frozen[id(x)] = Execution(
                i.result_id, i.kind, i.step, i.attempt, x.state, i, x.result, x.resolution, x.index,
                None, x.returned,  # a call of a step of several has its own result
            )
            continue
        frozen[id(x)] = Execution(
            i.result_id, i.kind, i.step, i.attempt, x.state, i, x.result, x.resolution, x.index,
            precondition=x.precondition,
            returned=x.returned,
            verification=x.verification,
            reconciled=x.reconciled,
            reconcile_check=x.reconcile_check,
            rollbacks=tuple(frozen[id(r)] for r in x.rollbacks),
            guards=x.guards,
            rolls_back=x.of.intent.result_id if x.of is not None else None,
        )
    views = tuple(
        StepView(
            step=st.step,
            model_calls=tuple([frozen[id(x)] for x in st.model_calls]),
            actions=tuple([frozen[id(x)] for x in st.actions]),
            output=st.output,
            completed=st.completed,
            calls=None if st.calls is None else tuple(tuple([frozen[id(x)] for x in c]) for c in st.calls),
        )
        for st in s.steps
    )
    blocking = tuple(frozen[id(x)] for x in s.blocking())
    if s.finished is not None:
        status: Status = "finished"
    elif blocking or s.waiting_requests():
        status = "needs_operator"
    else:
        status = "resumable"
    return Recovery(
        run_id=s.started.run_id,
        started=s.started,
        finished=s.finished,
        executions=tuple(frozen[id(x)] for x in s.order),
        steps=views,
        status=status,
        blocking=blocking,
        resolutions=tuple(s.resolutions),
        requests=tuple(RequestView(r.result_id, r.kind, r.step, r.tool, r.args, r.request, r.decision, r.index)
                       for r in s.requests.values()),
        budgets=s.budgets,
        overrides=tuple(s.overrides),
        stops=tuple(s.stops),
        stopped=s.stopped if s.finished is None else None,
    )
