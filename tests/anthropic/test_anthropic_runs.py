"""Whole agent runs on AnthropicModel over a real socket: usage, stop reasons, visible retries, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import pytest

from polyloop import Agent, Intent, JsonlStore, ModelCallError, ModelCallResult, StepCompleted, tool
from polyloop.anthropic import AnthropicModel
from polyloop.testing import FakeAnthropicServer, FakeResponse

KEY = "sk-ant-test"


@tool(replay="safe")
def lookup(city: str) -> str:
    """Look up the weather in a city."""
    return f"{city}: 21°C, sunny"


def _agent(server: FakeAnthropicServer, *, timeout: float = 10.0, **kw: Any) -> Agent:
    model = AnthropicModel(model="fake-model", base_url=server.base_url, api_key=KEY, timeout=timeout)
    kw.setdefault("retry_backoff", 0.01)
    return Agent(model=model, tools=[lookup], system="Answer briefly.", **kw)


async def _results(store: JsonlStore, run_id: str) -> dict[str, ModelCallResult]:
    return {r.result_id: r for r in await store.read_log(run_id) if isinstance(r, ModelCallResult)}


async def test_a_run_records_decisions_stop_reasons_and_the_conversation(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    script = [
        FakeResponse.tool_call("lookup", {"city": "Oslo"}, text="Checking.", usage=(101, 12)),
        FakeResponse.final("It is sunny in Oslo.", usage=(160, 9)),
    ]
    with FakeAnthropicServer(script, api_key=KEY) as server:
        result = await _agent(server).run("weather in Oslo?", run_id="r1", store=store)
    assert (result.reason, result.text, result.steps) == ("final_answer", "It is sunny in Oslo.", 2)
    results = await _results(store, "r1")
    assert results["s1-m1"].output == {
        "text": "Checking.",
        "tool_call": {"name": "lookup", "args": {"city": "Oslo"}},
        "stop_reason": "tool_use",
    }
    assert results["s1-m1"].usage is not None and results["s1-m1"].usage["input_tokens"] == 101
    assert results["s2-m1"].output == {"text": "It is sunny in Oslo.", "tool_call": None, "stop_reason": "end_turn"}
    second = server.message_requests[1].body
    assert second["system"] == "Answer briefly."
    assert second["messages"][1]["content"][1] == {
        "type": "tool_use",
        "id": "s1-m1",
        "name": "lookup",
        "input": {"city": "Oslo"},
    }
    assert second["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "s1-m1", "content": "Oslo: 21°C, sunny"}],
    }


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        (FakeResponse.error(429, "slow down", retry_after=0.05), "rate limited (HTTP 429) by http://127.0.0.1:"),
        (FakeResponse.error(529, "Overloaded"), "overloaded (HTTP 529)"),
        (FakeResponse.error(503), "server error (HTTP 503)"),
    ],
    ids=["429", "529", "503"],
)
async def test_a_transient_error_is_a_visible_failed_attempt_then_a_new_one(
    tmp_path: Path, failure: FakeResponse, words: str
) -> None:
    store = JsonlStore(tmp_path)
    with FakeAnthropicServer([failure, FakeResponse.final("done", usage=(40, 2))]) as server:
        result = await _agent(server).run("go", run_id="r", store=store)
    assert result.text == "done"
    intents = [r.result_id for r in await store.read_log("r") if isinstance(r, Intent)]
    assert intents == ["s1-m1", "s1-m2"]
    results = await _results(store, "r")
    assert results["s1-m1"].output is None and words in (results["s1-m1"].error or "")
    assert results["s1-m2"].output == {"text": "done", "tool_call": None, "stop_reason": "end_turn"}
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
    script = [
        FakeResponse.tool_call("lookup", "Oslo"),
        FakeResponse.tool_call("lookup", {"city": "Oslo"}),
        FakeResponse.final("sunny"),
    ]
    with FakeAnthropicServer(script) as server:
        result = await _agent(server).run("go", run_id="r", store=store)
    assert result.text == "sunny"
    records = list(await store.read_log("r"))
    assert [r.result_id for r in records if isinstance(r, Intent)] == ["s1-m1", "s1-m2", "s1-a1", "s2-m1"]
    error = (await _results(store, "r"))["s1-m1"].error or ""
    assert error.startswith("MalformedResponseError: ") and "'Oslo'" in error
    assert [r.observation for r in records if isinstance(r, StepCompleted)][0] == "Oslo: 21°C, sunny"


async def test_a_permanent_error_stops_the_run_resumable(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    script = [FakeResponse.error(400, "Your credit balance is too low"), FakeResponse.final("after the fix")]
    with FakeAnthropicServer(script) as server:
        with pytest.raises(ModelCallError) as caught:
            await _agent(server).run("go", run_id="r", store=store)
        assert isinstance(caught.value.__cause__, anthropic.BadRequestError)
        assert len(server.message_requests) == 1
        result = await _agent(server).run(run_id="r", store=store)  # the cause fixed: resume
    assert result.text == "after the fix"
    assert [r.result_id for r in await store.read_log("r") if isinstance(r, Intent)] == ["s1-m1", "s1-m2"]
