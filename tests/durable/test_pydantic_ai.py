"""`polyloop.pydantic_ai`: an existing Pydantic AI agent on a PolyLoop log (no network, and OpenAI over a real socket).

The OpenAI agent is SIGKILLed at the same kill points as the loops of test_loop_kill_points.py: two
by default, every one under the slow marker (CI's `pytest -m slow`, or POLYLOOP_ALL_KILL_POINTS=1).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

if os.environ.get("CI") != "true":
    pytest.importorskip("pydantic_ai")

import loops  # noqa: E402
from worlds import MATRIX, RUN_ID, World, model_window  # noqa: E402

from polyloop import ApprovalRequiredError  # noqa: E402
from polyloop.testing import FakeOpenAIServer, FakeResponse, MemoryStore  # noqa: E402


def test_a_test_model_agent_runs_and_its_finished_run_is_returned_as_recorded():
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from polyloop.pydantic_ai import PolyLoopAgent

    agent = Agent(TestModel())
    ran: list[int] = []

    @agent.tool_plain
    def count(n: int) -> int:
        ran.append(n)
        return n + 1

    durable = PolyLoopAgent(agent, tools={"count": "safe"})

    async def go() -> None:
        store = MemoryStore()
        first = await durable.run("count", run_id="t", store=store)
        assert first.reason == "final_answer" and ran == [0]
        again = await durable.run(run_id="t", store=store)
        assert again.already_finished and again.text == first.text and ran == [0]
        records = [r.TAG for r in await store.read_log("t")]
        assert records.count("model_call_result") == 2 and "action_result" not in records  # one call a step

    asyncio.run(go())


def test_a_deferred_approval_waits_on_the_record_and_polyloop_approve_releases_it(tmp_path, monkeypatch):
    world = World(tmp_path, "approval")
    monkeypatch.setenv("DURABLE_WORLD", str(tmp_path))
    from polyloop.stores import JsonlStore

    with pytest.raises(ApprovalRequiredError) as caught:
        asyncio.run(loops.approval_main(RUN_ID, JsonlStore(world.dir)))
    assert world.ledger("effects.jsonl") == []  # nothing of the call ran
    request = caught.value.requests[0]
    assert (request.tool, request.args) == ("wire", {"amount": 900})
    waiting = world.cli("resume", RUN_ID)
    assert waiting.code == 3 and "polyloop approve" in waiting.stderr
    listed = json.loads(world.cli("ls", "--json").stdout)  # ls sees the loop's run as it sees an Agent's
    assert [(r["run_id"], r["status"], r["waiting_kinds"]) for r in listed] == [(RUN_ID, "needs_operator", ["approval"])]
    assert world.cli("approve", RUN_ID, request.result_id, "--reason", "checked", "--by", "al").code == 0
    done = world.cli("resume", RUN_ID)  # calls approval_main, the recorded entry point
    assert done.code == 0, done.stderr
    assert world.ledger("effects.jsonl") == [{"tool": "wire", "args": {"amount": 900}}]
    assert [e["step"] for e in world.ledger("model.jsonl")] == [1, 2]  # step 1's answer came from the log


def _fake_answer(body: dict[str, Any]) -> FakeResponse:
    answered = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if answered == 0:
        return FakeResponse.tool_call("lookup_bill", {"q": "gas"}, more=[("pay_bill", {"amount": 3})], usage=(10, 5))
    if answered == 1:
        return FakeResponse.tool_call("pay_bill", {"amount": 5}, usage=(20, 5))
    return FakeResponse.final("done", usage=(30, 5))


@pytest.mark.parametrize("point", MATRIX)
def test_an_openai_agent_killed_mid_run_resumes_over_a_real_socket_without_paying_twice(tmp_path, point):
    paid = 3 + (model_window(point) is not None)  # only a call whose answer was not durable is paid again
    with FakeOpenAIServer(responder=_fake_answer) as server:
        world = World(tmp_path, "openai")
        world.env["FAKE_OPENAI_URL"] = server.base_url
        assert world.child(point) == -9
        world.recover()
        assert len(server.chat_requests) == paid, (point, len(server.chat_requests))
    doc = json.loads(world.cli("inspect", RUN_ID, "--json").stdout)
    assert (doc["status"], doc["result"]) == ("finished", "done"), doc
    effects = world.ledger("effects.jsonl")
    for amount in (3, 5):
        assert sum(e["args"] == {"amount": amount} for e in effects) == 1, effects


def test_a_conditional_approval_is_a_policy_predicate_and_only_the_calls_it_picks_wait():
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from polyloop import approve
    from polyloop.durable import ToolPolicy
    from polyloop.pydantic_ai import PolyLoopAgent

    def model(messages: list[Any], info: Any) -> ModelResponse:
        if any(m.kind == "response" for m in messages):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("wire", {"amount": 50}), ToolCallPart("wire", {"amount": 900})])

    agent = Agent(FunctionModel(model))
    wired: list[int] = []

    @agent.tool_plain
    def wire(amount: int) -> str:
        wired.append(amount)
        return f"wired {amount}"

    durable = PolyLoopAgent(agent, tools={"wire": ToolPolicy(approval=lambda args: args["amount"] > 100)})

    async def go() -> None:
        store = MemoryStore()
        with pytest.raises(ApprovalRequiredError) as caught:
            await durable.run("wire", run_id="w", store=store)
        assert [r.args for r in caught.value.requests] == [{"amount": 900}] and wired == []
        await approve(store, "w", caught.value.requests[0].result_id, reason="checked")
        done = await durable.run(run_id="w", store=store)
        assert (done.reason, wired) == ("final_answer", [50, 900])

    asyncio.run(go())


class _Crash(BaseException):
    """Stands for the process dying inside a tool (the run keeps what is durable)."""


def test_a_streamed_request_is_a_durable_model_call_and_its_events_reach_the_handler():
    from pydantic_ai import Agent
    from pydantic_ai.models.function import DeltaToolCall, FunctionModel

    from polyloop.pydantic_ai import PolyLoopAgent

    streamed: list[int] = []

    async def stream(messages: list[Any], info: Any) -> Any:
        step = sum(1 for m in messages if m.kind == "response") + 1
        streamed.append(step)
        if step == 1:
            yield {0: DeltaToolCall(name="pay", json_args='{"amount": 3}')}
        else:
            yield "done"

    agent = Agent(FunctionModel(stream_function=stream))  # no `function`: only a streamed request can answer
    paid: list[int] = []

    @agent.tool_plain
    def pay(amount: int) -> str:
        paid.append(amount)
        if len(paid) == 1:
            raise _Crash
        return "paid"

    seen: list[str] = []

    async def handler(ctx: Any, events: Any) -> None:
        async for event in events:
            seen.append(event.event_kind)

    durable = PolyLoopAgent(agent, tools={"pay": "safe"})

    async def go() -> None:
        store = MemoryStore()
        with pytest.raises(_Crash):
            await durable.run("pay", run_id="s", store=store, agent_event_stream_handler=handler)
        assert streamed == [1] and "part_start" in seen
        seen.clear()
        done = await durable.run(run_id="s", store=store, agent_event_stream_handler=handler)
        assert (done.reason, done.text) == ("final_answer", "done")
        assert streamed == [1, 2]  # step 1's answer came from the log: not streamed (paid) again
        assert paid == [3, 3] and "part_start" in seen  # the safe call replayed; the replayed answer's events shown
        tags = [r.TAG for r in await store.read_log("s")]
        assert tags.count("model_call_result") == 2

    asyncio.run(go())
