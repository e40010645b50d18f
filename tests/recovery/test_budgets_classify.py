"""Checkpoint overrides and retry budgets (log format 1.2), table-driven: what the planner decides
from the new records, and every rule (21-24 of docs/reference/log-format.md) a log breaks when no
correct writer wrote it."""

from __future__ import annotations

import pytest

from polyloop import (
    CheckpointAccepted,
    CrashLoopAccepted,
    Intent,
    ModelCallResult,
    Resumed,
    RunFinished,
    RunStarted,
    StepCompleted,
    check,
    classify,
)
from polyloop._log.ids import idempotency_key
from polyloop._recovery.plan import CallModel, CrashLoopStop, FinishToolFailures, describe, plan
from polyloop._recovery.walker import walk

DIFF = {"what": "input", "name": "contract", "recorded": "a" * 64, "now": "b" * 64}


def S(version="1.2", **config):
    base = {"max_steps": 9, "tools": [{"name": "t", "replay": "safe"}]}
    base.update(config)
    return RunStarted(run_id="r", goal="g", config=base, schema_version=version)


def step(n, *, error=False, tool="t"):
    return [
        Intent(kind="model_call", step=n, attempt=1, result_id=f"s{n}-m1"),
        ModelCallResult(result_id=f"s{n}-m1", output={"text": None, "tool_call": {"name": tool, "args": {}}}),
        Intent(kind="action", step=n, attempt=1, result_id=f"s{n}-a1", tool=tool, args={}, replay="safe",
               idempotency_key=idempotency_key("r", n, tool, {})),
        StepCompleted(step=n, result_id=f"s{n}-a1", observation="error: down" if error else "ok", is_error=error),
    ]


def resumed():
    return Resumed(by="op@host")


def lifted(n):
    return CrashLoopAccepted(resumes=n, reason="fixed the OOM", by="op@host")


def accepted(differences=(DIFF,), reason="contract v2", by="op@host"):
    return CheckpointAccepted(differences=list(differences), reason=reason, by=by)


# -- what the planner decides ------------------------------------------------------------------

PLANS = {
    "no budget recorded: a 1.1-style config resumes forever": (
        [S(), resumed(), resumed(), resumed()], CallModel(1, 1)),
    "resumes below the budget go on": (
        [S(max_resumes_without_progress=3), resumed(), resumed()], CallModel(1, 1)),
    "the budget of resumes without progress stops the next resume": (
        [S(max_resumes_without_progress=2), resumed(), resumed()], CrashLoopStop(2, 2, 1, None)),
    "a completed step is progress": (
        [S(max_resumes_without_progress=2), resumed(), resumed(), *step(1), resumed()], CallModel(2, 1)),
    "an operator's lift counts from zero again": (
        [S(max_resumes_without_progress=1), resumed(), lifted(1)], CallModel(1, 1)),
    "failures in a row below the budget go on": (
        [S(max_tool_failures=3), *step(1, error=True), *step(2, error=True)], CallModel(3, 1)),
    "the failure budget ends the run": (
        [S(max_tool_failures=2), *step(1, error=True), *step(2, error=True)], FinishToolFailures("t", 2)),
    "a success resets the streak": (
        [S(max_tool_failures=2), *step(1, error=True), *step(2), *step(3, error=True)], CallModel(4, 1)),
    "a tool's own budget wins over the agent's": (
        [S(max_tool_failures=5, tools=[{"name": "t", "replay": "safe", "max_failures": 1}]), *step(1, error=True)],
        FinishToolFailures("t", 1)),
    "no failure budget in a 1.1-style config": (
        [S(), *step(1, error=True), *step(2, error=True), *step(3, error=True)], CallModel(4, 1)),
}


@pytest.mark.parametrize("records, want", PLANS.values(), ids=PLANS.keys())
def test_plan(records, want):
    rec = classify(records, run_id="r")
    assert plan(rec) == want
    assert describe(plan(rec), "r")


def test_crash_loop_names_where_it_dies_and_progress_resets_it():
    records = [S(max_resumes_without_progress=2), *step(1), resumed(), *step(2)[:3], resumed()]
    nxt = plan(classify(records, run_id="r"))
    assert isinstance(nxt, CrashLoopStop) and (nxt.resumes, nxt.step) == (2, 2)
    assert nxt.execution.tool == "t" and nxt.execution.result_id == "s2-a1"
    assert "accept-crash-loop" in describe(nxt, "r")
    rec = classify([S(max_resumes_without_progress=2), resumed(), resumed(), *step(1)], run_id="r")
    assert plan(rec) == CallModel(2, 1) and rec.budgets.idle_resumes == 0 and rec.budgets.resumes == 2


def test_the_run_loop_never_stops_itself_for_a_crash_loop():
    # The crash-loop stop is what a resume finds; the resume that went on must not stop itself.
    w = walk([S(max_resumes_without_progress=1), resumed()], run_id="r")
    assert isinstance(plan(w), CrashLoopStop)
    w.go_live()
    assert plan(w) == CallModel(1, 1)


def test_overrides_and_budgets_are_on_the_recovery():
    rec = classify([S(max_resumes_without_progress=1, max_tool_failures=3), accepted(), resumed(), lifted(1),
                    *step(1, error=True)], run_id="r")
    assert [o.TAG for o in rec.overrides] == ["checkpoint_accepted", "crash_loop_accepted"]
    assert rec.budgets.streaks == {"t": 1} and rec.budgets.limits == {"t": 3}
    assert rec.budgets.to_json()["crash_loop"] == {"resumes": 1, "without_progress": 0, "limit": 1}


def test_a_tool_failures_finish_is_accepted_when_the_budget_is_spent():
    records = [S(max_tool_failures=1), *step(1, error=True),
               RunFinished(reason="tool_failures", result=None, steps=1, error="t failed")]
    assert classify(records, run_id="r").status == "finished"


# -- what no correct writer writes ------------------------------------------------------------

BAD = {
    "rule 21: checkpoint_accepted in a 1.1 log": ([S("1.1"), accepted()], 21),
    "rule 21: resumed in a 1.1 log": ([S("1.1"), resumed()], 21),
    "rule 21: crash_loop_accepted in a 1.1 log": ([S("1.1"), lifted(0)], 21),
    "rule 21: a 1.2 config field in a 1.1 log": ([S("1.1", logic_version="1")], 21),
    "rule 21: a tool's failure budget in a 1.1 log": (
        [S("1.1", tools=[{"name": "t", "replay": "safe", "max_failures": 2}])], 21),
    "rule 21: a tool_failures finish in a 1.1 log": (
        [S("1.1"), *step(1, error=True), RunFinished(reason="tool_failures", result=None, steps=1)], 21),
    "rule 14: a crash-loop budget that is no positive integer": ([S(max_resumes_without_progress=0)], 14),
    "rule 14: inputs without a hash": ([S(inputs={"a": {"kind": "file"}})], 14),
    "rule 22: checkpoint_accepted accepting nothing": ([S(), accepted(differences=())], 22),
    "rule 22: checkpoint_accepted without a reason": ([S(), accepted(reason=" ")], 22),
    "rule 22: checkpoint_accepted without who": ([S(), accepted(by="")], 22),
    "rule 23: a resume beyond the crash-loop budget": (
        [S(max_resumes_without_progress=1), resumed(), resumed()], 23),
    "rule 23: lifting a crash loop that is not one": ([S(max_resumes_without_progress=2), resumed(), lifted(1)], 23),
    "rule 23: lifting without a budget": ([S(), resumed(), lifted(1)], 23),
    "rule 23: lifting another count than the log's": (
        [S(max_resumes_without_progress=1), resumed(), lifted(2)], 23),
    "rule 23: lifting without a reason": (
        [S(max_resumes_without_progress=1), resumed(), CrashLoopAccepted(resumes=1, reason="", by="op")], 23),
    "rule 24: a step after a tool spent its failure budget": (
        [S(max_tool_failures=1), *step(1, error=True), *step(2)[:1]], 24),
    "rule 24: tool_failures without a spent budget": (
        [S(max_tool_failures=2), *step(1, error=True), RunFinished(reason="tool_failures", result=None, steps=1)], 24),
    "rule 24: another finish after a spent budget": (
        [S(max_tool_failures=1, max_steps=1), *step(1, error=True),
         RunFinished(reason="max_steps", result=None, steps=1)], 24),
    "rule 2: resumed after run_finished": (
        [S(), *step(1), Intent(kind="model_call", step=2, attempt=1, result_id="s2-m1"),
         ModelCallResult(result_id="s2-m1", output={"text": "done", "tool_call": None}),
         StepCompleted(step=2, result_id=None, observation=None),
         RunFinished(reason="final_answer", result="done", steps=2), resumed()], 2),
}


@pytest.mark.parametrize("records, rule", BAD.values(), ids=BAD.keys())
def test_refused(records, rule):
    _, problems = check(records, run_id="r")
    assert problems, "the log was accepted"
    assert problems[0].rule == rule, problems
