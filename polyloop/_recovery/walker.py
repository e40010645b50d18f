"""Recovery classification: a pure walk from a run's records to a verdict.

Every execution (model call or action) is in one of the four states of
docs/reference/log-format.md ("The four states of an execution"): done
(intent and result), not started (neither: it simply has no record yet),
unknown (intent, no result) and impossible (result, no intent: corruption).
`STATE_TABLE` (in `polyloop._recovery.state`) is where an execution with an
intent gets its state; the walker assigns nothing anywhere else.

The walker has one handler per record tag (`_APPLY` below: the walker's own
`_apply_<tag>` methods for the core records, the `apply_<tag>` functions
of the `on_*` modules for the others), all filing into the one state the
walker is (`WalkState`). Each handler checks the
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

from .._log.errors import CorruptLogError, Problem
from .._log.ids import result_id as derive_result_id
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
    Record,
    Resolution,
    Resumed,
    RunFinished,
    RunStarted,
    StepCompleted,
)
from .._log.gc_pause import paused_gc
from .on_artifacts import apply_artifact
from .on_budgets import (
    apply_checkpoint_accepted, apply_crash_loop_accepted, apply_resumed, budget_finish, budget_intent, budgets_from,
    step_done,
)
from .on_calls import call_number, calls_completed
from .on_decisions import (
    apply_approval_request,
    apply_decision,
    approvals_of,
    check_approval_config,
    gate_completion,
    gate_intent,
)
from .on_guards import (
    apply_action_result,
    apply_guard_check,
    check_guard_config,
    completion,
    guard_resolution,
    guards_of,
    rollback_intent,
)
from .on_keys import check_action_key
from .on_outages import RunStopped, apply_run_stopped, check_transient
from .state import (
    FORGOTTEN_STEP,
    NO_GUARDS,
    STATE_TABLE,
    Exec,
    Step,
    WalkState,
    executions_of,
    tool_call,
    tool_calls_of,
)
from .verdict import Execution, Recovery, StepView, freeze, max_attempts_of, max_steps_of

__all__ = [
    "STATE_TABLE", "Execution", "Recovery", "StepView", "Walker", "check", "classify", "max_steps_of",
    "tool_call", "tool_calls_of", "walk",
]

Bad = tuple[int, str] | None  # a refused record: (the rule it breaks, why); None: filed

_VERSION = re.compile(r"[0-9]+\.[0-9]+")


class Walker(WalkState):
    """Reads a run's records one at a time and keeps what they mean.

    `feed` never raises on a bad record: it files a `Problem` (with the
    number of the rule broken) and skips the record, so a reader can list
    every problem of a log. The run loop feeds the records it writes and
    plans from the same state (`polyloop._recovery.plan.plan` accepts a walker).
    """

    def __init__(self, run_id: str | None = None, *, live: bool = False) -> None:
        super().__init__(run_id, live=live)
        self._count = 0

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
            bad = _APPLY[type(record)](self, record, index)
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

    # -- one handler per record tag -------------------------------------------------

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
            bad = budgets_from(self, rec)
        self.max_steps = max_steps_of(rec)
        self.max_attempts = max_attempts_of(rec)
        return bad

    def _apply_run_started(self, rec: RunStarted, index: int) -> tuple[int, str]:
        return 1, "a second run_started"

    def _apply_intent(self, rec: Intent, index: int) -> tuple[int, str] | None:
        rid = rec.result_id
        if rid in self.by_id:
            return 3, f"result id {rid} is used by a second intent"
        call = rec.call
        key = (rec.step, rec.kind, call, rec.attempt)
        if key in self.keys:
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
            return budget_intent(self, rec)
        if len(self.steps) < rec.step:
            self.steps.append(Step(rec.step))
        st = self.steps[rec.step - 1]
        if rec.kind == "model_call":
            bad = self._model_intent(rec, st)
        else:
            bad = call_number(self, rec, st)
            if bad is None:
                bad = self._action_intent(rec, st) if rec.kind == "action" else rollback_intent(self, rec, st)
        if bad is not None:
            return bad
        x = Exec(rec, index, self.guards.get(rec.tool or "", NO_GUARDS))
        self.by_id[rid] = x
        self.keys.add(key)
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
        self.order.append(x)
        self.last = x
        return None

    def _attempt(self, rec: Intent, attempts: list[Exec]) -> tuple[int, str] | None:
        if rec.attempt != len(attempts) + 1:
            return 6, (f"{rec.kind} attempt {rec.attempt} of step {rec.step} follows "
                       f"{len(attempts)} earlier attempts")
        return None

    def _model_intent(self, rec: Intent, st: Step) -> tuple[int, str] | None:
        bad = self._attempt(rec, st.model_calls)
        if bad is not None:
            return bad
        if st.output is not None:
            return 7, f"a second model call for step {rec.step} after one returned"
        return None

    def _action_intent(self, rec: Intent, st: Step) -> tuple[int, str] | None:
        attempts = st.attempts(rec.call)
        bad = self._attempt(rec, attempts)
        if bad is not None:
            return bad
        if st.output is None:
            return 8, f"action intent of step {rec.step} before its model call returned"
        call = tool_calls_of(st.output)[rec.call - 1] if rec.call is not None else tool_call(st.output)
        gate = gate_intent(self, rec, st) if call is not None else True
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
        return check_action_key(self, rec, first, self.request_of(first.result_id if first else rec.result_id))

    def _result_target(self, rid: str, what: str) -> tuple[Exec | None, tuple[int, str] | None]:
        x = self.by_id.get(rid)
        if x is None:
            return None, (4, f"{what} names {rid}, which has no earlier intent")
        if x.result is not None:
            return None, (3, f"a second result for {rid}")
        if not self.is_current(x):
            return None, (5, f"{what} for {rid} after later intents: two writers interleaved")
        return x, None

    def _apply_model_call_result(self, rec: ModelCallResult, index: int) -> tuple[int, str] | None:
        x = self.by_id.get(rec.result_id)
        if x is None:
            return 4, f"model_call_result {rec.result_id} has no earlier intent"
        if x.intent.kind != "model_call":
            return 4, f"model_call_result names {rec.result_id}, an action"
        x, bad = self._result_target(rec.result_id, "model_call_result")
        bad = bad or check_transient(self, rec)
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

    def _apply_step_completed(self, rec: StepCompleted, index: int) -> tuple[int, str] | None:
        open_step = self.completed_steps + 1
        if rec.step != open_step or len(self.steps) < rec.step:
            return 10, f"step_completed for step {rec.step} while step {open_step} is open"
        st = self.steps[rec.step - 1]
        if st.output is None:
            return 10, f"step {rec.step} completed before its model call returned"
        if st.calls is not None or rec.calls is not None:
            bad = calls_completed(self, rec, st) or gate_completion(self, rec.step)
            if bad is not None:
                return bad
        elif rec.result_id is None:
            if st.actions:
                return 10, f"step {rec.step} ran an action but its step_completed names none"
            bad = gate_completion(self, rec.step)
            if bad is not None:
                return bad
        else:
            x = self.by_id.get(rec.result_id)
            if x is None:
                return 4, f"step_completed names {rec.result_id}, which has no earlier intent"
            if x.intent.kind != "action" or x.intent.step != rec.step:
                return 4, f"step_completed names {rec.result_id}, not an action of step {rec.step}"
            if x.result is not None:
                return 3, f"a second result for {rec.result_id}"
            if x is not self.last and not (x.rollbacks and x.rollbacks[-1] is self.last):
                return 5, f"step_completed for {rec.result_id} after later intents: two writers interleaved"
            bad = completion(self, x)
            if bad is not None:
                return bad
            x.result = rec
        st.completed = rec
        self.completed_steps += 1
        step_done(self, st, rec.is_error)
        return None

    def _apply_resolution(self, rec: Resolution, index: int) -> tuple[int, str] | None:
        x = self.by_id.get(rec.result_id)
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
        bad = guard_resolution(self, x, rec)
        if bad is not None:
            return bad
        if rec.source == "reconcile":
            x.reconciled = rec
        else:
            x.resolution = rec
        self.resolutions.append(rec)
        return None

    def _apply_run_finished(self, rec: RunFinished, index: int) -> tuple[int, str] | None:
        done = self.completed_steps
        self.finished = rec  # even when refused: nothing may follow it
        if rec.steps != done:
            return 12, f"run_finished counts {rec.steps} steps, the log completes {done}"
        bad = budget_finish(self, rec)
        if bad is not None:
            return bad
        open_step = self.open_step
        if rec.reason == "cancelled":
            return None  # a person may end a run at any point it stopped at, an open step included
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
        if self.forgotten:
            raise RuntimeError("a live run's walker let its done steps go: it has no verdict to give")
        if self.started is None or (self.problems and self.problems[0].index == 0):
            return None
        with paused_gc():  # hundreds of thousands of objects, no cycles among them
            return freeze(self)

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
        if last <= self.forgotten:
            return
        by_id, keys, steps = self.by_id, self.keys, self.steps
        for k in range(self.forgotten, last):
            for x in executions_of(steps[k]):
                i = x.intent
                by_id.pop(i.result_id, None)
                keys.discard((i.step, i.kind, i.call, i.attempt))
            steps[k] = FORGOTTEN_STEP
        self.forgotten = last
        self.order = [x for x in self.order if x.intent.step > last]


# One handler per record tag (`run_started` is the first record's, `_first`, after that a refusal).
_APPLY: dict[type, Callable[[Walker, Any, int], Bad]] = {
    RunStarted: Walker._apply_run_started,
    Intent: Walker._apply_intent,
    ModelCallResult: Walker._apply_model_call_result,
    StepCompleted: Walker._apply_step_completed,
    RunFinished: Walker._apply_run_finished,
    Resolution: Walker._apply_resolution,
    GuardCheck: apply_guard_check,
    ActionResult: apply_action_result,
    ApprovalRequest: apply_approval_request,
    Decision: apply_decision,
    CheckpointAccepted: apply_checkpoint_accepted,
    Resumed: apply_resumed,
    CrashLoopAccepted: apply_crash_loop_accepted,
    Artifact: apply_artifact,
    RunStopped: apply_run_stopped,
}


def _is_final(st: Step) -> bool:
    return st.completed is not None and not st.actions and st.output is not None and tool_call(st.output) is None


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
