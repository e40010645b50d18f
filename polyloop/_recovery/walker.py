"""Recovery classification: a pure walk from a run's records to a verdict.

Every execution (model call or action) is in one of the four states of
docs/reference/log-format.md ("The four states of an execution"): done
(intent and result), not started (neither: it simply has no record yet),
unknown (intent, no result) and impossible (result, no intent: corruption).
`STATE_TABLE` below is where an execution with an intent gets its state; the
walker assigns nothing anywhere else.

The walker has one handler per record kind. Each handler checks the
invariants its record must keep (numbered as in the log-format reference,
and every `Problem` carries that number) and files the record into the
open step. Any state a correct writer cannot produce is a `Problem`;
`classify` raises `CorruptLogError` listing all of them. The run loop feeds
the records it writes into the same walker, so what a run does and what a
later reader judges can never drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from .on_decisions import DecisionHandlers, RequestView, approvals_of, check_approval_config
from .on_budgets import BudgetHandlers
from .on_artifacts import ArtifactHandlers
from .._log.errors import CorruptLogError, Problem
from .on_calls import CallHandlers, tool_calls_of
from .on_guards import NO_GUARDS, GuardHandlers, check_guard_config, guards_of, phase
from .on_keys import KeyHandlers
from .._log.ids import result_id as derive_result_id
from .verdict import (
    DEFAULT_MAX_ATTEMPTS,
    Execution,
    IntentFields,
    Recovery,
    State,
    Status,
    StepView,
    max_attempts_of,
    max_steps_of,
)
from .._log.records import (
    ActionResult,
    ApprovalRequest,
    Decision,
    CheckpointAccepted,
    CrashLoopAccepted,
    Artifact,
    GuardCheck,
    Intent,
    ModelCallResult,
    Record,
    Resolution,
    Resumed,
    RunFinished,
    RunStarted,
    StepCompleted,
    paused_gc,
)


# The four-state assignment, refined for display. An intent exists for every
# execution the walker knows (no intent, no result = not started, which has
# no record; no intent but a result = impossible, refused by rule 4).
#   (has a result, has a resolution, is the latest attempt, guard phase) -> state
# A result is a `model_call_result`, `step_completed` or `action_result`, or a
# failed precondition (the outcome is known: the tool did not run); a
# resolution is an operator's or the tool's `reconcile`. The guard phase
# (`_guard_walk.phase`) is "" for every execution of a 1.0 log. An approval request
# (log format 1.2) is not an execution (it has no intent): its state, waiting
# until a decision says approved / denied / answered, is `_decision_walk.REQUEST_STATE`.
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

_VERSION = re.compile(r"[0-9]+\.[0-9]+")


class _Exec(IntentFields):
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
        self.rollbacks: list[_Exec] = []
        self.of: _Exec | None = None  # for a rollback: its action

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


class _Step:
    """A step while the walk is under way.

    `actions` holds every action attempt of the step in log order. When the
    model asked for several tool calls at once (log format 1.2), `calls`
    holds each call's attempts (call 1 first); otherwise it is None and
    `actions` are the attempts of the step's only call.
    """

    __slots__ = ("step", "model_calls", "actions", "output", "completed", "calls")

    def __init__(self, step: int) -> None:
        self.step = step
        self.model_calls: list[_Exec] = []
        self.actions: list[_Exec] = []
        self.output: ModelCallResult | None = None
        self.completed: StepCompleted | None = None
        self.calls: list[list[_Exec]] | None = None

    def attempts(self, call: int | None) -> list[_Exec]:
        """The attempts of tool call `call` (None: the step's only call)."""
        return self.actions if call is None or self.calls is None else self.calls[call - 1]


# What stands for every forgotten step: one that completed, and nothing else
# (no executions to list, nothing to append to: rule 6 refuses an intent for it).
_FORGOTTEN_STEP = _Step(0)
_FORGOTTEN_STEP.model_calls = ()  # type: ignore[assignment]
_FORGOTTEN_STEP.actions = ()  # type: ignore[assignment]
_FORGOTTEN_STEP.completed = StepCompleted(step=0, result_id=None, observation="")


def _executions_of(st: _Step) -> list[_Exec]:
    """Every execution of a step: its model calls, its actions (of every call) and their rollbacks."""
    return st.model_calls + st.actions + [r for x in st.actions for r in x.rollbacks]


def _tool_call(output: ModelCallResult | None) -> dict[str, Any] | None:
    out = output.output if output is not None else None
    return out.get("tool_call") if out else None


class Walker(GuardHandlers, CallHandlers, DecisionHandlers, BudgetHandlers, ArtifactHandlers, KeyHandlers):
    """Reads a run's records one at a time and keeps what they mean.

    `feed` never raises on a bad record: it files a `Problem` (with the
    number of the rule broken) and skips the record, so a reader can list
    every problem of a log. The run loop feeds the records it writes and
    plans from the same state (`polyloop._recovery.plan.plan` accepts a walker).
    """

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id
        self.started: RunStarted | None = None
        self.finished: RunFinished | None = None
        self.steps: list[_Step] = []
        self.completed_steps = 0
        self.problems: list[Problem] = []
        self.max_steps: int | None = None
        self.max_attempts = DEFAULT_MAX_ATTEMPTS
        self._by_id: dict[str, _Exec] = {}
        self._keys: set[tuple[int, str, int]] = set()
        self._last: _Exec | None = None  # the latest intent: results may only name it
        self._order: list[_Exec] = []
        self._resolutions: list[Resolution] = []
        self._count = 0
        self._forgotten = 0  # steps whose executions a live run let go (`forget_done`)
        self.minor = 0
        self.guards: dict[str, dict[str, Any]] = {}
        self.approvals: dict[str, str] = {}
        self.requests: dict[str, RequestView] = {}
        self._init_budgets()
        self.artifacts: dict[str, Artifact] = {}
        self._handlers: dict[type, Callable[[Any, int], str | tuple[int, str] | None]] = {
            RunStarted: self._run_started,
            Intent: self._intent,
            ModelCallResult: self._model_call_result,
            StepCompleted: self._step_completed,
            RunFinished: self._run_finished,
            Resolution: self._resolution,
            GuardCheck: self._guard_check,
            ActionResult: self._action_result,
            ApprovalRequest: self._approval_request,
            Decision: self._decision,
            CheckpointAccepted: self._checkpoint_accepted,
            Resumed: self._resumed,
            CrashLoopAccepted: self._crash_loop_accepted,
            Artifact: self._artifact,
        }

    # -- feeding ------------------------------------------------------------------

    def feed(self, record: Record) -> bool:
        """Take the next record; return False (and file a `Problem`) if it is refused."""
        index = self._count
        self._count += 1
        if index == 0:
            bad = self._first(record)
        elif self.started is None:
            return False  # nothing can be judged without a valid first record
        elif self.finished is not None:
            bad = (2, f"{record.TAG} after run_finished")
        else:
            bad = self._handlers[type(record)](record, index)
        if bad is None:
            return True
        self.problems.append(Problem(bad[1], index=index, rule=bad[0]))
        return False

    def feed_all(self, records: Sequence[Record]) -> Walker:
        with paused_gc():
            feed = self.feed
            for record in records:
                feed(record)
        if not records:
            self.problems.append(Problem("the log has no records", rule=1))
        return self

    @property
    def open_step(self) -> _Step | None:
        """The step after the last completed one, if it has any record."""
        steps = self.steps
        return steps[-1] if steps and steps[-1].completed is None else None

    # -- one handler per record kind ------------------------------------------------

    def _first(self, rec: Record) -> tuple[int, str] | None:
        if not isinstance(rec, RunStarted):
            return 1, f"the first record is {rec.TAG}, not run_started"
        if self.run_id is not None and rec.run_id != self.run_id:
            bad: tuple[int, str] | None = (1, f"run_started names run {rec.run_id!r}, not {self.run_id!r}")
        else:
            bad = _check_config(rec)
        self.started = rec
        if bad is None:
            self.minor = int(rec.schema_version.split(".")[1])
            self.guards = guards_of(rec.config)
            self.approvals = approvals_of(rec.config)
            bad = self._budgets_from(rec)
        self.max_steps = max_steps_of(rec)
        self.max_attempts = max_attempts_of(rec)
        return bad

    def _run_started(self, rec: RunStarted, index: int) -> tuple[int, str]:
        return 1, "a second run_started"

    def _intent(self, rec: Intent, index: int) -> tuple[int, str] | None:
        rid = rec.result_id
        if rid in self._by_id:
            return 3, f"result id {rid} is used by a second intent"
        call = rec.call
        key = (rec.step, rec.kind, call, rec.attempt)
        if key in self._keys:
            return 5, (f"two intents for step {rec.step} {rec.kind} attempt {rec.attempt}: "
                       "two writers interleaved")
        derived = derive_result_id(rec.kind, rec.step, rec.attempt, call)
        if rid != derived:
            return 13, (
                f"result id {rid!r} is not the one a writer derives for {rec.kind} step "
                f"{rec.step} attempt {rec.attempt} ({derived})"
            )
        open_step = self.completed_steps + 1
        if rec.step != open_step:
            return 6, f"intent for step {rec.step} while step {open_step} is open"
        if self.steps and _is_final(self.steps[-1]):
            return 14, f"intent for step {rec.step} after step {rec.step - 1} gave the final answer"
        if self.max_steps is not None and rec.step > self.max_steps:
            return 14, f"intent for step {rec.step} beyond the step budget of {self.max_steps}"
        if self.exhausted is not None:
            return self._budget_intent(rec)
        if len(self.steps) < rec.step:
            self.steps.append(_Step(rec.step))
        st = self.steps[rec.step - 1]
        if rec.kind == "model_call":
            bad = self._model_intent(rec, st)
        else:
            bad = self._call_number(rec, st)
            if bad is None:
                bad = self._action_intent(rec, st) if rec.kind == "action" else self._rollback_intent(rec, st)
        if bad is not None:
            return bad
        x = _Exec(rec, index, self.guards.get(rec.tool or "", NO_GUARDS))
        self._by_id[rid] = x
        self._keys.add(key)
        if rec.kind == "rollback":
            owner = st.attempts(call)[-1]
            siblings = owner.rollbacks
            x.of = owner
        elif rec.kind == "model_call":
            siblings = st.model_calls
        else:
            siblings = st.attempts(call)
            if call is not None:
                st.actions.append(x)
        if siblings:
            siblings[-1].latest = False
        siblings.append(x)
        self._order.append(x)
        self._last = x
        return None

    def _attempt(self, rec: Intent, attempts: list[_Exec]) -> tuple[int, str] | None:
        if rec.attempt != len(attempts) + 1:
            return 6, (f"{rec.kind} attempt {rec.attempt} of step {rec.step} follows "
                       f"{len(attempts)} earlier attempts")
        return None

    def _model_intent(self, rec: Intent, st: _Step) -> tuple[int, str] | None:
        bad = self._attempt(rec, st.model_calls)
        if bad is not None:
            return bad
        if st.output is not None:
            return 7, f"a second model call for step {rec.step} after one returned"
        return None

    def _action_intent(self, rec: Intent, st: _Step) -> tuple[int, str] | None:
        attempts = st.attempts(rec.call)
        bad = self._attempt(rec, attempts)
        if bad is not None:
            return bad
        if st.output is None:
            return 8, f"action intent of step {rec.step} before its model call returned"
        call = tool_calls_of(st.output)[rec.call - 1] if rec.call is not None else _tool_call(st.output)
        gate = self._gate_intent(rec, st) if call is not None else True
        if gate is not True:
            if gate is not None:  # rules 31-32: a tool call that waited for a person
                return gate
            # rule 8 as amended by 31: the intent carries the approved arguments
        elif call is None or call["name"] != rec.tool or call["args"] != rec.args:
            return 8, f"action {rec.tool} of step {rec.step} is not the tool call the model returned"
        if attempts:
            prev = attempts[-1]
            if prev.result is not None or prev.returned is not None or prev.precondition is not None \
                    and not prev.precondition.passed:
                return 9, f"action of step {rec.step} attempted again after it completed"
            res = prev.verdict
            if res is not None and res.outcome == "executed":
                return 9, f"action of step {rec.step} attempted again after an operator said it executed"
            if prev.guards.get("precondition") and prev.precondition is None and res is None:
                return 9, f"action of step {rec.step} attempted again before its precondition was checked"
            if res is None and prev.intent.replay != "safe":
                return 9, (f"`never` action {prev.result_id} was attempted again without a "
                           "not_executed resolution")
        first = attempts[0] if attempts else None
        return self._action_key(rec, first, self.request_of(first.result_id if first else rec.result_id))

    def _result_target(self, rid: str, what: str) -> tuple[_Exec | None, tuple[int, str] | None]:
        x = self._by_id.get(rid)
        if x is None:
            return None, (4, f"{what} names {rid}, which has no earlier intent")
        if x.result is not None:
            return None, (3, f"a second result for {rid}")
        if not self.is_current(x):
            return None, (5, f"{what} for {rid} after later intents: two writers interleaved")
        return x, None

    def execution(self, result_id: str) -> _Exec:
        """The execution whose intent has `result_id` (KeyError if none)."""
        return self._by_id[result_id]

    def _model_call_result(self, rec: ModelCallResult, index: int) -> tuple[int, str] | None:
        x = self._by_id.get(rec.result_id)
        if x is None:
            return 4, f"model_call_result {rec.result_id} has no earlier intent"
        if x.intent.kind != "model_call":
            return 4, f"model_call_result names {rec.result_id}, an action"
        x, bad = self._result_target(rec.result_id, "model_call_result")
        if bad is not None:
            return bad
        assert x is not None
        x.result = rec
        if rec.output is not None:
            st = self.steps[x.intent.step - 1]
            st.output = rec
            calls = rec.output.get("tool_calls")
            if self.minor >= 2 and calls and len(calls) >= 2:
                # Log format 1.2 runs every call; an older writer ran only the first.
                st.calls = [[] for _ in calls]
        return None

    def _step_completed(self, rec: StepCompleted, index: int) -> tuple[int, str] | None:
        open_step = self.completed_steps + 1
        if rec.step != open_step or len(self.steps) < rec.step:
            return 10, f"step_completed for step {rec.step} while step {open_step} is open"
        st = self.steps[rec.step - 1]
        if st.output is None:
            return 10, f"step {rec.step} completed before its model call returned"
        if st.calls is not None or rec.calls is not None:
            bad = self._calls_completed(rec, st) or self._gate_completion(rec.step)
            if bad is not None:
                return bad
        elif rec.result_id is None:
            if st.actions:
                return 10, f"step {rec.step} ran an action but its step_completed names none"
            bad = self._gate_completion(rec.step)
            if bad is not None:
                return bad
        else:
            x = self._by_id.get(rec.result_id)
            if x is None:
                return 4, f"step_completed names {rec.result_id}, which has no earlier intent"
            if x.intent.kind != "action" or x.intent.step != rec.step:
                return 4, f"step_completed names {rec.result_id}, not an action of step {rec.step}"
            if x.result is not None:
                return 3, f"a second result for {rec.result_id}"
            if x is not self._last and not (x.rollbacks and x.rollbacks[-1] is self._last):
                return 5, f"step_completed for {rec.result_id} after later intents: two writers interleaved"
            bad = self._completion(x)
            if bad is not None:
                return bad
            x.result = rec
        st.completed = rec
        self.completed_steps += 1
        self._step_done(st, rec.is_error)
        return None

    def _resolution(self, rec: Resolution, index: int) -> tuple[int, str] | None:
        x = self._by_id.get(rec.result_id)
        if x is None:
            return 11, f"resolution names {rec.result_id}, which has no intent"
        if x.intent.kind == "model_call":
            return 11, f"resolution names {rec.result_id}, a model call"
        if x.result is not None:
            return 11, f"resolution of {rec.result_id}, which already has a result"
        if x.intent.kind == "action":
            if x.resolution is not None:
                return 11, f"a second resolution of {rec.result_id}"
            if not x.latest:
                return 11, f"resolution of {rec.result_id}, which a later attempt superseded"
            if x.precondition is not None and not x.precondition.passed:
                return 11, f"resolution of {rec.result_id}, whose precondition failed: it did not run"
        bad = self._guard_resolution(x, rec)
        if bad is not None:
            return bad
        if rec.source == "reconcile":
            x.reconciled = rec
        else:
            x.resolution = rec
        self._resolutions.append(rec)
        return None

    def _run_finished(self, rec: RunFinished, index: int) -> tuple[int, str] | None:
        done = self.completed_steps
        self.finished = rec  # even when refused: nothing may follow it
        if rec.steps != done:
            return 12, f"run_finished counts {rec.steps} steps, the log completes {done}"
        bad = self._budget_finish(rec)
        if bad is not None:
            return bad
        open_step = self.open_step
        if open_step is not None and rec.reason != "error":
            return 12, f"run_finished ({rec.reason}) while step {open_step.step} is open"
        if rec.reason == "final_answer":
            if not (done and _is_final(self.steps[done - 1])):
                return 12, "run_finished says final_answer, but the last step was no final answer"
        elif rec.reason == "max_steps":
            if self.max_steps is not None and done != self.max_steps:
                return 12, f"run_finished says max_steps after {done} steps, but the budget is {self.max_steps}"
        elif rec.reason == "tool_failures":
            pass  # _budget_finish checked it
        elif open_step is None or open_step.output is not None or not open_step.model_calls:
            return 12, "run_finished says error, but no step ran out of model call attempts"
        return None

    # -- the verdict ------------------------------------------------------------------

    def recovery(self) -> Recovery | None:
        """The verdict so far (None without a valid `run_started`)."""
        if self._forgotten:
            raise RuntimeError("a live run's walker let its done steps go: it has no verdict to give")
        if self.started is None or (self.problems and self.problems[0].index == 0):
            return None
        with paused_gc():  # hundreds of thousands of objects, no cycles among them
            return self._freeze()

    def forget_done(self) -> None:
        """Let go of what only a reader of the whole log needs, in a live run.

        Every rule and every plan looks at the open step and the last
        completed one; before those, a run's executions and records are
        what a verdict (`recovery`, inspect) lists. A run loop calls this
        after each completed step, so a long run's walker does not hold
        every record it wrote (docs/performance.md, memory per concurrent
        run); the steps stay, marked completed, and so do requests,
        products and budget counts. A walker that forgot has no verdict.
        """
        last = self.completed_steps - 1  # the last completed step stays whole
        if last <= self._forgotten:
            return
        by_id, keys, steps = self._by_id, self._keys, self.steps
        for k in range(self._forgotten, last):
            for x in _executions_of(steps[k]):
                i = x.intent
                by_id.pop(i.result_id, None)
                keys.discard((i.step, i.kind, i.call, i.attempt))
            steps[k] = _FORGOTTEN_STEP
        self._forgotten = last
        self._order = [x for x in self._order if x.intent.step > last]

    def _freeze(self) -> Recovery:
        assert self.started is not None
        frozen: dict[int, Execution] = {}
        for x in reversed(self._order):  # a rollback (later in the log) is frozen before its action
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
            )
        views = tuple(
            StepView(
                step=s.step,
                model_calls=tuple([frozen[id(x)] for x in s.model_calls]),
                actions=tuple([frozen[id(x)] for x in s.actions]),
                output=s.output,
                completed=s.completed,
                calls=None if s.calls is None else tuple(tuple([frozen[id(x)] for x in c]) for c in s.calls),
            )
            for s in self.steps
        )
        blocking = tuple(frozen[id(x)] for x in self.blocking())
        if self.finished is not None:
            status: Status = "finished"
        elif blocking or self.waiting_requests():
            status = "needs_operator"
        else:
            status = "resumable"
        return Recovery(
            run_id=self.started.run_id,
            started=self.started,
            finished=self.finished,
            executions=tuple(frozen[id(x)] for x in self._order),
            steps=views,
            status=status,
            blocking=blocking,
            resolutions=tuple(self._resolutions),
            requests=tuple(RequestView(r.result_id, r.kind, r.step, r.tool, r.args, r.request, r.decision, r.index)
                           for r in self.requests.values()),
            budgets=self.budgets,
            overrides=tuple(self.overrides),
        )

    def blocking(self) -> list[_Exec]:
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
            return _blocking_of(st.actions[-1])
        return [b for attempts in st.calls if attempts for b in _blocking_of(attempts[-1])]


def _blocking_of(last: _Exec) -> list[_Exec]:
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


def _is_final(st: _Step) -> bool:
    return st.completed is not None and not st.actions and st.output is not None and _tool_call(st.output) is None


def _check_config(rec: RunStarted) -> tuple[int, str] | None:
    if not _VERSION.fullmatch(rec.schema_version):
        return 14, f"schema_version {rec.schema_version!r} is not MAJOR.MINOR"
    config = rec.config
    for name in ("max_steps", "max_attempts"):
        value = config.get(name)
        if name in config and value is not None and (type(value) is not int or value < 1):
            return 14, f"config.{name} is {value!r}, not a positive integer"
    system = config.get("system")
    if system is not None and not isinstance(system, str):
        return 14, "config.system is not a string"
    tools = config.get("tools")
    if tools is not None and not (
        isinstance(tools, list)
        and all(
            isinstance(t, dict) and isinstance(t.get("name"), str) and t.get("replay") in ("safe", "never")
            for t in tools
        )
    ):
        return 14, "config.tools is not a list of {name, replay} with replay safe or never"
    why = (check_guard_config(tools) if tools is not None else None) or check_approval_config(config)
    if why is not None:
        return 14, why
    return None


def walk(records: Sequence[Record], *, run_id: str | None = None) -> Walker:
    """Feed every record to a new `Walker` (the problems are on it, not raised)."""
    return Walker(run_id).feed_all(records)


def classify(records: Sequence[Record], *, run_id: str | None = None) -> Recovery:
    """Classify a run's records, or raise `CorruptLogError` listing every problem.

    Args:
        records: the run's records in log order (as `Store.read_log` returns them).
        run_id: the run id the log must belong to (checked against `run_started`).

    Returns:
        The `Recovery` verdict: every execution's state, the run's status and
        what resume would do next.

    Raises:
        CorruptLogError: the log breaks an invariant of docs/reference/log-format.md.
    """
    recovery, problems = check(records, run_id=run_id)
    if problems or recovery is None:
        raise CorruptLogError(run_id, problems or [Problem("the log is empty", rule=1)])
    return recovery


def check(
    records: Sequence[Record], *, run_id: str | None = None
) -> tuple[Recovery | None, list[Problem]]:
    """Like `classify`, but return the problems instead of raising.

    The `Recovery` is None when the log has no valid `run_started`; when
    problems are returned, the `Recovery` describes the log only as far as
    it could be followed and must not be acted on.
    """
    walker = walk(records, run_id=run_id)
    with paused_gc():
        return walker.recovery(), walker.problems
