"""A step of several tool calls where some wait for a person (log format 1.2), in-process.

Nothing of such a step runs until every approval and question of it is
decided; then its approved calls and the calls that never waited run
together, intents first. Denied calls and answered questions give the model
their observation. A log the previous writer left (the calls that waited for
nobody ran while the others waited) still reads, verifies and resumes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from polyloop import (
    Agent,
    ApprovalRequiredError,
    ScriptedModel,
    ask_human,
    approve,
    answer,
    check,
    classify,
    decode_record,
    deny,
    inspect_run,
    tool,
)
from polyloop._log.ids import idempotency_key
from polyloop._recovery.plan import AwaitDecision, StepCalls, plan
from polyloop._log.records import ActionResult, Intent
from polyloop.testing import MemoryStore

ran: list[str] = []


@tool
def write(path: str) -> str:
    """Write a file (`never`: an effect that must not repeat), waits for nobody."""
    ran.append(f"write {path}")
    return f"wrote {path}"


@tool(approval="required")
def send(to: str) -> str:
    """Send a mail; every call waits for approval."""
    ran.append(f"send {to}")
    return f"sent to {to}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def agent(*calls: tuple[str, dict[str, Any]]) -> Agent:
    script = [{"calls": [{"tool": t, "args": a} for t, a in calls]}, {"final": "done"}]
    return Agent(model=ScriptedModel(script), tools=[write, send, ask_human])


def go(a: Agent, store: MemoryStore, goal: str | None = None) -> Any:
    return asyncio.run(a.run(goal, run_id="r", store=store))


def log(store: MemoryStore) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in store.raw("r").splitlines()]


def action_intents(store: MemoryStore) -> list[str]:
    return [r["result_id"] for r in log(store) if r["record"] == "intent" and r["kind"] == "action"]


def stops(a: Agent, store: MemoryStore, goal: str | None = None) -> list[str]:
    """Run (or resume) and expect the stop for a person; return the waiting ids."""
    with pytest.raises(ApprovalRequiredError) as stop:
        go(a, store, goal)
    return [r.result_id for r in stop.value.requests]


def outcomes(store: MemoryStore) -> list[tuple[str | None, str, bool]]:
    done = next(r for r in log(store) if r["record"] == "step_completed")
    return [(c["result_id"], c["observation"], c["is_error"]) for c in done["calls"]]


def assert_clean(store: MemoryStore) -> None:
    recovery, problems = check([decode_record(r) for r in log(store)], run_id="r")
    assert problems == [] and recovery is not None


MIXED = (("write", {"path": "a"}), ("send", {"to": "x"}))


def test_a_never_call_beside_a_call_that_waits_for_approval_does_not_run_before_the_approval() -> None:
    store = MemoryStore()
    a = agent(*MIXED)
    assert stops(a, store, "g") == ["s1-c2-a1"]
    assert ran == []  # the write waits with its step
    tags = [r["record"] for r in log(store)]
    assert tags[-1] == "approval_request" and "step_completed" not in tags and action_intents(store) == []
    report = asyncio.run(inspect_run(store, "r"))
    assert report.status == "needs_operator"
    assert [(w["id"], w["kind"]) for w in report.waiting] == [("s1-c2-a1", "approval")]
    assert "waits for approval" in report.next

    n = len(log(store))
    assert stops(a, store) == ["s1-c2-a1"]  # resuming undecided: stops again, runs and writes nothing
    assert ran == [] and len(log(store)) == n

    asyncio.run(approve(store, "r", "s1-c2-a1", reason="fine", by="ann"))
    assert go(a, store).final == "done"
    assert sorted(ran) == ["send x", "write a"]  # both, once each
    records = log(store)
    first_intent = next(i for i, r in enumerate(records) if r["record"] == "intent" and r["kind"] == "action")
    decided = next(i for i, r in enumerate(records) if r["record"] == "decision")
    assert decided < first_intent  # no call of the step had an intent before the decision
    assert [r["result_id"] for r in records[first_intent:first_intent + 2]] == ["s1-c1-a1", "s1-c2-a1"]
    assert outcomes(store) == [("s1-c1-a1", "wrote a", False), ("s1-c2-a1", "sent to x", False)]
    assert_clean(store)


def test_a_denial_releases_the_other_calls_and_the_model_reads_it() -> None:
    store = MemoryStore()
    a = agent(*MIXED)
    stops(a, store, "g")
    assert ran == []
    asyncio.run(deny(store, "r", "s1-c2-a1", reason="not x", by="ann"))
    assert go(a, store).final == "done"
    assert ran == ["write a"]
    assert action_intents(store) == ["s1-c1-a1"]
    assert outcomes(store) == [("s1-c1-a1", "wrote a", False), (None, "denied by ann: not x", True)]
    assert_clean(store)


def test_edited_arguments_run_for_their_call_and_the_other_call_keeps_its_own() -> None:
    store = MemoryStore()
    a = agent(*MIXED)
    stops(a, store, "g")
    assert ran == []
    asyncio.run(approve(store, "r", "s1-c2-a1", reason="cap", by="ann", args={"to": "y"}))
    go(a, store)
    assert sorted(ran) == ["send y", "write a"]
    intents = {r["result_id"]: r for r in log(store) if r["record"] == "intent" and r["kind"] == "action"}
    assert intents["s1-c2-a1"]["args"] == {"to": "y"} and intents["s1-c1-a1"]["args"] == {"path": "a"}
    assert_clean(store)


def test_a_question_beside_a_never_call_holds_it_until_answered() -> None:
    store = MemoryStore()
    a = agent(("ask_human", {"question": "which?"}), ("write", {"path": "a"}))
    assert stops(a, store, "g") == ["s1-c1-a1"]
    assert ran == [] and action_intents(store) == []
    assert asyncio.run(inspect_run(store, "r")).waiting[0]["kind"] == "answer"
    asyncio.run(answer(store, "r", "s1-c1-a1", "the blue one", by="ann"))
    go(a, store)
    assert ran == ["write a"]
    assert outcomes(store) == [(None, "the blue one", False), ("s1-c2-a1", "wrote a", False)]
    assert_clean(store)


def test_two_approvals_decided_one_at_a_time_release_nothing_until_the_last() -> None:
    store = MemoryStore()
    a = agent(("send", {"to": "x"}), ("write", {"path": "a"}), ("send", {"to": "y"}))
    assert stops(a, store, "g") == ["s1-c1-a1", "s1-c3-a1"]  # both requests before the stop
    asyncio.run(approve(store, "r", "s1-c1-a1", reason="fine", by="ann"))
    assert isinstance(plan(classify([decode_record(r) for r in log(store)], run_id="r")), AwaitDecision)
    n = len(log(store))
    assert stops(a, store) == ["s1-c3-a1"]  # the first decision released nothing
    assert ran == [] and action_intents(store) == [] and len(log(store)) == n
    asyncio.run(deny(store, "r", "s1-c3-a1", reason="no", by="bo"))
    go(a, store)
    assert sorted(ran) == ["send x", "write a"]
    assert outcomes(store) == [
        ("s1-c1-a1", "sent to x", False), ("s1-c2-a1", "wrote a", False), (None, "denied by bo: no", True)]
    assert_clean(store)


def test_a_request_lost_to_a_crash_is_recorded_on_resume_before_anything_runs() -> None:
    # The first of two requests reached the log, then the process died: the
    # step waits for that one; once it is decided, resume records the other
    # request and stops again, still running nothing.
    store = MemoryStore()
    a = agent(("send", {"to": "x"}), ("write", {"path": "a"}), ("send", {"to": "y"}))
    stops(a, store, "g")
    lines = store.raw("r").splitlines(keepends=True)
    assert orjson.loads(lines[-1])["result_id"] == "s1-c3-a1"
    store._logs["r"] = bytearray(b"".join(lines[:-1]))  # the last request never reached the log
    assert stops(a, store) == ["s1-c1-a1"]  # the request of call 1 waits: nothing else is tried
    asyncio.run(approve(store, "r", "s1-c1-a1", reason="fine", by="ann"))
    assert stops(a, store) == ["s1-c3-a1"]
    assert ran == [] and action_intents(store) == []
    asyncio.run(approve(store, "r", "s1-c3-a1", reason="fine", by="ann"))
    go(a, store)
    assert sorted(ran) == ["send x", "send y", "write a"]
    assert_clean(store)


def test_a_log_where_a_call_ran_while_another_waited_still_reads_and_resumes() -> None:
    # The previous writer ran the calls that waited for nobody before the
    # others were decided. That log is what a correct (older) writer wrote:
    # it verifies; resume does not run the finished call again.
    store = MemoryStore()
    a = agent(*MIXED)
    stops(a, store, "g")
    key = idempotency_key("r", 1, "write", {"path": "a"}, 1)
    intent = Intent(kind="action", step=1, attempt=1, result_id="s1-c1-a1", tool="write", args={"path": "a"},
                    replay="never", idempotency_key=key, call=1)
    asyncio.run(store.write_intent("r", intent))
    asyncio.run(store.write_action_result("r", ActionResult(result_id="s1-c1-a1", observation="wrote a")))
    assert_clean(store)
    report = asyncio.run(inspect_run(store, "r"))
    assert report.status == "needs_operator" and [w["id"] for w in report.waiting] == ["s1-c2-a1"]
    assert stops(a, store) == ["s1-c2-a1"]
    asyncio.run(approve(store, "r", "s1-c2-a1", reason="fine", by="ann"))
    assert isinstance(plan(classify([decode_record(r) for r in log(store)], run_id="r")), StepCalls)
    go(a, store)
    assert ran == ["send x"]  # the write had run already: reused, not repeated
    assert outcomes(store) == [("s1-c1-a1", "wrote a", False), ("s1-c2-a1", "sent to x", False)]
    assert_clean(store)


def test_an_unknown_safe_call_of_an_old_log_is_not_replayed_while_a_call_of_its_step_waits() -> None:
    @tool(replay="safe")
    def read(path: str) -> str:
        """Read a file."""
        ran.append(f"read {path}")
        return f"content of {path}"

    script = [{"calls": [{"tool": "read", "args": {"path": "a"}}, {"tool": "send", "args": {"to": "x"}}]},
              {"final": "done"}]
    a = Agent(model=ScriptedModel(script), tools=[read, send])
    store = MemoryStore()
    stops(a, store, "g")
    key = idempotency_key("r", 1, "read", {"path": "a"}, 1)
    asyncio.run(store.write_intent("r", Intent(kind="action", step=1, attempt=1, result_id="s1-c1-a1", tool="read",
                                               args={"path": "a"}, replay="safe", idempotency_key=key, call=1)))
    assert_clean(store)
    assert stops(a, store) == ["s1-c2-a1"]
    assert ran == []  # the replay waits for the decision too
    asyncio.run(approve(store, "r", "s1-c2-a1", reason="fine", by="ann"))
    go(a, store)
    assert sorted(ran) == ["read a", "send x"]
    assert action_intents(store) == ["s1-c1-a1", "s1-c1-a2", "s1-c2-a1"]
    assert_clean(store)
