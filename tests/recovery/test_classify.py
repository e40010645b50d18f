"""The classifier, table-driven: every row of the four-state table, every invariant."""

from __future__ import annotations

import pytest

from polyloop import (
    CorruptLogError,
    Intent,
    ModelCallResult,
    Resolution,
    RunFinished,
    RunStarted,
    StepCompleted,
    check,
    classify,
)
from polyloop._log.ids import idempotency_key


def S(run_id="r", max_steps=5):
    return RunStarted(run_id=run_id, goal="g", config={"max_steps": max_steps})


def MI(step, attempt=1, rid=None):
    return Intent(kind="model_call", step=step, attempt=attempt, result_id=rid or f"s{step}-m{attempt}")


def MR(step, attempt=1, tool="t", args=None, final=None, error=None, rid=None):
    rid = rid or f"s{step}-m{attempt}"
    if error:
        return ModelCallResult(result_id=rid, output=None, error=error)
    if final is not None:
        return ModelCallResult(result_id=rid, output={"text": final, "tool_call": None})
    return ModelCallResult(result_id=rid, output={"text": None, "tool_call": {"name": tool, "args": args or {}}})


def AI(step, attempt=1, tool="t", args=None, replay="never", rid=None):
    return Intent(kind="action", step=step, attempt=attempt, result_id=rid or f"s{step}-a{attempt}",
                  tool=tool, args=args or {}, replay=replay,
                  idempotency_key=idempotency_key("r", step, tool, args or {}))


def SC(step, attempt=1, rid="auto"):
    return StepCompleted(step=step, result_id=f"s{step}-a{attempt}" if rid == "auto" else rid,
                         observation=None if rid is None else "obs")


def R(step, attempt=1, outcome="executed", rid=None):
    return Resolution(result_id=rid or f"s{step}-a{attempt}", outcome=outcome,
                      observation="seen" if outcome == "executed" else None, by="op")


def F(reason="final_answer", steps=1, result="done"):
    return RunFinished(reason=reason, result=result if reason == "final_answer" else None, steps=steps)


STEP1 = [MI(1), MR(1), AI(1), SC(1)]
FINAL2 = [MI(2), MR(2, final="done"), SC(2, rid=None)]

# (id, records, status, {result_id: state}, words in next_action)
VALID = [
    ("not-started", [S()], "resumable", {}, "start step 1"),
    ("model-unknown", [S(), MI(1)], "resumable", {"s1-m1": "unknown"}, "re-issue the unanswered model call of step 1 as attempt 2"),
    ("model-done-action-not-started", [S(), MI(1), MR(1)], "resumable", {"s1-m1": "done"}, "run t (step 1)"),
    ("never-action-unknown", [S(), MI(1), MR(1), AI(1)], "needs_operator", {"s1-a1": "unknown"}, "mark-resolved r s1-a1 --executed"),
    ("safe-action-unknown", [S(), MI(1), MR(1), AI(1, replay="safe")], "resumable", {"s1-a1": "unknown"}, "replay the safe action t (step 1) as attempt 2"),
    ("action-done", [S(), *STEP1], "resumable", {"s1-m1": "done", "s1-a1": "done"}, "start step 2"),
    ("final-answer-not-yet-finished", [S(), *STEP1, *FINAL2], "resumable", {"s2-m1": "done"}, "record the end of the run: step 2 gave the final answer"),
    ("finished", [S(), *STEP1, *FINAL2, F(steps=2)], "finished", {"s2-m1": "done"}, "nothing: the run finished (final_answer)"),
    ("model-superseded", [S(), MI(1), MI(1, 2)], "resumable", {"s1-m1": "superseded", "s1-m2": "unknown"}, "attempt 3"),
    ("model-error-then-retry", [S(), MI(1), MR(1, error="429"), MI(1, 2), MR(1, 2)], "resumable", {"s1-m1": "done", "s1-m2": "done"}, "run t"),
    ("model-error-last", [S(), MI(1), MR(1, error="429")], "resumable", {"s1-m1": "done"}, "retry the failed model call of step 1 as attempt 2"),
    ("resolved-not-executed", [S(), MI(1), MR(1), AI(1), R(1, outcome="not_executed")], "resumable", {"s1-a1": "resolved"}, "run t again (step 1, attempt 2)"),
    ("rerun-after-not-executed", [S(), MI(1), MR(1), AI(1), R(1, outcome="not_executed"), AI(1, 2)], "needs_operator", {"s1-a1": "resolved", "s1-a2": "unknown"}, "s1-a2"),
    ("resolved-executed", [S(), MI(1), MR(1), AI(1), R(1)], "resumable", {"s1-a1": "resolved"}, "reuse the operator's observation"),
    ("resolved-executed-then-step", [S(), MI(1), MR(1), AI(1), R(1), SC(1)], "resumable", {"s1-a1": "resolved"}, "start step 2"),
    ("safe-replayed", [S(), MI(1), MR(1), AI(1, replay="safe"), AI(1, 2, replay="safe"), SC(1, 2)], "resumable", {"s1-a1": "superseded", "s1-a2": "done"}, "start step 2"),
    ("max-steps", [S(max_steps=1), *STEP1, F("max_steps", steps=1)], "finished", {}, "(max_steps)"),
    ("budget-spent", [S(max_steps=1), *STEP1], "resumable", {}, "step budget of 1 is spent"),
    ("error-mid-step", [S(), MI(1), MR(1, error="x"), F("error", steps=0)], "finished", {}, "(error)"),
    ("unknown-tool-step", [S(), MI(1), MR(1, tool="nope"), SC(1, rid=None)], "resumable", {}, "start step 2"),
]


@pytest.mark.parametrize("records, status, states, words", [v[1:] for v in VALID], ids=[v[0] for v in VALID])
def test_valid_logs_classify(records, status, states, words):
    recovery = classify(records, run_id="r")
    assert recovery.status == status
    got = {e.result_id: e.state for e in recovery.executions}
    for rid, state in states.items():
        assert got[rid] == state
    assert words in recovery.next_action()
    assert [e.result_id for e in recovery.blocking] == [
        e.result_id for e in recovery.executions if e.state == "unknown" and e.kind == "action" and e.replay == "never"
    ]


def test_blocking_lists_tool_args_and_result_id():
    recovery = classify([S(), MI(1), MR(1, tool="pay", args={"amount": 5}), AI(1, tool="pay", args={"amount": 5})])
    (e,) = recovery.blocking
    assert (e.tool, e.args, e.result_id, e.replay) == ("pay", {"amount": 5}, "s1-a1", "never")


CORRUPT = [
    ("empty", [], "no records"),
    ("first-not-run-started", [MI(1)], "not run_started"),
    ("other-run", [S("x")], "names run 'x'"),
    ("second-run-started", [S(), S()], "second run_started"),
    ("after-finished", [S(), *STEP1, *FINAL2, F(steps=2), MI(3)], "after run_finished"),
    ("result-id-reused", [S(), MI(1), MI(1, 2, rid="s1-m1")], "second intent"),
    ("impossible-model-result", [S(), MR(1)], "no earlier intent"),
    ("impossible-action-result", [S(), MI(1), MR(1), SC(1)], "no earlier intent"),
    ("interleaved-writers", [S(), MI(1), MI(1, rid="other")], "two writers interleaved"),
    ("attempt-skipped", [S(), MI(1, 2)], "attempt 2 of step 1 follows 0"),
    ("step-skipped", [S(), MI(2)], "step 2 while step 1 is open"),
    ("step-reopened", [S(), *STEP1, MI(1, 2)], "step 1 while step 2 is open"),
    ("second-model-call", [S(), MI(1), MR(1), MI(1, 2)], "second model call"),
    ("action-before-model", [S(), MI(1), AI(1)], "before its model call returned"),
    ("action-not-decided", [S(), MI(1), MR(1, tool="a"), AI(1, tool="b")], "not the tool call"),
    ("action-args-differ", [S(), MI(1), MR(1, args={"x": 1}), AI(1, args={"x": 2})], "not the tool call"),
    ("never-repeated", [S(), MI(1), MR(1), AI(1), AI(1, 2)], "without a not_executed resolution"),
    ("repeated-after-done", [S(), MI(1), MR(1), AI(1, replay="safe"), SC(1), AI(1, 2)], "while step 2 is open"),
    ("repeated-after-executed", [S(), MI(1), MR(1), AI(1), R(1), AI(1, 2)], "said it executed"),
    ("late-result", [S(), MI(1), MI(1, 2), MR(1, 1)], "after later intents"),
    ("second-model-result", [S(), MI(1), MR(1, error="x"), MR(1, error="y")], "second result"),
    ("step-before-model", [S(), MI(1), SC(1, rid=None)], "before its model call returned"),
    ("step-hides-action", [S(), MI(1), MR(1), AI(1), SC(1, rid=None)], "names none"),
    ("step-names-model-call", [S(), MI(1), MR(1), SC(1, rid="s1-m1")], "not an action"),
    ("step-for-other-step", [S(), MI(1), MR(1), SC(2, rid=None)], "step 2 while step 1"),
    ("resolution-of-nothing", [S(), R(1)], "has no intent"),
    ("resolution-of-model-call", [S(), MI(1), R(1, rid="s1-m1")], "a model call"),
    ("resolution-of-done", [S(), MI(1), MR(1), AI(1), SC(1), R(1)], "already has a result"),
    ("second-resolution", [S(), MI(1), MR(1), AI(1), R(1, outcome="not_executed"), R(1)], "second resolution"),
    ("resolution-of-superseded", [S(), MI(1), MR(1), AI(1, replay="safe"), AI(1, 2, replay="safe"), R(1)], "superseded"),
    ("result-after-not-executed", [S(), MI(1), MR(1), AI(1), R(1, outcome="not_executed"), SC(1)], "did not execute"),
    ("finished-miscounts", [S(), *STEP1, *FINAL2, F(steps=5)], "counts 5 steps"),
    ("final-after-tool-step", [S(), *STEP1, F(steps=1)], "no final answer"),
    ("finished-mid-step", [S(), MI(1), F("max_steps", steps=0)], "while step 1 is open"),
]


@pytest.mark.parametrize("records, words", [c[1:] for c in CORRUPT], ids=[c[0] for c in CORRUPT])
def test_corrupt_logs_are_refused(records, words):
    with pytest.raises(CorruptLogError) as info:
        classify(records, run_id="r")
    assert any(words in str(p) for p in info.value.problems), [str(p) for p in info.value.problems]
    _, problems = check(records, run_id="r")
    assert problems


def test_every_problem_is_reported_with_its_position():
    records = [S(), MR(1), MI(2), SC(1, rid=None)]
    _, problems = check(records, run_id="r")
    assert [p.index for p in problems] == [1, 2, 3]
    assert "record 2" in str(problems[0])


def test_classify_is_pure():
    records = [S(), MI(1), MR(1), AI(1)]
    before = list(records)
    assert classify(records) == classify(records)
    assert records == before
