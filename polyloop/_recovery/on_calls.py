"""The walker's handlers for steps of several tool calls (log format 1.2, rules 33 and 34).

Checks `polyloop._recovery.walker.Walker` calls on a `WalkState`: when a
model answer carries several tool calls, every call is an action of its
own (`intent.call`), results may come in any order among the calls of the
open step, and the step completes with one outcome per call
(`step_completed.calls`). See docs/reference/log-format.md.
"""

from __future__ import annotations

from .._log.records import Intent, StepCompleted
from .on_guards import completion
from .state import Exec, Step, WalkState, tool_calls_of

__all__ = ["call_number", "calls_completed", "outcome_known", "tool_calls_of"]


def call_number(s: WalkState, rec: Intent, st: Step) -> tuple[int, str] | None:
    """Rule 33: an action (or rollback) names its call exactly when the step has several."""
    call = rec.call
    if call is not None and s.minor < 2:
        return 33, f"intent {rec.result_id} names a tool call number in a log of format 1.{s.minor}"
    if st.output is None:
        return None  # the kind's own rule says what is wrong
    if st.calls is None:
        if call is not None:
            return 33, f"intent {rec.result_id} names call {call}, but step {rec.step} has one tool call"
        return None
    if call is None:
        return 33, (f"{rec.kind} intent {rec.result_id} names no call, but step {rec.step} has "
                    f"{len(st.calls)} tool calls")
    if call > len(st.calls):
        return 33, f"intent {rec.result_id} names call {call}, but step {rec.step} has {len(st.calls)}"
    return None


def calls_completed(s: WalkState, rec: StepCompleted, st: Step) -> tuple[int, str] | None:
    """Rules 33 and 34 for the end of a step of several tool calls: one outcome per call."""
    if st.calls is None:
        return 33, f"step_completed of step {rec.step} lists calls, but the step has one tool call"
    if rec.calls is None:
        return 33, f"step {rec.step} has {len(st.calls)} tool calls, but its step_completed lists none"
    if len(rec.calls) != len(st.calls):
        return 33, f"step_completed of step {rec.step} lists {len(rec.calls)} calls, the step has {len(st.calls)}"
    names = tool_calls_of(st.output)
    for k, (entry, attempts) in enumerate(zip(rec.calls, st.calls), start=1):
        if entry["tool"] != names[k - 1]["name"]:
            return 33, f"step_completed of step {rec.step} names {entry['tool']} for call {k}, not {names[k - 1]['name']}"
        if not attempts:
            if entry["result_id"] is not None:
                return 33, f"step_completed of step {rec.step} names {entry['result_id']} for call {k}, which has no intent"
            continue
        x = attempts[-1]
        if entry["result_id"] != x.result_id:
            return 33, (f"step_completed of step {rec.step} names {entry['result_id']} for call {k}, "
                        f"not its latest attempt {x.result_id}")
        bad = completion(s, x)
        if bad is not None:
            return bad
        if not outcome_known(x):
            return 34, f"step {rec.step} completed while the outcome of call {k} ({x.result_id}) is unknown"
    for attempts in st.calls:
        if attempts and attempts[-1].result is None:
            attempts[-1].result = rec
    return None


def outcome_known(x: Exec) -> bool:
    """Has a call of a step of several tool calls an outcome its step may complete with?"""
    if x.returned is not None or x.resolution is not None:
        return True  # it returned; or an operator said it executed (or settled its alert)
    if x.reconciled is not None and x.reconciled.outcome == "executed":
        return True
    return x.precondition is not None and not x.precondition.passed
