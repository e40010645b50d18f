"""The planner's moves: one small frozen value per thing a run can do next (the `Next` union).

`polyloop._recovery.plan.plan` returns one; the run loop carries it out and
every reader renders it (`polyloop._recovery.describe.describe`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union


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
