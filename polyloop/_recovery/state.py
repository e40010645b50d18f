"""The walker's state: what the records of a run said so far, mutable while the walk is under way.

The bottom of `polyloop._recovery`: every handler module (`on_*`) reads and
files into one `WalkState`, the walker dispatches records to them, and the
verdict freezes what it holds. Nothing here imports a handler, the walker,
the verdict or the planner, so the package reads one way down:
state <- handlers <- walker; state <- plan <- verdict <- walker.

Every execution (model call or action) is in one of the four states of
docs/reference/log-format.md ("The four states of an execution"). `STATE_TABLE`
is where an execution with an intent gets its state; nothing assigns one
anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .._log.errors import Problem
from .._log.records import (
    ActionResult,
    ApprovalRequest,
    Artifact,
    CheckpointAccepted,
    CrashLoopAccepted,
    Decision,
    GuardCheck,
    Intent,
    ModelCallResult,
    Resolution,
    RunFinished,
    RunStarted,
    RunStopped,
    StepCompleted,
)

State = Literal["done", "unknown", "superseded", "resolved", "pending", "alert", "rolled_back"]
DEFAULT_MAX_ATTEMPTS = 6
NO_GUARDS: dict[str, Any] = {}

# The four-state assignment, refined for display. An intent exists for every
# execution the walker knows (no intent, no result = not started, which has
# no record; no intent but a result = impossible, refused by rule 4).
#   (has a result, has a resolution, is the latest attempt, guard phase) -> state
# A result is a `model_call_result`, `step_completed` or `action_result`, or a
# failed precondition (the outcome is known: the tool did not run); a
# resolution is an operator's or the tool's `reconcile`. The guard phase
# (`phase`) is "" for every execution of a 1.0 log. An approval request
# (log format 1.2) is not an execution (it has no intent): its state, waiting
# until a decision says approved / denied / answered, is `REQUEST_STATE`.
STATE_TABLE: dict[tuple[bool, bool, bool, str], State] = {
    (True, False, True, ""): "done",
    (True, False, False, ""): "done",  # a completed earlier attempt cannot exist (rule 9)
    (True, True, True, ""): "resolved",  # resolved executed: the observation completed it
    (True, True, False, ""): "resolved",  # (cannot exist: nothing follows a completed attempt)
    (False, True, True, ""): "resolved",  # an operator (or reconcile) said what happened
    (False, True, False, ""): "resolved",  # resolved not_executed, then run again
    (False, False, True, ""): "unknown",  # intent durable, outcome never recorded
    (False, False, False, ""): "superseded",  # unknown, and a later attempt replaced it
    # 1.1: a precondition is recorded before the tool runs, so an intent
    # without one is an action that provably has not run.
    (False, False, True, "pending"): "pending",
    # 1.1: a failed verification is an alert until a rollback succeeds or an
    # operator settles it (then phase "" and the rows above: resolved).
    (True, False, True, "alert"): "alert",
    (False, True, True, "alert"): "alert",  # reconcile said executed, verification failed
    (True, True, True, "alert"): "alert",
    (True, False, True, "rolled_back"): "rolled_back",
    (False, True, True, "rolled_back"): "rolled_back",
    (True, True, True, "rolled_back"): "rolled_back",
}

RequestState = Literal["waiting", "approved", "denied", "answered"]

# A request's state: the decision's kind, or `waiting` without one. (A request
# is not an execution: it has no intent, so `STATE_TABLE` does not hold it.)
REQUEST_STATE: dict[str | None, RequestState] = {
    None: "waiting",
    "approved": "approved",
    "denied": "denied",
    "answered": "answered",
}


class IntentFields:
    """What an execution's intent and result say, for `Execution` and the walker's own."""

    __slots__ = ()
    intent: Intent
    result: ModelCallResult | StepCompleted | None

    @property
    def tool(self) -> str | None:
        return self.intent.tool

    @property
    def args(self) -> dict[str, Any] | None:
        return self.intent.args

    @property
    def replay(self) -> str | None:
        return self.intent.replay

    @property
    def idempotency_key(self) -> str | None:
        return self.intent.idempotency_key

    @property
    def call(self) -> int | None:
        """Which tool call of its step (from 1) when the step has several; else None."""
        return self.intent.call

    @property
    def error(self) -> str | None:
        """Why a model call attempt failed (None if it did not, or is not a model call)."""
        return self.result.error if isinstance(self.result, ModelCallResult) else None


@dataclass(slots=True)
class RequestView:
    """An approval request and its decision, as the log tells them.

    Attributes:
        result_id: the id the deciding commands take, and the action's first intent gets.
        kind: `approval` or `answer`.
        step: its step.
        tool, args: the tool call the model made.
        request: the `ApprovalRequest` record.
        decision: the `Decision` record, or None while it waits.
        index: position of the request in the log (0-based).
    """

    result_id: str
    kind: str
    step: int
    tool: str
    args: dict[str, Any]
    request: ApprovalRequest
    decision: Decision | None
    index: int

    @property
    def state(self) -> RequestState:
        """`waiting`, `approved`, `denied` or `answered`."""
        return REQUEST_STATE[self.decision.decision if self.decision is not None else None]

    @property
    def approved_args(self) -> dict[str, Any]:
        """The arguments the action runs with once approved: the edited ones, else the model's."""
        d = self.decision
        return d.args if d is not None and d.args is not None else self.request.args

    @property
    def idempotency_key(self) -> str:
        return self.request.idempotency_key

    def observation(self) -> str:
        """What the model reads for a denied request or an answered question."""
        d = self.decision
        assert d is not None and d.decision != "approved"
        if d.decision == "answered":
            return d.answer or ""
        return f"denied by {d.by}: {d.reason}" if d.reason else f"denied by {d.by}"


@dataclass(frozen=True, slots=True)
class Budgets:
    """How much of its retry budgets a run has spent (log format 1.2; all unlimited before).

    Attributes:
        resumes: `resumed` records in the log.
        idle_resumes: resumes since the last completed step (or since an
            operator lifted a crash loop): the crash-loop count.
        max_resumes: the crash-loop budget recorded at the start (None: none).
        streaks: per tool, its error observations in a row (0 after a success).
        limits: per tool, its failure budget (tools without one absent).
        exhausted: `(tool, failures)` once a tool spent its budget (the run ends).
    """

    resumes: int = 0
    idle_resumes: int = 0
    max_resumes: int | None = None
    streaks: dict[str, int] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)
    exhausted: tuple[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "crash_loop": {"resumes": self.resumes, "without_progress": self.idle_resumes, "limit": self.max_resumes},
            "tool_failures": [
                {"tool": t, "in_a_row": self.streaks.get(t, 0), "limit": self.limits.get(t)}
                for t in sorted(set(self.streaks) | set(self.limits))
            ],
        }


def rollback_succeeded(r: Exec) -> bool:
    """A rollback attempt that is known to have undone the action."""
    if r.resolution is not None:
        return r.resolution.outcome == "executed"
    return r.returned is not None and not r.returned.is_error


def phase(x: Exec) -> str:
    """The guard part of an execution's `STATE_TABLE` key: "", pending, alert or rolled_back."""
    if not x.guards or x.intent.kind != "action":
        return ""  # every execution of a tool without guards (all of a 1.0 log)
    ver = x.verification
    if ver is not None and not ver.passed:
        if x.resolution is not None:
            return ""  # an operator settled the alert
        if x.rollbacks and rollback_succeeded(x.rollbacks[-1]):
            return "rolled_back"
        return "alert"
    if (
        x.guards.get("precondition")
        and x.precondition is None
        and x.result is None
        and x.resolution is None
        and x.reconciled is None
    ):
        return "pending"  # the precondition is recorded before the tool runs: it never ran
    return ""


class Exec(IntentFields):
    """An execution while the walk is under way (mutable; frozen into `Execution`)."""

    __slots__ = (
        "intent", "index", "result", "resolution", "guards", "latest", "precondition", "returned",
        "verification", "reconciled", "reconcile_check", "rollbacks", "of",
    )

    def __init__(self, intent: Intent, index: int, guards: dict[str, Any] = NO_GUARDS) -> None:
        self.intent = intent
        self.index = index
        self.result: ModelCallResult | StepCompleted | None = None
        self.resolution: Resolution | None = None  # an operator's
        self.guards = guards  # what run_started recorded for the tool
        self.latest = True
        self.precondition: GuardCheck | None = None
        self.returned: ActionResult | None = None
        self.verification: GuardCheck | None = None
        self.reconciled: Resolution | None = None  # the tool's reconcile said so
        self.reconcile_check: GuardCheck | None = None  # reconcile could not tell
        self.rollbacks: list[Exec] = []
        self.of: Exec | None = None  # for a rollback: its action

    @property
    def rolls_back(self) -> str | None:
        """For a rollback, the result id of the action it rolls back (as `Execution.rolls_back`)."""
        return self.of.intent.result_id if self.of is not None else None

    @property
    def state(self) -> State:
        if not self.guards:  # the common case, kept cheap: a long log has many executions
            # (`returned`: a call of a step of several reports its outcome in an action_result)
            has_result = self.result is not None or self.returned is not None
            return STATE_TABLE[(has_result, self.resolution is not None, self.latest, "")]
        failed_pre = self.precondition is not None and not self.precondition.passed
        has_result = self.result is not None or self.returned is not None or failed_pre
        resolved = self.resolution is not None or self.reconciled is not None
        return STATE_TABLE[(has_result, resolved, self.latest, phase(self))]

    @property
    def verdict(self) -> Resolution | None:
        """The resolution that decides: an operator's wins over reconcile's."""
        return self.resolution or self.reconciled

    # The planner reads these on walker state and on `Execution` alike.
    @property
    def result_id(self) -> str:
        return self.intent.result_id

    @property
    def step(self) -> int:
        return self.intent.step

    @property
    def kind(self) -> str:
        return self.intent.kind

    @property
    def attempt(self) -> int:
        return self.intent.attempt


class Step:
    """A step while the walk is under way.

    `actions` holds every action attempt of the step in log order. When the
    model asked for several tool calls at once (log format 1.2), `calls`
    holds each call's attempts (call 1 first); otherwise it is None and
    `actions` are the attempts of the step's only call.
    """

    __slots__ = ("step", "model_calls", "actions", "output", "completed", "calls")

    def __init__(self, step: int) -> None:
        self.step = step
        self.model_calls: list[Exec] = []
        self.actions: list[Exec] = []
        self.output: ModelCallResult | None = None
        self.completed: StepCompleted | None = None
        self.calls: list[list[Exec]] | None = None

    def attempts(self, call: int | None) -> list[Exec]:
        """The attempts of tool call `call` (None: the step's only call)."""
        return self.actions if call is None or self.calls is None else self.calls[call - 1]


# What stands for every forgotten step: one that completed, and nothing else
# (no executions to list, nothing to append to: rule 6 refuses an intent for it).
FORGOTTEN_STEP = Step(0)
FORGOTTEN_STEP.model_calls = ()  # type: ignore[assignment]
FORGOTTEN_STEP.actions = ()  # type: ignore[assignment]
FORGOTTEN_STEP.completed = StepCompleted(step=0, result_id=None, observation="")


def executions_of(st: Step) -> list[Exec]:
    """Every execution of a step: its model calls, its actions (of every call) and their rollbacks."""
    return st.model_calls + st.actions + [r for x in st.actions for r in x.rollbacks]


def tool_call(output: ModelCallResult | None) -> dict[str, Any] | None:
    out = output.output if output is not None else None
    return out.get("tool_call") if out else None


def tool_calls_of(output: ModelCallResult | None) -> list[dict[str, Any]]:
    """Every tool call of a model output, in order (`tool_calls`, else the one `tool_call`)."""
    out = output.output if output is not None else None
    if not out:
        return []
    calls = out.get("tool_calls")
    if calls:
        return calls
    call = out.get("tool_call")
    return [] if call is None else [call]


def blocking_of(last: Exec) -> list[Exec]:
    """What one tool call's latest attempt makes a person settle (empty: nothing)."""
    state = last.state
    if state == "unknown":
        if last.intent.replay == "safe":
            return []
        if last.guards.get("reconcile") and last.reconcile_check is None:
            return []
        return [last]
    if state != "alert":
        return []
    rb = last.rollbacks[-1] if last.rollbacks else None
    if rb is not None and rb.state == "unknown":
        return [rb]
    assert last.verification is not None
    if last.verification.rollback not in ("undo", "compensate"):
        return [last]
    if rb is None or (rb.resolution is not None and rb.resolution.outcome == "not_executed"):
        return []  # the rollback runs next
    return [last]  # the rollback failed


class WalkState:
    """Everything the records of one run said so far: what the handlers file into.

    One object per walk (`Walker` is one). The handlers (`on_*` modules) are
    the only writers; the queries below only read, and the planner calls
    them on a live run's walker as on a `Recovery`.

    `live` is False for a reader of a whole log; a run loop's own walker is
    made live (`go_live`) once a resume has made its decisions, so that the
    crash-loop stop (a resume's decision) is no longer planned.
    """

    def __init__(self, run_id: str | None = None, *, live: bool = False) -> None:
        self.run_id = run_id
        self.live = live
        self.started: RunStarted | None = None
        self.finished: RunFinished | None = None
        self.minor = 0
        self.steps: list[Step] = []
        self.completed_steps = 0
        self.problems: list[Problem] = []
        self.max_steps: int | None = None
        self.max_attempts = DEFAULT_MAX_ATTEMPTS
        self.by_id: dict[str, Exec] = {}
        self.keys: set[tuple[int, str, int | None, int]] = set()
        self.last: Exec | None = None  # the latest intent: results may only name it
        self.order: list[Exec] = []
        self.resolutions: list[Resolution] = []
        self.forgotten = 0  # steps whose executions a live run let go (`forget_done`)
        self.guards: dict[str, dict[str, Any]] = {}  # {tool: what run_started recorded of its guards}
        self.approvals: dict[str, str] = {}  # {tool: what makes its calls wait for a person}
        self.requests: dict[str, RequestView] = {}
        # Budgets (log format 1.2).
        self.accepted: list[CheckpointAccepted] = []
        self.overrides: list[CheckpointAccepted | CrashLoopAccepted] = []
        self.resumes = 0
        self.idle_resumes = 0
        self.max_resumes: int | None = None
        self.streaks: dict[str, int] = {}
        self.limits: dict[str, int] = {}
        self.default_limit: int | None = None
        self.exhausted: tuple[str, int] | None = None
        # The latest reference per product name, in the order names first appeared.
        self.artifacts: dict[str, Artifact] = {}
        # Outages (log format 1.3): every `run_stopped`, and per step the model call
        # attempts made before its latest one (a stop gives the step a fresh budget).
        self.stops: list[RunStopped] = []
        self.stop_index = -1
        self.fresh_from: dict[int, int] = {}

    @property
    def stopped(self) -> RunStopped | None:
        """The latest `run_stopped`, while nothing was attempted after it (the run is stopped by it)."""
        if not self.stops or (self.last is not None and self.last.index > self.stop_index):
            return None
        return self.stops[-1]

    def go_live(self) -> None:
        """Mark this the run loop's own walker: from now on the crash-loop stop is not planned."""
        self.live = True

    @property
    def open_step(self) -> Step | None:
        """The step after the last completed one, if it has any record."""
        steps = self.steps
        return steps[-1] if steps and steps[-1].completed is None else None

    def execution(self, result_id: str) -> Exec:
        """The execution whose intent has `result_id` (KeyError if none)."""
        return self.by_id[result_id]

    def is_current(self, x: Exec) -> bool:
        """May records about `x` come now? Only about the latest intent, or, in a step of
        several tool calls, about the latest attempt of any call of the open step."""
        if x is self.last:
            return True
        return x.intent.call is not None and x.latest and x.intent.step == self.completed_steps + 1

    def request_of(self, rid: str) -> RequestView | None:
        """The request recorded for the action whose first result id is `rid`, if any."""
        return self.requests.get(rid)

    def waiting_requests(self) -> list[RequestView]:
        """Requests no decision settled yet, in log order (none once the run finished)."""
        if self.finished is not None:
            return []
        return [r for r in self.requests.values() if r.decision is None]

    @property
    def budgets(self) -> Budgets:
        return Budgets(
            self.resumes, self.idle_resumes, self.max_resumes, dict(self.streaks), dict(self.limits), self.exhausted
        )

    def blocking(self) -> list[Exec]:
        """What a person must settle: only the open step's latest action of each tool call
        (or its rollback) can be one.

        An unknown `never` action whose tool declares `reconcile` waits for
        nobody until reconcile could not tell; an alert waits unless an
        undo/compensate rollback is still to run.
        """
        st = self.open_step
        if st is None or not st.actions or self.finished is not None:
            return []
        if st.calls is None:
            return blocking_of(st.actions[-1])
        return [b for attempts in st.calls if attempts for b in blocking_of(attempts[-1])]

    def in_flight(self) -> list[Exec]:
        """Actions of the open step whose outcome the log does not hold: a crash may have cut them short.

        One of them may have replaced a product after its last reference
        and before its own `artifact` record (the write is the tool's side
        effect, the record follows it): see `polyloop._run.artifacts.judge`.
        """
        if self.finished is not None or self.completed_steps >= len(self.steps):
            return []
        st = self.steps[self.completed_steps]
        return [
            x for x in st.actions
            if x.result is None and x.returned is None and x.verdict is None
            and not (x.precondition is not None and not x.precondition.passed)
        ]
