"""Outages (log format 1.3), table-driven: what the planner and inspect decide from transient failures
and `run_stopped`, and every rule (37, 38 of docs/reference/log-format.md) a log breaks when no correct
writer wrote it."""

from __future__ import annotations

import orjson
import pytest

from polyloop import (
    Intent,
    ModelCallResult,
    RecordError,
    Resumed,
    RunFinished,
    RunStarted,
    RunStopped,
    StepCompleted,
    check,
    classify,
    decode_record,
    encode_record,
)
from polyloop._recovery.plan import CallModel, FinishAttempts, plan


def S(version="1.3", max_attempts=3, **more):
    config = {"max_steps": 9, "max_attempts": max_attempts, "tools": [], **more}
    return RunStarted(run_id="r", goal="g", config=config, schema_version=version)


def failed(step, attempt, *, transient=True):
    rid = f"s{step}-m{attempt}"
    return [Intent(kind="model_call", step=step, attempt=attempt, result_id=rid),
            ModelCallResult(result_id=rid, output=None, error="TransientModelError: cannot connect",
                            transient=True if transient else None)]


def answered(step, attempt=1):
    rid = f"s{step}-m{attempt}"
    return [Intent(kind="model_call", step=step, attempt=attempt, result_id=rid),
            ModelCallResult(result_id=rid, output={"text": "done", "tool_call": None}),
            StepCompleted(step=step, result_id=None, observation=None)]


def stopped(step=1, attempts=3, failures=None):
    return RunStopped(cause="model_unavailable", step=step, attempts=attempts,
                      failures=failures if failures is not None else max(attempts, 1),
                      error="cannot connect to http://127.0.0.1:9/v1", since="2026-12-03T07:00:00.000000Z",
                      endpoint="OpenAIModel http://127.0.0.1:9/v1")


# -- what the planner decides ------------------------------------------------------------------

PLANS = {
    "transient failures never spend max_attempts": (
        [S(), *failed(1, 1), *failed(1, 2), *failed(1, 3), *failed(1, 4)], CallModel(1, 5, after_failure=True)),
    "other failures do, as before": (
        [S(), *failed(1, 1, transient=False), *failed(1, 2), *failed(1, 3, transient=False),
         *failed(1, 4, transient=False)], FinishAttempts(1, 3)),
    "a stopped run is called again with the next attempt": (
        [S(), *failed(1, 1), *failed(1, 2), *failed(1, 3), stopped()], CallModel(1, 4, after_failure=True)),
    "a run that only waited on a down endpoint is called as attempt 1": (
        [S(), stopped(attempts=0, failures=4)], CallModel(1, 1)),
    "in a 1.2 log a failure without the mark counts, as it always did": (
        [S("1.2"), *failed(1, 1, transient=False), *failed(1, 2, transient=False), *failed(1, 3, transient=False)],
        FinishAttempts(1, 3)),
}


@pytest.mark.parametrize("records, expected", list(PLANS.values()), ids=list(PLANS))
def test_the_planner_decides(records, expected):
    assert plan(classify(records)) == expected


def test_a_stopped_run_is_resumable_and_says_why_until_something_is_attempted_again():
    rec = classify([S(), *failed(1, 1), *failed(1, 2), *failed(1, 3), stopped()])
    assert rec.status == "resumable"
    assert rec.stopped is not None and rec.stopped.attempts == 3
    later = classify([S(), *failed(1, 1), *failed(1, 2), *failed(1, 3), stopped(),
                      *failed(1, 4), *failed(1, 5), *failed(1, 6), stopped(attempts=3)])
    assert later.stopped is not None and len(later.stops) == 2
    going = classify([S(), *failed(1, 1), stopped(attempts=1), *answered(1, 2)])
    assert going.stopped is None and len(going.stops) == 1


def test_resumes_that_stop_on_an_outage_are_no_crash_loop():
    records = [S(max_resumes_without_progress=2), *failed(1, 1), stopped(attempts=1)]
    for attempt in range(2, 6):  # four resumes in a row, each stopped by the outage again
        records += [Resumed(by="cron@host"), *failed(1, attempt), stopped(attempts=1)]
    assert plan(classify(records)) == CallModel(1, 6, after_failure=True)
    crashed = [S(max_resumes_without_progress=2), *failed(1, 1), stopped(attempts=1),
               Resumed(by="cron@host"), Resumed(by="cron@host")]  # two resumes that died without a word
    assert type(plan(classify(crashed))).__name__ == "CrashLoopStop"


# -- what no correct writer writes ---------------------------------------------------------------

BROKEN = {
    "run_stopped in a 1.2 log": ([S("1.2"), stopped(attempts=0, failures=1)], 37),
    "a transient mark in a 1.2 log": ([S("1.2"), *failed(1, 1)], 37),
    "run_stopped for a step that is not open": ([S(), *answered(1), stopped(step=1, attempts=0, failures=1)], 38),
    "run_stopped after the step's model answered": (
        [S(), Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
         ModelCallResult(result_id="s1-m1", output={"text": None, "tool_call": {"name": "t", "args": {}}}),
         stopped(attempts=0, failures=1)], 38),
    "run_stopped while a model call has no result": (
        [S(), Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"), stopped(attempts=0, failures=1)], 38),
    "run_stopped counts attempts the step does not have": ([S(), *failed(1, 1), stopped(attempts=2)], 38),
    "run_stopped counts failures from before the previous stop": (
        [S(), *failed(1, 1), stopped(attempts=1), *failed(1, 2), stopped(attempts=2)], 38),
    "run_stopped counts failures that were not transient": (
        [S(), *failed(1, 1, transient=False), stopped(attempts=1)], 38),
    "run_stopped after run_finished": (
        [S(), *answered(1), RunFinished(reason="final_answer", result="done", steps=1),
         stopped(step=2, attempts=0, failures=1)], 2),
}


@pytest.mark.parametrize("records, rule", list(BROKEN.values()), ids=list(BROKEN))
def test_a_log_no_correct_writer_writes_is_corrupt(records, rule):
    _, problems = check(records)
    assert [p.rule for p in problems] == [rule], problems


def test_run_stopped_round_trips_and_its_values_are_checked_when_decoded():
    rec = stopped()
    assert decode_record(orjson.loads(encode_record(rec))) == rec
    doc = orjson.loads(encode_record(rec))
    for field, value in (("cause", "database_unavailable"), ("step", 0), ("failures", 0), ("attempts", -1)):
        with pytest.raises(RecordError):
            decode_record({**doc, field: value})


def test_the_transient_mark_is_written_only_when_set_and_only_on_failures():
    ok = ModelCallResult(result_id="s1-m1", output={"text": "x", "tool_call": None})
    assert "transient" not in orjson.loads(encode_record(ok))
    doc = orjson.loads(encode_record(failed(1, 1)[1]))
    assert doc["transient"] is True
    for bad in ({**doc, "transient": False}, {**doc, "output": {"text": "x", "tool_call": None}, "error": None}):
        with pytest.raises(RecordError):
            decode_record(bad)
