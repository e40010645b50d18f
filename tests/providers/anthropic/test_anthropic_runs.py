"""Whole agent runs on AnthropicModel over a real socket: usage, stop reasons, visible retries, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import pytest

from polyloop import Agent, Intent, JsonlStore, ModelCallResult, StepCompleted, tool
from polyloop.anthropic import AnthropicModel
from polyloop.testing import FakeAnthropicServer, FakeResponse

KEY = "sk-ant-test"


@tool(replay="safe")
def tide(port: str) -> str:
    """The next high tide at a port."""
    return f"high tide at {port}: 14:05"


def _agent(server: FakeAnthropicServer, **kw: Any) -> Agent:
    return Agent(
        model=AnthropicModel(model="claude-fake", base_url=server.base_url, api_key=KEY, timeout=10.0),
        tools=[tide],
        system="Answer briefly.",
        retry_backoff=0.01,
        **kw,
    )


async def _results(store: JsonlStore, run_id: str) -> dict[str, ModelCallResult]:
    return {r.result_id: r for r in await store.read_log(run_id) if isinstance(r, ModelCallResult)}


async def test_a_run_records_decisions_stop_reasons_and_the_conversation(tmp_path: Path) -> None:
    with FakeAnthropicServer(
        [
            FakeResponse(text="Let me look.", tool_calls=(("tide", {"port": "Bergen"}),), usage=(310, 22)),
            FakeResponse.final("High tide in Bergen is at 14:05.", usage=(350, 11)),
        ],
        api_key=KEY,
    ) as server:
        result = await _agent(server).run("when is high tide in Bergen?", run_id="r1", store=JsonlStore(tmp_path))
    assert [result.reason, result.steps] == ["final_answer", 2]
    results = await _results(JsonlStore(tmp_path), "r1")
    assert results["s1-m1"].output == {
        "text": "Let me look.",
        "tool_call": {"name": "tide", "args": {"port": "Bergen"}},
        "stop_reason": "tool_use",
        "model": "claude-fake",  # the model the answer names (log format 1.4)
    }
    assert results["s1-m1"].usage is not None and results["s1-m1"].usage["input_tokens"] == 310
    assert results["s2-m1"].output["stop_reason"] == "end_turn"  # type: ignore[index]
    second = server.message_requests[1].body
    assert second["system"] == "Answer briefly."
    assert second["messages"][1]["content"][1] == {
        "type": "tool_use",
        "id": "s1-m1",
        "name": "tide",
        "input": {"port": "Bergen"},
    }
    assert second["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "s1-m1", "content": "high tide at Bergen: 14:05"}
    ]


TRANSIENT = {
    "429": (FakeResponse.error(429, "slow down", retry_after=0.05), "rate limited (HTTP 429) by http://127.0.0.1:"),
    "529": (FakeResponse.error(529, "Overloaded"), "overloaded (HTTP 529)"),
    "503": (FakeResponse.error(503), "server error (HTTP 503)"),
}


@pytest.mark.parametrize("status", sorted(TRANSIENT))
async def test_a_transient_error_is_a_visible_failed_attempt_then_a_new_one(tmp_path: Path, status: str) -> None:
    failure, words = TRANSIENT[status]
    store = JsonlStore(tmp_path)
    with FakeAnthropicServer([failure, FakeResponse.final("done", usage=(40, 2))]) as server:
        assert (await _agent(server).run("go", run_id="r", store=store)).text == "done"
    intents = [r.result_id for r in await store.read_log("r") if isinstance(r, Intent)]
    assert intents == ["s1-m1", "s1-m2"]
    results = await _results(store, "r")
    assert results["s1-m1"].output is None and words in (results["s1-m1"].error or "")
    assert results["s1-m2"].output == {"text": "done", "tool_call": None, "stop_reason": "end_turn", "model": "claude-fake"}
    first, second = server.message_requests
    assert first.body == second.body
    assert [r.headers.get("x-stainless-retry-count", "0") for r in (first, second)] == ["0", "0"]


async def test_the_retry_after_the_server_asks_for_is_recorded(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    script = [FakeResponse.error(429, retry_after=0.2), FakeResponse.final("ok")]
    with FakeAnthropicServer(script) as server:
        await _agent(server).run("go", run_id="r", store=store)
    assert "(retry after 0.2s)" in ((await _results(store, "r"))["s1-m1"].error or "")


async def test_a_malformed_answer_is_asked_again_and_no_action_runs(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    # a tool_use whose input is a string, then a good one: the first is never acted on
    answers = [FakeResponse.tool_call("tide", arg) for arg in ("Bergen", {"port": "Bergen"})]
    with FakeAnthropicServer([*answers, FakeResponse.final("14:05")]) as server:
        assert (await _agent(server).run("go", run_id="r", store=store)).text == "14:05"
    records = list(await store.read_log("r"))
    assert [r.result_id for r in records if isinstance(r, Intent)] == ["s1-m1", "s1-m2", "s1-a1", "s2-m1"]
    error = (await _results(store, "r"))["s1-m1"].error or ""
    assert error.startswith("MalformedResponseError: ") and "'Bergen'" in error
    assert [r.observation for r in records if isinstance(r, StepCompleted)][0] == "high tide at Bergen: 14:05"


async def test_a_permanent_error_ends_the_run_naming_the_providers_error(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    script = [FakeResponse.error(400, "Your credit balance is too low"), FakeResponse.final("never reached")]
    with FakeAnthropicServer(script) as server:
        result = await _agent(server).run("go", run_id="r", store=store)
        assert len(server.message_requests) == 1
    assert result.reason == "error"
    assert "bad request (HTTP 400)" in (result.error or "")
    assert "Your credit balance is too low" in (result.error or "")
    assert [r.result_id for r in await store.read_log("r") if isinstance(r, Intent)] == ["s1-m1"]
