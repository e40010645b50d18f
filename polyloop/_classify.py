"""Recovery classification: a pure function from a run's records to a verdict.

Every execution (model call or action) is put in one of the four states of
SPEC §3 — done (intent and result), not started (neither: it simply has no
record yet), unknown (intent, no result) and impossible (result, no intent:
corruption) — refined for display into `done`, `unknown`, `superseded` (an
unknown attempt a later attempt replaced) and `resolved` (an operator said
what happened). Any state a correct writer cannot produce is reported as a
`Problem`; `classify` raises `CorruptLogError` listing all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._errors import CorruptLogError, Problem
from ._records import (
    Intent,
    ModelCallResult,
    Record,
    Resolution,
    RunFinished,
    RunStarted,
    StepCompleted,
    paused_gc,
)

State = Literal["done", "unknown", "superseded", "resolved"]
Status = Literal["finished", "needs_operator", "resumable"]


@dataclass(frozen=True, slots=True)
class Execution:
    """One model call or action attempt, as the log tells it.

    Attributes:
        result_id: the id its result is (or would be) stored under.
        kind: `"model_call"` or `"action"`.
        step, attempt: where it belongs (both from 1).
        state: `done`, `unknown`, `superseded` or `resolved`.
        intent: the intent record.
        result: the `ModelCallResult` or `StepCompleted` naming it, if any.
        resolution: the operator's `Resolution`, if any.
        index: position of the intent in the log (0-based).
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
    def error(self) -> str | None:
        """Why a model call attempt failed (None if it did not, or is not a model call)."""
        return self.result.error if isinstance(self.result, ModelCallResult) else None


@dataclass(frozen=True, slots=True)
class StepView:
    """What the log says about one step.

    `output` is the successful model call result (None until the model
    answered); `completed` the step's `StepCompleted` record.
    """

    step: int
    model_calls: tuple[Execution, ...]
    actions: tuple[Execution, ...]
    output: ModelCallResult | None
    completed: StepCompleted | None


@dataclass(frozen=True, slots=True)
class Recovery:
    """The verdict on a log that a correct writer could have produced.

    Attributes:
        run_id: the run.
        started: its `run_started` record.
        finished: its `run_finished` record, or None.
        executions: every execution in log order.
        steps: one `StepView` per step that has any record, in order.
        status: `finished`, `needs_operator` or `resumable`.
        blocking: the unknown, unresolved `never` actions an operator must settle.
        resolutions: every `resolution` record in log order.
    """

    run_id: str
    started: RunStarted
    finished: RunFinished | None
    executions: tuple[Execution, ...]
    steps: tuple[StepView, ...]
    status: Status
    blocking: tuple[Execution, ...]
    resolutions: tuple[Resolution, ...] = ()

    @property
    def completed_steps(self) -> int:
        return sum(1 for s in self.steps if s.completed is not None)

    def execution(self, result_id: str) -> Execution | None:
        for e in self.executions:
            if e.result_id == result_id:
                return e
        return None

    @property
    def max_steps(self) -> int | None:
        value = self.started.config.get("max_steps")
        return value if isinstance(value, int) else None

    def next_action(self) -> str:
        """One sentence: what `resume` would do next."""
        if self.finished is not None:
            return f"nothing: the run finished ({self.finished.reason})"
        if self.blocking:
            e = self.blocking[0]
            return (
                f"stop: the outcome of {e.tool} ({e.result_id}, step {e.step}) is unknown and "
                f"the tool is `never` replay; settle it with `polyloop mark-resolved "
                f"{self.run_id} {e.result_id} --executed` or `--not-executed`"
            )
        step = self.completed_steps + 1
        view = self.steps[step - 1] if len(self.steps) >= step else None
        if view is None:
            # No view for the open step: every step with records is completed.
            if self.steps and _is_final(self.steps[-1]):
                return f"record the end of the run: step {step - 1} gave the final answer"
            if self.max_steps is not None and step > self.max_steps:
                return f"finish the run: the step budget of {self.max_steps} is spent"
            return f"start step {step} with a model call"
        if view.output is None:
            last = view.model_calls[-1]
            again = "retry the failed" if last.error else "re-issue the unanswered"
            return f"{again} model call of step {step} as attempt {last.attempt + 1}"
        call = view.output.output.get("tool_call") if view.output.output else None
        if call is None:
            return f"record the final answer of step {step} and finish"
        if not view.actions:
            return f"run {call['name']} (step {step})"
        last = view.actions[-1]
        if last.resolution is not None and last.resolution.outcome == "executed":
            return f"reuse the operator's observation for {last.tool} (step {step}) and continue"
        if last.resolution is not None:
            return f"run {last.tool} again (step {step}, attempt {last.attempt + 1})"
        return f"replay the safe action {last.tool} (step {step}) as attempt {last.attempt + 1}"


def _is_final(view: StepView) -> bool:
    out = view.output.output if view.output is not None else None
    return view.completed is not None and not view.actions and out is not None and out.get("tool_call") is None


@dataclass(slots=True)
class _Step:
    step: int
    model_calls: list[int] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    output: ModelCallResult | None = None
    completed: StepCompleted | None = None


def classify(records: Sequence[Record], *, run_id: str | None = None) -> Recovery:
    """Classify a run's records, or raise `CorruptLogError` listing every problem.

    Args:
        records: the run's records in log order (as `Store.read_log` returns them).
        run_id: the run id the log must belong to (checked against `run_started`).

    Returns:
        The `Recovery` verdict: every execution's state, the run's status and
        what resume would do next.

    Raises:
        CorruptLogError: the log violates an invariant of SPEC §5.
    """
    recovery, problems = check(records, run_id=run_id)
    if problems or recovery is None:
        raise CorruptLogError(run_id, problems or [Problem("the log is empty")])
    return recovery


def check(
    records: Sequence[Record], *, run_id: str | None = None
) -> tuple[Recovery | None, list[Problem]]:
    """Like `classify`, but return the problems instead of raising.

    The `Recovery` is None when the log has no valid `run_started`; when
    problems are returned, the `Recovery` describes the log only as far as
    it could be followed and must not be acted on.
    """
    with paused_gc():
        return _check(records, run_id=run_id)


def _check(
    records: Sequence[Record], *, run_id: str | None = None
) -> tuple[Recovery | None, list[Problem]]:
    problems: list[Problem] = []

    def bad(index: int, message: str) -> None:
        problems.append(Problem(message, index=index))

    if not records:
        return None, [Problem("the log has no records")]
    first = records[0]
    if not isinstance(first, RunStarted):
        return None, [Problem(f"the first record is {first.TAG}, not run_started", index=0)]
    if run_id is not None and first.run_id != run_id:
        bad(0, f"run_started names run {first.run_id!r}, not {run_id!r}")

    intents: list[Intent] = []
    intent_at: list[int] = []  # position in records, parallel to intents
    by_id: dict[str, int] = {}  # result id -> index into intents
    by_key: set[tuple[int, str, int]] = set()
    results: dict[int, ModelCallResult | StepCompleted] = {}
    resolutions: dict[int, Resolution] = {}
    all_resolutions: list[Resolution] = []
    steps: list[_Step] = []
    finished: RunFinished | None = None
    completed = 0

    for i in range(1, len(records)):
        rec = records[i]
        if finished is not None:
            bad(i, f"{rec.TAG} after run_finished")
            continue
        open_step = completed + 1
        if isinstance(rec, Intent):
            rid = rec.result_id
            if rid in by_id:
                bad(i, f"result id {rid} is used by a second intent")
                continue
            key = (rec.step, rec.kind, rec.attempt)
            if key in by_key:
                bad(i, f"two intents for step {rec.step} {rec.kind} attempt {rec.attempt}: "
                       "two writers interleaved")
                continue
            if rec.step != open_step:
                bad(i, f"intent for step {rec.step} while step {open_step} is open")
                continue
            if len(steps) < rec.step:
                steps.append(_Step(rec.step))
            st = steps[rec.step - 1]
            attempts = st.model_calls if rec.kind == "model_call" else st.actions
            if rec.attempt != len(attempts) + 1:
                bad(i, f"{rec.kind} attempt {rec.attempt} of step {rec.step} follows "
                       f"{len(attempts)} earlier attempts")
                continue
            prev = attempts[-1] if attempts else None
            if rec.kind == "model_call":
                if st.output is not None:
                    bad(i, f"a second model call for step {rec.step} after one returned")
                    continue
            else:
                call = st.output.output.get("tool_call") if st.output and st.output.output else None
                if st.output is None:
                    bad(i, f"action intent of step {rec.step} before its model call returned")
                    continue
                if call is None or call["name"] != rec.tool or call["args"] != rec.args:
                    bad(i, f"action {rec.tool} of step {rec.step} is not the tool call "
                           "the model returned")
                    continue
                if prev is not None:
                    p = intents[prev]
                    if prev in results:
                        bad(i, f"action of step {rec.step} attempted again after it completed")
                        continue
                    res = resolutions.get(prev)
                    if res is not None and res.outcome == "executed":
                        bad(i, f"action of step {rec.step} attempted again after an operator "
                               "said it executed")
                        continue
                    if res is None and p.replay != "safe":
                        bad(i, f"`never` action {p.result_id} was attempted again without a "
                               "not_executed resolution")
                        continue
            by_id[rid] = len(intents)
            by_key.add(key)
            attempts.append(len(intents))
            intents.append(rec)
            intent_at.append(i)
        elif isinstance(rec, ModelCallResult):
            n = by_id.get(rec.result_id)
            if n is None:
                bad(i, f"model_call_result {rec.result_id} has no earlier intent")
                continue
            if intents[n].kind != "model_call":
                bad(i, f"model_call_result names {rec.result_id}, an action")
                continue
            if n in results:
                bad(i, f"a second result for {rec.result_id}")
                continue
            if n != len(intents) - 1:
                bad(i, f"model_call_result for {rec.result_id} after later intents: "
                       "two writers interleaved")
                continue
            results[n] = rec
            if rec.output is not None:
                steps[intents[n].step - 1].output = rec
        elif isinstance(rec, StepCompleted):
            if rec.step != open_step or len(steps) < rec.step:
                bad(i, f"step_completed for step {rec.step} while step {open_step} is open")
                continue
            st = steps[rec.step - 1]
            if st.output is None:
                bad(i, f"step {rec.step} completed before its model call returned")
                continue
            if rec.result_id is None:
                if st.actions:
                    bad(i, f"step {rec.step} ran an action but its step_completed names none")
                    continue
            else:
                n = by_id.get(rec.result_id)
                if n is None:
                    bad(i, f"step_completed names {rec.result_id}, which has no earlier intent")
                    continue
                it = intents[n]
                if it.kind != "action" or it.step != rec.step:
                    bad(i, f"step_completed names {rec.result_id}, not an action of step {rec.step}")
                    continue
                if n in results:
                    bad(i, f"a second result for {rec.result_id}")
                    continue
                if n != len(intents) - 1:
                    bad(i, f"step_completed for {rec.result_id} after later intents: "
                           "two writers interleaved")
                    continue
                res = resolutions.get(n)
                if res is not None and res.outcome == "not_executed":
                    bad(i, f"result for {rec.result_id} after an operator said it did not execute")
                    continue
                results[n] = rec
            st.completed = rec
            completed += 1
        elif isinstance(rec, Resolution):
            n = by_id.get(rec.result_id)
            if n is None:
                bad(i, f"resolution names {rec.result_id}, which has no intent")
                continue
            it = intents[n]
            if it.kind != "action":
                bad(i, f"resolution names {rec.result_id}, a model call")
                continue
            if n in results:
                bad(i, f"resolution of {rec.result_id}, which already has a result")
                continue
            if n in resolutions:
                bad(i, f"a second resolution of {rec.result_id}")
                continue
            if steps[it.step - 1].actions[-1] != n:
                bad(i, f"resolution of {rec.result_id}, which a later attempt superseded")
                continue
            resolutions[n] = rec
            all_resolutions.append(rec)
        elif isinstance(rec, RunFinished):
            if rec.steps != completed:
                bad(i, f"run_finished counts {rec.steps} steps, the log completes {completed}")
            if len(steps) > completed and rec.reason != "error":
                bad(i, f"run_finished ({rec.reason}) while step {open_step} is open")
            if rec.reason == "final_answer":
                last = steps[completed - 1] if completed else None
                out = last.output.output if last and last.output else None
                if out is None or out.get("tool_call") is not None or last.actions:
                    bad(i, "run_finished says final_answer, but the last step was no final answer")
            finished = rec
        else:  # RunStarted
            bad(i, "a second run_started")

    executions = []
    for n, it in enumerate(intents):
        st = steps[it.step - 1]
        attempts = st.model_calls if it.kind == "model_call" else st.actions
        if n in resolutions:
            state: State = "resolved"
        elif n in results:
            state = "done"
        elif attempts[-1] != n:
            state = "superseded"
        else:
            state = "unknown"
        executions.append(
            Execution(
                result_id=it.result_id,
                kind=it.kind,
                step=it.step,
                attempt=it.attempt,
                state=state,
                intent=it,
                result=results.get(n),
                resolution=resolutions.get(n),
                index=intent_at[n],
            )
        )
    blocking = tuple(
        e for e in executions if e.state == "unknown" and e.kind == "action" and e.replay != "safe"
    )
    views = tuple(
        StepView(
            step=s.step,
            model_calls=tuple([executions[n] for n in s.model_calls]),
            actions=tuple([executions[n] for n in s.actions]),
            output=s.output,
            completed=s.completed,
        )
        for s in steps
    )
    if finished is not None:
        status: Status = "finished"
    elif blocking:
        status = "needs_operator"
    else:
        status = "resumable"
    recovery = Recovery(
        run_id=first.run_id,
        started=first,
        finished=finished,
        executions=tuple(executions),
        steps=views,
        status=status,
        blocking=blocking,
        resolutions=tuple(all_resolutions),
    )
    return recovery, problems
