"""What `inspect` says resume will do next is what resume then does (one planner, issue 9)."""

from __future__ import annotations

import logkit
import pytest
from hypothesis import HealthCheck, given, settings

from polyloop import (
    ActionResult,
    Agent,
    Intent,
    ModelCallResult,
    NeedsOperatorError,
    Resolution,
    Resumed,
    RunFinished,
    RunStarted,
    ScriptedModel,
    StepCompleted,
    inspect_run,
    tool,
)
from polyloop._recovery.plan import (
    CallModel,
    CompleteFinal,
    Finished,
    FinishAttempts,
    FinishBudget,
    FinishFinal,
    NeedsOperator,
    ReuseResolution,
    RunAction,
    StepCalls,
    plan,
)
from polyloop.testing import MemoryStore


def _tools():
    made = []
    for name, replay in logkit.TOOLS.items():
        made.append(tool(replay=replay, name=name)(lambda name=None: "ok"))
    return made


async def _store_with(records) -> MemoryStore:
    store = MemoryStore()
    first, rest = records[0], records[1:]
    await store.write_run_started(first)
    writers = {
        Intent: store.write_intent,
        ModelCallResult: store.write_model_call_result,
        StepCompleted: store.write_step_completed,
        RunFinished: store.write_run_finished,
        Resolution: store.write_resolution,
        ActionResult: store.write_action_result,
    }
    for r in rest:
        await writers[type(r)](first.run_id, r)
    return store


def _expected_first(nxt):
    """The record resume must append first for the planned move (None: it appends nothing)."""
    if isinstance(nxt, CallModel):
        return ("intent", "model_call", nxt.step, nxt.attempt)
    if isinstance(nxt, RunAction):
        if nxt.tool not in logkit.TOOLS:
            return ("step_completed", nxt.step, None)
        return ("intent", "action", nxt.step, nxt.attempt)
    if isinstance(nxt, StepCalls):
        # The step's new intents come first, in call order (a call of an unknown tool gets
        # none); with none to write, the step completes.
        for move in nxt.pending:
            if isinstance(move, RunAction) and move.tool in logkit.TOOLS:
                return ("intent", "action", nxt.step, move.attempt)
        return ("step_completed", nxt.step, None)
    if isinstance(nxt, ReuseResolution):
        return ("step_completed", nxt.step, nxt.result_id)
    if isinstance(nxt, CompleteFinal):
        return ("step_completed", nxt.step, None)
    if isinstance(nxt, FinishFinal):
        return ("run_finished", "final_answer")
    if isinstance(nxt, FinishBudget):
        return ("run_finished", "max_steps")
    if isinstance(nxt, FinishAttempts):
        return ("run_finished", "error")
    assert isinstance(nxt, (Finished, NeedsOperator))
    return None


def _observed_first(record):
    if isinstance(record, Intent):
        return ("intent", record.kind, record.step, record.attempt)
    if isinstance(record, StepCompleted):
        return ("step_completed", record.step, record.result_id)
    assert isinstance(record, RunFinished), record
    return ("run_finished", record.reason)


@pytest.mark.asyncio
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=logkit.logs())
async def test_inspect_names_what_resume_then_does(records, reliability):
    assert isinstance(records[0], RunStarted)
    run_id = records[0].run_id
    store = await _store_with(records)
    report = await inspect_run(store, run_id)
    assert report.recovery is not None, report.problems
    nxt = plan(report.recovery)
    agent = Agent(model=ScriptedModel([{"final": "end"}] * 20), tools=_tools(), max_steps=6)
    try:
        result = await agent.run(run_id=run_id, store=store)
    except NeedsOperatorError:
        assert isinstance(nxt, NeedsOperator), report.next
        assert len(await store.read_log(run_id)) == len(records)
        return
    after = await store.read_log(run_id)
    expected = _expected_first(nxt)
    if expected is None:
        assert isinstance(nxt, Finished) and result.already_finished
        assert len(after) == len(records)
    else:
        appended = list(after[len(records):])
        if records[0].schema_version >= "1.2":  # a resume that acts first counts itself (log format 1.2)
            assert isinstance(appended[0], Resumed), appended[0]
            appended = appended[1:]
        assert not any(isinstance(r, Resumed) for r in appended)
        assert _observed_first(appended[0]) == expected, report.next
    reliability.add("planner_property_examples")


# -- a live run lets its done steps go (Walker.forget_done) --------------------------------


def _seen(walker, run_id):
    """What a run loop reads of its walker after a record: the plan, and the open step's state."""
    from polyloop._recovery.plan import describe

    nxt = plan(walker)
    st = walker.open_step
    return (
        type(nxt).__name__, describe(nxt, run_id), walker.completed_steps, len(walker.steps),
        [x.result_id for x in walker.blocking()],
        None if st is None else [(x.result_id, x.state) for x in st.model_calls + st.actions],
        sorted(walker.requests), sorted(walker.artifacts),
    )


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(records=logkit.logs())
def test_a_walker_that_forgets_done_steps_plans_as_one_that_keeps_them(records):
    from polyloop._recovery.walker import Walker

    run_id = records[0].run_id
    whole, live = Walker(run_id), Walker(run_id)
    for record in records:
        assert whole.feed(record) == live.feed(record)
        if isinstance(record, StepCompleted):
            live.forget_done()
        if whole.started is None or whole.problems:
            continue
        assert _seen(live, run_id) == _seen(whole, run_id)
    done = whole.completed_steps
    if done >= 2:
        # Only the open step and the last completed one keep their executions.
        assert all(x.intent.step >= done for x in live.order)
        with pytest.raises(RuntimeError, match="no verdict"):
            live.recovery()
