"""People in the loop, through the library: approval gates, decisions, answers (log format 1.2)."""

from __future__ import annotations

import asyncio

import pytest

import polyloop
from polyloop import (
    Agent,
    ApprovalRequiredError,
    DecisionError,
    NeedsOperatorError,
    RunMismatchError,
    ScriptedModel,
    answer,
    approve,
    ask_human,
    deny,
    inspect_run,
    tool,
)
from polyloop._log.records import args_digest
from polyloop.testing import MemoryStore

RAN: list[dict] = []


@tool(approval=lambda args: args["amount"] > 100)
def pay(amount: int, to: str) -> str:
    RAN.append({"amount": amount, "to": to})
    return f"paid {amount} to {to}"


@tool(approval="required")
def wire(amount: int) -> str:
    RAN.append({"wire": amount})
    return f"wired {amount}"


@tool(irreversible=True)
def publish(page: str) -> str:
    RAN.append({"publish": page})
    return f"published {page}"


def agent(script, tools=(pay,), **kw) -> Agent:
    return Agent(model=ScriptedModel(script), tools=list(tools), **kw)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(autouse=True)
def _clear():
    RAN.clear()


def records(store, run_id="r"):
    return [r.TAG for r in run(store.read_log(run_id))]


def test_a_call_the_predicate_holds_for_stops_before_anything_runs_and_waits():
    store = MemoryStore()
    with pytest.raises(ApprovalRequiredError) as err:
        run(agent([{"tool": "pay", "args": {"amount": 500, "to": "bob"}}, {"final": "ok"}]).run(
            "g", run_id="r", store=store))
    assert isinstance(err.value, NeedsOperatorError)
    assert "polyloop approve r s1-a1" in str(err.value)
    assert RAN == []
    assert records(store)[-1] == "approval_request"
    req = run(store.read_log("r"))[-1]
    assert req.args_sha256 == args_digest({"amount": 500, "to": "bob"}) and req.kind == "approval"
    report = run(inspect_run(store, "r"))
    assert report.status == "needs_operator"
    assert [(w["id"], w["kind"], w["tool"]) for w in report.waiting] == [("s1-a1", "approval", "pay")]
    assert report.to_json()["requests"][0]["state"] == "waiting"
    # resuming without a decision stops again, writing nothing
    n = len(records(store))
    with pytest.raises(ApprovalRequiredError):
        run(agent([{"tool": "pay", "args": {"amount": 500, "to": "bob"}}, {"final": "ok"}]).run(run_id="r", store=store))
    assert len(records(store)) == n


def test_a_call_the_predicate_does_not_hold_for_runs_at_once():
    store = MemoryStore()
    result = run(agent([{"tool": "pay", "args": {"amount": 5, "to": "al"}}, {"final": "ok"}]).run(
        "g", run_id="r", store=store))
    assert result.final == "ok" and RAN == [{"amount": 5, "to": "al"}]
    assert "approval_request" not in records(store)


def test_approve_runs_it_once_and_records_who_why_and_the_hash():
    store = MemoryStore()
    script = [{"tool": "wire", "args": {"amount": 7}}, {"final": "ok"}]
    with pytest.raises(ApprovalRequiredError):
        run(agent(script, [wire]).run("g", run_id="r", store=store))
    rec = run(approve(store, "r", "s1-a1", reason="fine", by="ann"))
    d = rec.request_of("s1-a1").decision
    assert (d.decision, d.by, d.reason, d.args) == ("approved", "ann", "fine", None)
    assert d.args_sha256 == d.request_sha256 == args_digest({"amount": 7})
    assert run(agent(script, [wire]).run(run_id="r", store=store)).final == "ok"
    assert RAN == [{"wire": 7}]
    tags = records(store)
    assert tags.index("decision") < tags.index("intent", tags.index("decision"))


def test_approve_with_edited_arguments_runs_those_and_keeps_the_key():
    store = MemoryStore()
    script = [{"tool": "pay", "args": {"amount": 500, "to": "bob"}}, {"final": "ok"}]
    with pytest.raises(ApprovalRequiredError):
        run(agent(script).run("g", run_id="r", store=store))
    run(approve(store, "r", "s1-a1", reason="cap", args={"amount": 100, "to": "bob"}))
    run(agent(script).run(run_id="r", store=store))
    assert RAN == [{"amount": 100, "to": "bob"}]
    log = run(store.read_log("r"))
    req = next(r for r in log if r.TAG == "approval_request")
    intent = next(r for r in log if r.TAG == "intent" and r.kind == "action")
    assert intent.args == {"amount": 100, "to": "bob"} and intent.idempotency_key == req.idempotency_key


def test_edited_arguments_that_do_not_fit_the_schema_never_reach_the_tool():
    store = MemoryStore()
    script = [{"tool": "pay", "args": {"amount": 500, "to": "bob"}}, {"final": "ok"}]
    with pytest.raises(ApprovalRequiredError):
        run(agent(script).run("g", run_id="r", store=store))
    run(approve(store, "r", "s1-a1", reason="oops", args={"amount": "lots"}))
    run(agent(script).run(run_id="r", store=store))
    assert RAN == []
    step = next(r for r in run(store.read_log("r")) if r.TAG == "step_completed")
    assert step.is_error and "invalid arguments" in step.observation


def test_deny_completes_the_step_with_the_denial_and_nothing_runs():
    store = MemoryStore()
    script = [{"tool": "wire", "args": {"amount": 7}}, {"final": "ok"}]
    with pytest.raises(ApprovalRequiredError):
        run(agent(script, [wire]).run("g", run_id="r", store=store))
    run(deny(store, "r", "s1-a1", reason="not today", by="ann"))
    assert run(agent(script, [wire]).run(run_id="r", store=store)).final == "ok"
    assert RAN == []
    step = next(r for r in run(store.read_log("r")) if r.TAG == "step_completed")
    assert step.observation == "denied by ann: not today" and step.is_error
    assert not any(r.TAG == "intent" and r.kind == "action" for r in run(store.read_log("r")))


def test_a_question_is_asked_once_and_the_answer_is_reused():
    store = MemoryStore()
    script = [{"tool": "ask_human", "args": {"question": "which colour?"}}, {"final": "ok"}]
    with pytest.raises(ApprovalRequiredError) as err:
        run(agent(script, [ask_human]).run("g", run_id="r", store=store))
    assert "polyloop answer r s1-a1" in str(err.value)
    assert run(inspect_run(store, "r")).waiting[0]["kind"] == "answer"
    with pytest.raises(DecisionError, match="question"):
        run(approve(store, "r", "s1-a1", reason="x"))
    run(answer(store, "r", "s1-a1", "blue"))
    with pytest.raises(DecisionError, match="already answered"):
        run(answer(store, "r", "s1-a1", "red"))
    run(agent(script, [ask_human]).run(run_id="r", store=store))
    log = run(store.read_log("r"))
    assert [r.TAG for r in log].count("approval_request") == 1
    assert next(r for r in log if r.TAG == "step_completed").observation == "blue"


@pytest.mark.parametrize(
    ("call", "why"),
    [
        (lambda s: approve(s, "r", "s9-a1", reason="x"), "does not wait for it"),
        (lambda s: deny(s, "r", "s1-a1", reason="x", expect_sha256="0" * 64), "hash to"),
        (lambda s: answer(s, "r", "s1-a1", "x"), "waits for approval"),
        (lambda s: approve(s, "r", "s1-a1", reason="x", args=[1]), "JSON object"),
    ],
    ids=["unknown-id", "hash-mismatch", "answer-an-approval", "args-not-object"],
)
def test_decisions_that_do_not_fit_are_refused_and_write_nothing(call, why):
    store = MemoryStore()
    with pytest.raises(ApprovalRequiredError):
        run(agent([{"tool": "wire", "args": {"amount": 7}}], [wire]).run("g", run_id="r", store=store))
    n = len(records(store))
    with pytest.raises(DecisionError, match=why):
        run(call(store))
    assert len(records(store)) == n


def test_a_second_decision_and_one_for_a_finished_run_are_refused():
    store = MemoryStore()
    script = [{"tool": "wire", "args": {"amount": 7}}, {"final": "ok"}]
    with pytest.raises(ApprovalRequiredError):
        run(agent(script, [wire]).run("g", run_id="r", store=store))
    run(approve(store, "r", "s1-a1", reason="ok", expect_sha256=args_digest({"amount": 7})))
    with pytest.raises(DecisionError, match="already approved"):
        run(deny(store, "r", "s1-a1", reason="changed my mind"))
    run(agent(script, [wire]).run(run_id="r", store=store))
    with pytest.raises(DecisionError, match="finished"):
        run(deny(store, "r", "s1-a1", reason="late"))


def test_an_irreversible_tool_requires_approval_unless_the_agent_opts_out_on_the_record():
    store = MemoryStore()
    script = [{"tool": "publish", "args": {"page": "home"}}, {"final": "ok"}]
    with pytest.raises(ApprovalRequiredError):
        run(agent(script, [publish]).run("g", run_id="a", store=store))
    started = run(store.read_log("a"))[0]
    assert started.config["tools"][0]["approval"] == "required"
    assert "approve_irreversible" not in started.config
    run(agent(script, [publish], approve_irreversible=False).run("g", run_id="b", store=store))
    started = run(store.read_log("b"))[0]
    assert started.config["approve_irreversible"] is False and "approval" not in started.config["tools"][0]
    assert RAN == [{"publish": "home"}]
    # resuming with another approval setting than recorded is refused
    with pytest.raises(RunMismatchError, match="approval"):
        run(agent(script, [publish], approve_irreversible=False).run(run_id="a", store=store))


def test_a_predicate_that_raises_requires_approval():
    @tool(approval=lambda args: args["missing"] > 1)
    def odd(x: int) -> str:
        return "ran"

    store = MemoryStore()
    with pytest.raises(ApprovalRequiredError):
        run(agent([{"tool": "odd", "args": {"x": 1}}], [odd]).run("g", run_id="r", store=store))
    assert "KeyError" in run(store.read_log("r"))[-1].reason


def test_a_precondition_is_checked_after_the_approval_immediately_before_the_tool():
    seen: list[str] = []

    @tool(approval="required")
    def send(to: str) -> str:
        seen.append("ran")
        return "sent"

    @send.precondition
    def _(args, ctx):
        seen.append("precondition")
        return "the mailbox is gone"

    store = MemoryStore()
    script = [{"tool": "send", "args": {"to": "x"}}, {"final": "ok"}]
    with pytest.raises(ApprovalRequiredError):
        run(agent(script, [send]).run("g", run_id="r", store=store))
    assert seen == []
    run(approve(store, "r", "s1-a1", reason="ok"))
    run(agent(script, [send]).run(run_id="r", store=store))
    assert seen == ["precondition"]
    tags = records(store)
    assert tags.index("decision") < tags.index("guard_check")


def test_bad_approval_declarations_are_refused():
    with pytest.raises(ValueError, match="approval"):
        tool(approval="sometimes")(lambda x: x)
    with pytest.raises(TypeError):
        Agent(model=ScriptedModel([]), approve_irreversible="no")
    assert polyloop.ask_human.question is True


def test_mark_resolved_on_a_waiting_request_points_to_approve_and_writes_nothing():
    store = MemoryStore()
    with pytest.raises(ApprovalRequiredError):
        run(agent([{"tool": "wire", "args": {"amount": 7}}], [wire]).run("g", run_id="r", store=store))
    n = len(records(store))
    with pytest.raises(polyloop.ResolutionError, match="polyloop approve"):
        run(polyloop.mark_resolved(store, "r", "s1-a1", executed=False))
    assert len(records(store)) == n


def test_a_rollback_rehearsal_of_an_irreversible_tool_is_not_stopped_for_approval():
    from polyloop.testing import rehearse_rollback

    @tool(irreversible=True)
    def send(to: str) -> str:
        return "sent"

    @send.verify
    def _(args, result, ctx):
        return "the mail bounced"

    @send.rollback(kind="alert")
    def _(args, result, ctx):
        raise AssertionError("never called")

    found = run(rehearse_rollback(send, {"to": "x"}, break_effect=lambda: None))
    assert not isinstance(found.stopped, ApprovalRequiredError)
    assert found.alerts
