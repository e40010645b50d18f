"""Guarded actions through the real run loop (in-process, on the in-memory store)."""

from __future__ import annotations

import dataclasses

import pytest

from polyloop import (
    Agent,
    AlertError,
    NeedsOperatorError,
    ResolutionError,
    RunMismatchError,
    ScriptedModel,
    StoreError,
    classify,
    executed,
    inspect_run,
    mark_resolved,
    not_executed,
    tool,
    unknown,
)
from polyloop.testing import MemoryStore, rehearse_rollback

SCRIPT = [{"tool": "pay", "args": {"amount": 5}}, {"final": "over"}]


def make(world: dict, *, rollback: str | None = "undo", verify_ok=True, reconcile=None, async_guards=False):
    @tool
    def pay(amount: int, ctx) -> str:
        world["paid"] = world.get("paid", 0) + amount
        world.setdefault("keys", []).append(ctx.idempotency_key)
        return f"paid {amount}"

    if async_guards:
        @pay.precondition
        async def _pre(args, ctx):
            return world.get("open", True) or "the till is closed"
    else:
        @pay.precondition
        def _pre(args, ctx):
            if world.get("pre_raises"):
                raise RuntimeError("no connection")
            return world.get("open", True) or "the till is closed"

    @pay.verify
    def _verify(args, result, ctx):
        if world.get("verify_raises"):
            raise RuntimeError("read-back failed")
        return verify_ok or "the ledger disagrees"

    if rollback is not None:
        @pay.rollback(kind=rollback)
        def _undo(args, result, ctx):
            world.setdefault("undone", []).append(ctx.idempotency_key)
            if world.get("undo_raises"):
                raise RuntimeError("cannot undo")
            world["paid"] -= args["amount"]
            return "undone"

    if reconcile is not None:
        pay.reconcile(reconcile)
    return pay


async def test_a_failed_precondition_is_an_outcome_the_model_reads() -> None:
    world = {"open": False}
    store = MemoryStore()
    result = await Agent(model=ScriptedModel(SCRIPT), tools=[make(world)]).run("g", run_id="r", store=store)
    assert result.reason == "final_answer" and "paid" not in world
    step = classify(await store.read_log("r")).steps[0]
    assert step.completed.is_error and "precondition failed: the till is closed" in step.completed.observation


@pytest.mark.parametrize("async_guards", [False, True], ids=["sync", "async"])
async def test_guards_may_be_sync_or_async(async_guards: bool) -> None:
    world: dict = {}
    result = await Agent(model=ScriptedModel(SCRIPT), tools=[make(world, async_guards=async_guards)]).run(
        "g", run_id="r", store=MemoryStore())
    assert result.reason == "final_answer" and world["paid"] == 5


async def test_a_raising_precondition_fails_closed() -> None:
    world = {"pre_raises": True}
    store = MemoryStore()
    await Agent(model=ScriptedModel(SCRIPT), tools=[make(world)]).run("g", run_id="r", store=store)
    e = classify(await store.read_log("r")).execution("s1-a1")
    assert "paid" not in world and "RuntimeError: no connection" in e.precondition.reason


async def test_a_raising_verification_alerts_and_the_undo_runs_once() -> None:
    world = {"verify_raises": True}
    alerts: list = []

    async def page(event):  # an async callback is awaited
        alerts.append(event)

    store = MemoryStore()
    result = await Agent(model=ScriptedModel(SCRIPT), tools=[make(world)], on_alert=page).run(
        "g", run_id="r", store=store)
    assert result.reason == "final_answer"
    assert world["paid"] == 0 and len(world["undone"]) == 1
    assert world["undone"][0] == world["keys"][0] + "-rollback"
    [event] = alerts
    assert event["event"] == "verification_failed" and "read-back failed" in event["reason"]
    assert event["idempotency_key"] == world["keys"][0] and event["rollback"] == "undo"


@pytest.mark.parametrize("rollback", [None, "alert"], ids=["no-rollback", "kind-alert"])
async def test_an_alert_without_an_undo_stops_until_an_operator_settles_it(rollback) -> None:
    world: dict = {}
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[make(world, rollback=rollback, verify_ok=False)])
    store = MemoryStore()
    with pytest.raises(AlertError, match="the ledger disagrees"):
        await agent.run("g", run_id="r", store=store)
    report = await inspect_run(store, "r")
    assert report.status == "needs_operator"
    assert [(w["id"], w["kind"]) for w in report.waiting] == [("s1-a1", "alert")]
    with pytest.raises(AlertError):  # resuming does not get past it
        await agent.run(run_id="r", store=store)
    await mark_resolved(store, "r", "s1-a1", executed=False, reason="refunded by hand")
    result = await agent.run(run_id="r", store=store)
    assert result.reason == "final_answer" and world["paid"] == 5  # never run again
    step = classify(await store.read_log("r")).steps[0]
    assert "did not take effect" in step.completed.observation and "refunded by hand" in step.completed.observation


async def test_an_unsettled_alert_is_told_again_by_a_later_process() -> None:
    alerts: list = []
    pay = make({}, rollback="alert", verify_ok=False)
    store = MemoryStore()
    with pytest.raises(AlertError):
        await Agent(model=ScriptedModel(SCRIPT), tools=[pay], on_alert=alerts.append).run("g", run_id="r", store=store)
    with pytest.raises(AlertError):  # a new process: it cannot know the first one's call got through
        await Agent(model=ScriptedModel(SCRIPT), tools=[pay], on_alert=alerts.append).run(run_id="r", store=store)
    assert [a["redelivered"] for a in alerts] == [False, True]
    assert alerts[0]["idempotency_key"] == alerts[1]["idempotency_key"]


async def test_a_failed_rollback_alerts_again_and_stops() -> None:
    world = {"undo_raises": True}
    alerts: list = []
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[make(world, verify_ok=False)], on_alert=alerts.append)
    store = MemoryStore()
    with pytest.raises(AlertError):
        await agent.run("g", run_id="r", store=store)
    assert [a["event"] for a in alerts] == ["verification_failed", "rollback_failed"]
    report = await inspect_run(store, "r")
    assert report.waiting[0]["kind"] == "alert" and "rollback failed" in report.waiting[0]["reason"]
    await mark_resolved(store, "r", "s1-a1", executed=True, observation="paid, and it stays", reason="accepted")
    assert (await agent.run(run_id="r", store=store)).reason == "final_answer"


async def test_an_unknown_rollback_is_settled_by_its_own_id() -> None:
    world: dict = {}
    store = MemoryStore()
    pay = make(world, verify_ok=False)
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[pay])
    await agent.run("g", run_id="r", store=store)
    log = await store.read_log("r")
    cut = next(i for i, r in enumerate(log) if getattr(r, "kind", None) == "rollback") + 1
    crashed = MemoryStore()  # the same run, as a crash inside the rollback left it
    await crashed.write_run_started(log[0])
    for r in log[1:cut]:
        await getattr(crashed, f"write_{r.TAG}")("r", r)
    with pytest.raises(NeedsOperatorError) as stop:
        await agent.run(run_id="r", store=crashed)
    assert not isinstance(stop.value, AlertError)
    with pytest.raises(ResolutionError, match="settle its unknown rollback s1-r1"):
        await mark_resolved(crashed, "r", "s1-a1", executed=False)
    await mark_resolved(crashed, "r", "s1-r1", executed=False, reason="the refund is not in the ledger")
    undone_before = len(world["undone"])
    assert (await agent.run(run_id="r", store=crashed)).reason == "final_answer"
    assert len(world["undone"]) == undone_before + 1  # run again only because an operator said so
    assert classify(await crashed.read_log("r")).execution("s1-a1").state == "rolled_back"


@pytest.mark.parametrize(
    ("found", "expect"),
    [
        (lambda args, ctx: unknown("the bank is down"), "the bank is down"),
        (lambda args, ctx: 42, "reconcile returned int"),
        (lambda args, ctx: 1 / 0, "ZeroDivisionError"),
    ],
    ids=["unknown", "wrong-type", "raises"],
)
async def test_reconcile_that_cannot_tell_stops_for_an_operator(found, expect) -> None:
    world: dict = {}
    store = MemoryStore()
    pay = make(world, reconcile=found)
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[pay])
    await _crash_after_precondition(agent, store)
    with pytest.raises(NeedsOperatorError):
        await agent.run(run_id="r", store=store)
    report = await inspect_run(store, "r")
    assert report.waiting[0]["kind"] == "unknown" and expect in report.waiting[0]["reason"]
    with pytest.raises(NeedsOperatorError):  # recorded: resume does not ask the world again
        await agent.run(run_id="r", store=store)


async def test_reconcile_executed_is_verified_and_not_executed_reruns() -> None:
    world: dict = {}
    store = MemoryStore()
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[make(world, reconcile=lambda a, c: executed("paid 5"))])
    await _crash_after_precondition(agent, store)
    paid = world["paid"]  # (the scratch run that built the crashed log paid once)
    assert (await agent.run(run_id="r", store=store)).reason == "final_answer"
    rec = classify(await store.read_log("r"))
    assert rec.execution("s1-a1").verification.passed and rec.resolutions[0].source == "reconcile"
    assert world["paid"] == paid  # settled by asking, not by paying again

    store2 = MemoryStore()
    agent2 = Agent(model=ScriptedModel(SCRIPT), tools=[make(world, reconcile=lambda a, c: not_executed())])
    await _crash_after_precondition(agent2, store2)
    paid = world["paid"]
    assert (await agent2.run(run_id="r", store=store2)).reason == "final_answer"
    assert world["paid"] == paid + 5 and [e.state for e in classify(await store2.read_log("r")).steps[0].actions] == [
        "resolved", "done"]


async def _crash_after_precondition(agent: Agent, store: MemoryStore) -> None:
    """Leave run r as a SIGKILL right after the passed precondition would (the tool never returned)."""
    scratch = MemoryStore()
    try:
        await agent.run("g", run_id="r", store=scratch)
    except NeedsOperatorError:
        pass
    log = await scratch.read_log("r")
    cut = next(i for i, r in enumerate(log) if r.TAG == "guard_check") + 1
    await store.write_run_started(log[0])
    for r in log[1:cut]:
        await getattr(store, f"write_{r.TAG}")("r", r)


async def test_resume_refuses_an_agent_whose_guards_changed() -> None:
    world: dict = {}
    store = MemoryStore()
    await _crash_after_precondition(Agent(model=ScriptedModel(SCRIPT), tools=[make(world)]), store)
    bare = make(world, rollback=None)
    with pytest.raises(RunMismatchError, match="guards of tool 'pay'"):
        await Agent(model=ScriptedModel(SCRIPT), tools=[bare]).run(run_id="r", store=store)


async def test_a_store_without_the_1_1_writes_serves_unguarded_agents_and_refuses_guarded_ones() -> None:
    class OldStore(MemoryStore):
        capabilities = dataclasses.replace(MemoryStore.capabilities, writes=frozenset())
        write_guard_check = None  # type: ignore[assignment]
        write_action_result = None  # type: ignore[assignment]

    world: dict = {}
    with pytest.raises(StoreError, match="lacks write_guard_check"):
        await Agent(model=ScriptedModel(SCRIPT), tools=[make(world)]).run("g", run_id="r", store=OldStore())

    @tool
    def pay(amount: int) -> str:
        return "ok"

    assert (await Agent(model=ScriptedModel(SCRIPT), tools=[pay]).run("g", run_id="r2", store=OldStore())).reason \
        == "final_answer"


def test_an_irreversible_tool_cannot_declare_an_undo() -> None:
    @tool(irreversible=True)
    def send(text: str) -> str:
        return text

    with pytest.raises(ValueError, match="irreversible"):
        send.rollback(kind="undo")
    send.rollback(kind="alert")(lambda args, result, ctx: None)
    assert send.guard_config()["irreversible"] is True


async def test_the_rehearsal_helper_finds_a_rollback_that_does_not_undo() -> None:
    world: dict = {}
    good = await rehearse_rollback(make(world), {"amount": 5}, break_effect=lambda: None)
    assert not good.rolled_back  # verify passed: nothing to roll back, and the rehearsal says so
    bad = await rehearse_rollback(make(world, verify_ok=False), {"amount": 5}, break_effect=lambda: None)
    assert bad.rolled_back and bad.alerts[0]["event"] == "verification_failed"
    stuck = await rehearse_rollback(make({"undo_raises": True}, verify_ok=False), {"amount": 5},
                                    break_effect=lambda: None)
    assert not stuck.rolled_back and isinstance(stuck.stopped, AlertError)


async def test_a_cancelled_run_waits_for_its_sync_rollback_and_records_it() -> None:
    import asyncio
    import threading

    started, release = threading.Event(), threading.Event()

    @tool
    def pay(amount: int) -> str:
        return "paid"

    pay.verify(lambda args, result, ctx: "wrong")

    @pay.rollback(kind="undo")
    def _undo(args, result, ctx):
        started.set()
        release.wait(5)
        return "undone"

    store = MemoryStore()
    task = asyncio.ensure_future(Agent(model=ScriptedModel(SCRIPT), tools=[pay]).run("g", run_id="r", store=store))
    await asyncio.to_thread(started.wait, 5)
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done()  # the rollback's thread still runs: the run is held
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    rollback = classify(await store.read_log("r")).execution("s1-r1")
    assert rollback.state == "done" and rollback.returned.observation == "undone"
