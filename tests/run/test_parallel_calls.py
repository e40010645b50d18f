"""Steps of several tool calls (log format 1.2): records, concurrency, history, resume, rules."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from polyloop import (
    Agent,
    CorruptLogError,
    JsonlStore,
    ModelOutput,
    NeedsOperatorError,
    RecordError,
    RunStarted,
    ScriptedModel,
    ToolCall,
    classify,
    decode_record,
    inspect_run,
    mark_resolved,
    tool,
)
from polyloop.testing import MemoryStore

THREE = {"calls": [
    {"tool": "read", "args": {"path": "a"}},
    {"tool": "write", "args": {"path": "b", "text": "hi"}},
    {"tool": "read", "args": {"path": "c"}},
]}

ran: list[str] = []


@tool(replay="safe")
def read(path: str) -> str:
    """Read a file."""
    ran.append(f"read {path}")
    return f"content of {path}"


@tool
def write(path: str, text: str) -> str:
    """Write a file."""
    ran.append(f"write {path}")
    return f"wrote {len(text)} bytes to {path}"


class Recording(ScriptedModel):
    """A scripted model that keeps the history it was given at every call."""

    def __init__(self, outputs: list[dict[str, Any]]) -> None:
        super().__init__(outputs)
        self.seen: list[list[dict[str, Any]]] = []

    async def complete(self, messages, tools):  # type: ignore[override]
        self.seen.append([dict(m) for m in messages])
        return await super().complete(messages, tools)


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def records_of(store: MemoryStore, run_id: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in store.raw(run_id).splitlines()]


def _cut_after(store: MemoryStore, run_id: str, last: int) -> None:
    """Cut the run's log back to its lines up to index `last`, as a crash right after it would."""
    lines = store.raw(run_id).splitlines(keepends=True)
    store._logs[run_id] = bytearray(b"".join(lines[:last + 1]))


def test_every_call_gets_its_own_intent_before_any_runs_and_the_step_lists_each_outcome() -> None:
    store = MemoryStore()
    agent = Agent(model=ScriptedModel([THREE, {"final": "done"}]), tools=[read, write])
    result = asyncio.run(agent.run("g", run_id="r", store=store))
    assert (result.reason, result.steps) == ("final_answer", 2)
    recs = records_of(store, "r")
    kinds = [(r["record"], r.get("call")) for r in recs[3:10]]
    assert kinds[:3] == [("intent", 1), ("intent", 2), ("intent", 3)]
    assert [k for k, _ in kinds[3:6]] == ["action_result"] * 3
    intents = recs[3:6]
    assert [i["result_id"] for i in intents] == ["s1-c1-a1", "s1-c2-a1", "s1-c3-a1"]
    assert [i["replay"] for i in intents] == ["safe", "never", "safe"]
    assert len({i["idempotency_key"] for i in intents}) == 3
    done = recs[9]
    assert done["record"] == "step_completed" and done["result_id"] is None and done["observation"] is None
    assert done["calls"] == [
        {"result_id": "s1-c1-a1", "tool": "read", "observation": "content of a", "is_error": False},
        {"result_id": "s1-c2-a1", "tool": "write", "observation": "wrote 2 bytes to b", "is_error": False},
        {"result_id": "s1-c3-a1", "tool": "read", "observation": "content of c", "is_error": False},
    ]
    assert sorted(ran) == ["read a", "read c", "write b"]


def test_a_step_with_one_call_is_written_exactly_as_before() -> None:
    store = MemoryStore()
    agent = Agent(model=ScriptedModel([{"tool": "read", "args": {"path": "a"}}, {"final": "x"}]), tools=[read])
    asyncio.run(agent.run("g", run_id="r", store=store))
    recs = records_of(store, "r")
    assert "call" not in recs[3] and recs[3]["result_id"] == "s1-a1"
    assert "calls" not in recs[4] and recs[4]["observation"] == "content of a"


def test_the_history_keeps_the_providers_shape_live_and_after_a_resume() -> None:
    store = MemoryStore()
    model = Recording([THREE, {"final": "done"}])
    asyncio.run(Agent(model=model, tools=[read, write]).run("g", run_id="r", store=store))
    history = model.seen[1]
    turn = history[1]
    assert turn["role"] == "assistant"
    assert [c["id"] for c in turn["tool_calls"]] == ["s1-m1-c1", "s1-m1-c2", "s1-m1-c3"]
    assert turn["tool_call"] == turn["tool_calls"][0]
    results = history[2:5]
    assert [(m["role"], m["tool_call_id"], m["name"]) for m in results] == [
        ("tool", "s1-m1-c1", "read"), ("tool", "s1-m1-c2", "write"), ("tool", "s1-m1-c3", "read")]
    assert results[1]["content"] == "wrote 2 bytes to b"

    # The history rebuilt from the log is the same one.
    from polyloop._recovery.walker import walk
    from polyloop._run.history import rebuild_history

    rebuilt = list(rebuild_history(walk(asyncio.run(store.read_log("r")))).view())
    assert rebuilt[: len(history)] == history


def test_calls_run_concurrently_unless_a_tool_says_it_must_not() -> None:
    both = asyncio.Event()
    arrived: list[str] = []

    @tool(replay="safe")
    async def meet(who: str) -> str:
        """Wait until the other call arrives too (only possible when they run at once)."""
        arrived.append(who)
        if len(arrived) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)
        return f"{who} met"

    script = [{"calls": [{"tool": "meet", "args": {"who": "x"}}, {"tool": "meet", "args": {"who": "y"}}]},
              {"final": "ok"}]
    result = asyncio.run(Agent(model=ScriptedModel(script), tools=[meet]).run("g", store=MemoryStore()))
    assert result.reason == "final_answer"

    order: list[str] = []

    @tool(replay="safe", concurrent=False)
    async def alone(n: int) -> str:
        """Must not overlap with another call."""
        order.append(f"start {n}")
        await asyncio.sleep(0.01)
        order.append(f"end {n}")
        return str(n)

    script = [{"calls": [{"tool": "alone", "args": {"n": 1}}, {"tool": "alone", "args": {"n": 2}}]},
              {"final": "ok"}]
    asyncio.run(Agent(model=ScriptedModel(script), tools=[alone]).run("g", store=MemoryStore()))
    assert order == ["start 1", "end 1", "start 2", "end 2"]


def test_an_unknown_tool_or_bad_arguments_refuse_that_call_only() -> None:
    store = MemoryStore()
    script = [{"calls": [{"tool": "read", "args": {"path": "a"}}, {"tool": "nope", "args": {}},
                         {"tool": "write", "args": {"path": 3}}]}, {"final": "done"}]
    asyncio.run(Agent(model=ScriptedModel(script), tools=[read, write]).run("g", run_id="r", store=store))
    recs = records_of(store, "r")
    assert [r.get("call") for r in recs if r["record"] == "intent" and r["kind"] == "action"] == [1]
    calls = next(r for r in recs if r["record"] == "step_completed")["calls"]
    assert [c["result_id"] for c in calls] == ["s1-c1-a1", None, None]
    assert "unknown tool 'nope'" in calls[1]["observation"] and calls[1]["is_error"]
    assert "text" in calls[2]["observation"] and calls[2]["is_error"]
    assert ran == ["read a"]


def _crashed_log(store: MemoryStore, results: dict[int, str]) -> None:
    """Write a log as a process killed inside step 1 of THREE would leave it: every intent,
    the results of the calls in `results`."""
    out = ModelOutput(tool_calls=[ToolCall(c["tool"], c["args"]) for c in THREE["calls"]]).to_json()
    agent = Agent(model=ScriptedModel([THREE, {"final": "done"}]), tools=[read, write])
    started = orjson.loads(_enc(RunStarted(run_id="r", goal="g", config=agent.config())))
    lines = [started,
             {"record": "intent", "kind": "model_call", "step": 1, "attempt": 1, "result_id": "s1-m1",
              "at": "t"},
             {"record": "model_call_result", "result_id": "s1-m1", "output": out, "at": "t"}]
    from polyloop._log.ids import idempotency_key

    for k, c in enumerate(THREE["calls"], start=1):
        lines.append({"record": "intent", "kind": "action", "step": 1, "attempt": 1, "result_id": f"s1-c{k}-a1",
                      "tool": c["tool"], "args": c["args"], "replay": "never" if c["tool"] == "write" else "safe",
                      "idempotency_key": idempotency_key("r", 1, c["tool"], c["args"], k), "call": k, "at": "t"})
    for k, text in results.items():
        lines.append({"record": "action_result", "result_id": f"s1-c{k}-a1", "observation": text,
                      "is_error": False, "at": "t"})
    store._logs["r"] = bytearray(b"".join(orjson.dumps(x) + b"\n" for x in lines))


def _enc(record: Any) -> bytes:
    from polyloop import encode_record

    return encode_record(record)


def test_on_resume_each_call_is_classified_on_its_own() -> None:
    store = MemoryStore()
    _crashed_log(store, {1: "content of a"})  # call 1 done; call 2 (never) and call 3 (safe) unknown
    agent = Agent(model=ScriptedModel([THREE, {"final": "done"}]), tools=[read, write])

    with pytest.raises(NeedsOperatorError) as stopped:
        asyncio.run(agent.run(run_id="r", store=store))
    assert [e.result_id for e in stopped.value.executions] == ["s1-c2-a1"]
    assert ran == []  # nothing runs while a call waits for a person
    report = asyncio.run(inspect_run(store, "r"))
    assert [(w["id"], w["kind"], w["tool"]) for w in report.waiting] == [("s1-c2-a1", "unknown", "write")]

    asyncio.run(mark_resolved(store, "r", "s1-c2-a1", executed=True, observation="wrote it", reason="seen", by="op"))
    result = asyncio.run(agent.run(run_id="r", store=store))
    assert result.reason == "final_answer"
    assert ran == ["read c"]  # done call reused, settled call reused, unknown safe call replayed
    recs = records_of(store, "r")
    replay = [r for r in recs if r["record"] == "intent" and r.get("attempt") == 2]
    assert [(r["result_id"], r["call"]) for r in replay] == [("s1-c3-a2", 3)]
    calls = next(r for r in recs if r["record"] == "step_completed")["calls"]
    assert [(c["result_id"], c["observation"]) for c in calls] == [
        ("s1-c1-a1", "content of a"), ("s1-c2-a1", "wrote it"), ("s1-c3-a2", "content of c")]


def test_several_unknown_never_calls_are_all_listed_and_settled_each_by_its_id() -> None:
    script = [{"calls": [{"tool": "write", "args": {"path": "x", "text": "1"}},
                         {"tool": "write", "args": {"path": "y", "text": "2"}}]}, {"final": "done"}]
    store = MemoryStore()
    agent = Agent(model=ScriptedModel(script), tools=[write])
    asyncio.run(agent.run("g", run_id="r", store=store))
    lines = store.raw("r").splitlines()
    # Cut the log back to just after the two intents: both outcomes unknown.
    intents = [i for i, line in enumerate(lines) if b'"call"' in line and b'"intent"' in line]
    _cut_after(store, "r", intents[-1])
    ran.clear()
    with pytest.raises(NeedsOperatorError) as stopped:
        asyncio.run(agent.run(run_id="r", store=store))
    assert [e.result_id for e in stopped.value.executions] == ["s1-c1-a1", "s1-c2-a1"]
    report = asyncio.run(inspect_run(store, "r"))
    assert [w["id"] for w in report.waiting] == ["s1-c1-a1", "s1-c2-a1"]
    asyncio.run(mark_resolved(store, "r", "s1-c1-a1", executed=False, reason="not there", by="op"))
    with pytest.raises(NeedsOperatorError) as still:
        asyncio.run(agent.run(run_id="r", store=store))
    assert [e.result_id for e in still.value.executions] == ["s1-c2-a1"]
    asyncio.run(mark_resolved(store, "r", "s1-c2-a1", executed=True, observation="y written", reason="seen", by="op"))
    assert asyncio.run(agent.run(run_id="r", store=store)).reason == "final_answer"
    assert ran == ["write x"]  # x re-ran (not executed), y was reused


def test_the_intents_are_durable_in_the_jsonl_log_before_any_call_runs(tmp_path) -> None:
    seen: list[int] = []

    @tool(replay="safe")
    def peek(n: int) -> str:
        """Count the action intents in the log while running."""
        text = (tmp_path / "r.jsonl").read_bytes()
        seen.append(sum(1 for line in text.splitlines() if b'"kind":"action"' in line))
        return "ok"

    script = [{"calls": [{"tool": "peek", "args": {"n": i}} for i in range(4)]}, {"final": "done"}]

    async def go() -> None:
        async with JsonlStore(tmp_path) as store:
            await Agent(model=ScriptedModel(script), tools=[peek]).run("g", run_id="r", store=store)

    asyncio.run(go())
    assert seen == [4, 4, 4, 4]


def _config_1_1(config: dict[str, Any]) -> dict[str, Any]:
    """A configuration as a 1.1 writer recorded it (no 1.2 fields)."""
    keep = ("max_steps", "system", "model", "tools", "max_attempts")
    tools = [{k: v for k, v in t.items() if k in ("name", "replay", "guards")} for t in config["tools"]]
    return {**{k: v for k, v in config.items() if k in keep}, "tools": tools}


def _log_lines(store: MemoryStore) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in store.raw("r").splitlines()]


def _bad(store_lines: list[dict[str, Any]]):
    with pytest.raises(CorruptLogError) as bad:
        classify([decode_record(x) for x in store_lines], run_id="r")
    return bad.value.problems[0]


def test_rules_33_and_34_refuse_what_a_writer_of_several_calls_never_writes() -> None:
    store = MemoryStore()
    _crashed_log(store, {1: "a", 2: "b", 3: "c"})
    good = _log_lines(store)
    classify([decode_record(x) for x in good], run_id="r")  # the crash left a valid log

    no_number = [dict(x) for x in good]
    del no_number[5]["call"]
    no_number[5]["result_id"] = "s1-a1"
    assert _bad(no_number).rule == 33

    old = [dict(x) for x in good]
    old[0] = {**old[0], "schema_version": "1.1", "config": _config_1_1(old[0]["config"])}
    assert _bad(old).rule in (8, 33)

    beyond = [dict(x) for x in good]
    beyond[3] = {**beyond[3], "call": 4, "result_id": "s1-c4-a1"}
    assert _bad(beyond).rule == 33

    unknown = good[:-1] + [{"record": "step_completed", "step": 1, "result_id": None, "observation": None,
                            "calls": [{"result_id": f"s1-c{k}-a1", "tool": t, "observation": "o", "is_error": False}
                                      for k, t in enumerate(["read", "write", "read"], 1)], "at": "t"}]
    assert _bad(unknown).rule == 34

    single = good + [{"record": "step_completed", "step": 1, "result_id": "s1-c1-a1", "observation": "o", "at": "t"}]
    assert _bad(single).rule == 33


def test_a_call_outcome_without_its_result_id_is_a_malformed_record_not_a_crash() -> None:
    # Found by the reader fuzz (seed 439864173): the walker read entry["result_id"] of an entry
    # that had none. The writer always writes the key (null for a call that never got an intent).
    outcomes = [{"result_id": f"s1-c{k}-a1", "tool": t, "observation": "o", "is_error": False}
                for k, t in enumerate(["read", "write", "read"], 1)]
    outcomes[2]["result_id"] = None  # a call that never got an intent: null, and accepted
    line = {"record": "step_completed", "step": 1, "result_id": None, "observation": None,
            "calls": outcomes, "at": "t"}
    assert decode_record(line).calls == outcomes
    del outcomes[1]["result_id"]
    with pytest.raises(RecordError, match="step_completed.calls"):
        decode_record(line)


def test_a_1_1_log_whose_model_asked_for_two_calls_still_resumes_running_only_the_first() -> None:
    out = ModelOutput(tool_calls=[ToolCall("read", {"path": "a"}), ToolCall("read", {"path": "b"})]).to_json()
    agent = Agent(model=ScriptedModel([THREE, {"final": "done"}]), tools=[read, write])
    started = orjson.loads(_enc(RunStarted(run_id="r", goal="g", config=agent.config())))
    started["schema_version"] = "1.1"
    started["config"] = _config_1_1(started["config"])
    store = MemoryStore()
    store._logs["r"] = bytearray(b"".join(orjson.dumps(x) + b"\n" for x in [
        started,
        {"record": "intent", "kind": "model_call", "step": 1, "attempt": 1, "result_id": "s1-m1", "at": "t"},
        {"record": "model_call_result", "result_id": "s1-m1", "output": out, "at": "t"},
    ]))
    result = asyncio.run(agent.run(run_id="r", store=store))
    assert result.reason == "final_answer"
    assert ran == ["read a"]
    action = [r for r in _log_lines(store) if r["record"] == "intent" and r["kind"] == "action"]
    assert [(a["result_id"], a.get("call")) for a in action] == [("s1-a1", None)]


# -- guards apply per call -------------------------------------------------------------------


def _guarded_pay(world: dict, *, verify_ok: bool = True, rollback: str | None = "undo", reconcile=None):
    @tool
    def pay(amount: int, ctx) -> str:
        """Pay an amount."""
        world.setdefault("paid", []).append(amount)
        return f"paid {amount}"

    @pay.precondition
    def _pre(args, ctx):
        return args["amount"] < 100 or "over the limit"

    @pay.verify
    def _verify(args, result, ctx):
        return verify_ok or "the ledger disagrees"

    if rollback is not None:
        @pay.rollback(kind=rollback)
        def _undo(args, result, ctx):
            world.setdefault("undone", []).append(args["amount"])
            return "refunded"

    if reconcile is not None:
        pay.reconcile(reconcile)
    return pay


def _pays(*amounts: int) -> list[dict[str, Any]]:
    return [{"calls": [{"tool": "pay", "args": {"amount": a}} for a in amounts]}, {"final": "paid"}]


def test_each_call_has_its_own_precondition_verification_and_rollback() -> None:
    world: dict = {}
    store = MemoryStore()
    agent = Agent(model=ScriptedModel(_pays(5, 500, 7)), tools=[_guarded_pay(world, verify_ok=False)])
    result = asyncio.run(agent.run("g", run_id="r", store=store))
    assert result.reason == "final_answer"
    assert sorted(world["paid"]) == [5, 7] and sorted(world["undone"]) == [5, 7]  # 500: precondition failed
    recs = records_of(store, "r")
    rollbacks = [r for r in recs if r["record"] == "intent" and r["kind"] == "rollback"]
    assert sorted((r["result_id"], r["call"]) for r in rollbacks) == [("s1-c1-r1", 1), ("s1-c3-r1", 3)]
    calls = next(r for r in recs if r["record"] == "step_completed")["calls"]
    assert "rolled back" in calls[0]["observation"] and "rolled back" in calls[2]["observation"]
    assert "precondition failed: over the limit" in calls[1]["observation"] and calls[1]["is_error"]
    classify([decode_record(r) for r in recs], run_id="r")


def test_a_failed_verification_without_rollback_alerts_for_that_call_only() -> None:
    from polyloop import AlertError

    world: dict = {}
    store = MemoryStore()
    agent = Agent(model=ScriptedModel(_pays(5, 6)), tools=[_guarded_pay(world, verify_ok=False, rollback=None)])
    with pytest.raises(AlertError) as stopped:
        asyncio.run(agent.run("g", run_id="r", store=store))
    assert sorted(e.result_id for e in stopped.value.executions) == ["s1-c1-a1", "s1-c2-a1"]
    report = asyncio.run(inspect_run(store, "r"))
    assert sorted((w["id"], w["kind"]) for w in report.waiting) == [("s1-c1-a1", "alert"), ("s1-c2-a1", "alert")]
    for rid in ("s1-c1-a1", "s1-c2-a1"):
        asyncio.run(mark_resolved(store, "r", rid, executed=True, observation="it stands", reason="checked", by="op"))
    assert asyncio.run(agent.run(run_id="r", store=store)).reason == "final_answer"
    assert sorted(world["paid"]) == [5, 6]


def test_reconcile_settles_each_unknown_call_by_asking_the_world() -> None:
    from polyloop import executed, not_executed

    world: dict = {"paid": []}

    def ask(args, ctx):
        return executed(f"found {args['amount']}") if args["amount"] in world["paid"] else not_executed()

    store = MemoryStore()
    agent = Agent(model=ScriptedModel(_pays(5, 6)), tools=[_guarded_pay(world, reconcile=ask)])
    asyncio.run(agent.run("g", run_id="r", store=store))
    lines = store.raw("r").splitlines()
    # Cut back to just after both passed preconditions: both calls unknown; one had paid.
    last_pre = max(i for i, line in enumerate(lines) if b'"guard":"precondition"' in line)
    _cut_after(store, "r", last_pre)
    world["paid"] = [5]
    assert asyncio.run(agent.run(run_id="r", store=store)).reason == "final_answer"
    assert world["paid"] == [5, 6]  # 5 reconciled as executed (not paid again), 6 run again
    recs = records_of(store, "r")
    reconciled = [r for r in recs if r["record"] == "resolution" and r["source"] == "reconcile"]
    assert sorted((r["result_id"], r["outcome"]) for r in reconciled) == [
        ("s1-c1-a1", "executed"), ("s1-c2-a1", "not_executed")]


# -- approvals apply per call ------------------------------------------------------------------


def test_calls_that_wait_for_approval_hold_their_step_and_are_answered_by_their_own_ids() -> None:
    from polyloop import ApprovalRequiredError, approve, deny

    @tool(approval="required")
    def send(to: str) -> str:
        """Send a mail."""
        ran.append(f"send {to}")
        return f"sent to {to}"

    script = [{"calls": [{"tool": "read", "args": {"path": "a"}}, {"tool": "send", "args": {"to": "x"}},
                         {"tool": "send", "args": {"to": "y"}}]}, {"final": "done"}]
    store = MemoryStore()
    agent = Agent(model=ScriptedModel(script), tools=[read, send])
    with pytest.raises(ApprovalRequiredError):
        asyncio.run(agent.run("g", run_id="r", store=store))
    assert ran == []  # nothing of the step runs while any of its calls waits, not even the read
    report = asyncio.run(inspect_run(store, "r"))
    assert [(w["id"], w["kind"], w["args"]) for w in report.waiting] == [
        ("s1-c2-a1", "approval", {"to": "x"}), ("s1-c3-a1", "approval", {"to": "y"})]

    asyncio.run(approve(store, "r", "s1-c3-a1", reason="fine", by="boss", args={"to": "z"}))
    with pytest.raises(ApprovalRequiredError) as still:  # call 2 still waits: still nothing runs
        asyncio.run(agent.run(run_id="r", store=store))
    assert [r.result_id for r in still.value.requests] == ["s1-c2-a1"]
    assert ran == []
    asyncio.run(deny(store, "r", "s1-c2-a1", reason="not x", by="boss"))
    assert asyncio.run(agent.run(run_id="r", store=store)).reason == "final_answer"
    assert sorted(ran) == ["read a", "send z"]  # the edited arguments, for the call they were given to
    calls = next(r for r in records_of(store, "r") if r["record"] == "step_completed")["calls"]
    assert [(c["result_id"], c["observation"], c["is_error"]) for c in calls] == [
        ("s1-c1-a1", "content of a", False), (None, "denied by boss: not x", True), ("s1-c3-a1", "sent to z", False)]
    classify([decode_record(r) for r in records_of(store, "r")], run_id="r")
