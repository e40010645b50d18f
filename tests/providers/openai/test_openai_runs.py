"""Whole agent runs on OpenAIModel over a real socket: usage, visible retries, errors, resume."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from polyloop import (
    Agent,
    Intent,
    JsonlStore,
    ModelCallResult,
    ModelUnavailableError,
    RunFinished,
    StepCompleted,
    inspect_run,
    tool,
)
from polyloop.openai import OpenAIModel
from polyloop.testing import FakeOpenAIServer, FakeResponse

KEY = "test-key"


@tool(replay="safe")
def lookup(city: str) -> str:
    """Look up the weather in a city."""
    return f"{city}: 21°C, sunny"


def _agent(server: FakeOpenAIServer, *, api_key: str = KEY, timeout: float = 10.0, **kw: Any) -> Agent:
    model = OpenAIModel(model="fake-model", base_url=server.base_url, api_key=api_key, timeout=timeout)
    kw.setdefault("retry_backoff", 0.01)
    return Agent(model=model, tools=[lookup], system="Answer briefly.", **kw)


async def _log(store: JsonlStore, run_id: str) -> list[Any]:
    return list(await store.read_log(run_id))


def _model_results(records: list[Any]) -> dict[str, ModelCallResult]:
    return {r.result_id: r for r in records if isinstance(r, ModelCallResult)}


@pytest.mark.asyncio
async def test_a_run_records_the_usage_the_server_reports(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    script = [
        FakeResponse.tool_call("lookup", {"city": "Oslo"}, text="Checking.", usage=(101, 12)),
        FakeResponse.final("It is sunny in Oslo.", usage=(160, 9)),
    ]
    with FakeOpenAIServer(script, api_key=KEY) as server:
        result = await _agent(server).run("weather in Oslo?", run_id="r1", store=store)
    assert (result.reason, result.text, result.steps) == ("final_answer", "It is sunny in Oslo.", 2)
    records = await _log(store, "r1")
    results = _model_results(records)
    assert results["s1-m1"].usage == {"input_tokens": 101, "output_tokens": 12}
    assert results["s1-m1"].output == {
        "text": "Checking.",
        "tool_call": {"name": "lookup", "args": {"city": "Oslo"}},
        "model": "fake-model",  # the model the answer names (log format 1.4)
    }
    assert results["s2-m1"].usage == {"input_tokens": 160, "output_tokens": 9}
    step1 = next(r for r in records if isinstance(r, StepCompleted) and r.step == 1)
    assert step1.observation == "Oslo: 21°C, sunny"
    # The second request carries the first decision and its observation, linked by the result id.
    second = server.chat_requests[1].messages
    assert second[2]["tool_calls"][0]["id"] == "s1-m1"
    assert second[3] == {"role": "tool", "tool_call_id": "s1-m1", "content": "Oslo: 21°C, sunny"}
    report = await inspect_run(store, "r1")
    assert report.to_json()["tokens"]["input"] == 261


@pytest.mark.parametrize(
    "failure, words",
    [
        (FakeResponse.error(429, "slow down", retry_after=0), "rate limited (HTTP 429)"),
        (FakeResponse.error(500, "boom"), "server error (HTTP 500)"),
        (FakeResponse.error(503, "overloaded"), "server error (HTTP 503)"),
    ],
    ids=["429", "500", "503"],
)
@pytest.mark.asyncio
async def test_a_transient_error_is_a_visible_failed_attempt_then_a_new_one(
    tmp_path: Path, failure: FakeResponse, words: str
) -> None:
    store = JsonlStore(tmp_path)
    with FakeOpenAIServer([failure, FakeResponse.final("done", usage=(40, 2))]) as server:
        result = await _agent(server).run("go", run_id="r", store=store)
    assert result.text == "done"
    records = await _log(store, "r")
    intents = [r.result_id for r in records if isinstance(r, Intent)]
    assert intents == ["s1-m1", "s1-m2"]
    results = _model_results(records)
    assert results["s1-m1"].output is None
    assert results["s1-m1"].error.startswith("TransientModelError: ") and words in results["s1-m1"].error
    assert results["s1-m2"].output == {"text": "done", "tool_call": None, "model": "fake-model"}
    first, second = server.chat_requests
    assert first.body == second.body  # the retry asks exactly the same question
    assert first.headers.get("x-stainless-retry-count", "0") == "0"
    assert second.headers.get("x-stainless-retry-count", "0") == "0"


@pytest.mark.asyncio
async def test_retry_after_is_carried_on_the_error(tmp_path: Path) -> None:
    from polyloop import TransientModelError

    with FakeOpenAIServer([FakeResponse.error(429, retry_after=7)]) as server:
        model = OpenAIModel(model="m", base_url=server.base_url, api_key=KEY)
        with pytest.raises(TransientModelError) as caught:
            await model.complete([{"role": "user", "content": "x"}], [])
    assert caught.value.retry_after == 7  # type: ignore[attr-defined]
    assert "retry after 7s" in str(caught.value)


@pytest.mark.asyncio
async def test_a_timeout_is_retried_as_a_new_attempt(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    # The slow answer is cut short when the server stops; the client gives up after 0.3 s.
    script = [FakeResponse.final("too late", delay=30), FakeResponse.final("in time")]
    with FakeOpenAIServer(script) as server:
        result = await _agent(server, timeout=0.3).run("go", run_id="r", store=store)
    assert result.text == "in time"
    results = _model_results(await _log(store, "r"))
    assert "timed out" in results["s1-m1"].error
    assert results["s1-m2"].output == {"text": "in time", "tool_call": None, "model": "fake-model"}
    assert len(server.chat_requests) == 2


@pytest.mark.asyncio
async def test_unreachable_server_spends_the_retry_budget_then_stops_the_run_resumable(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAIModel(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, timeout=2)
    store = JsonlStore(tmp_path)
    agent = Agent(model=model, tools=[lookup], max_attempts=3, retry_backoff=0.01)
    with pytest.raises(ModelUnavailableError) as caught:
        await agent.run("go", run_id="r", store=store)
    assert caught.value.attempts == 3 and "cannot connect" in caught.value.error
    records = await _log(store, "r")
    errors = [r.error for r in records if isinstance(r, ModelCallResult)]
    assert len(errors) == 3 and all("cannot connect" in (e or "") for e in errors)
    assert not any(isinstance(r, RunFinished) for r in records)
    assert (await inspect_run(store, "r")).status == "resumable"


@pytest.mark.asyncio
async def test_a_bad_key_ends_the_run_naming_the_providers_error_after_one_request(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    with FakeOpenAIServer([FakeResponse.final("hello")], api_key=KEY) as server:
        result = await _agent(server, api_key="wrong-key").run("go", run_id="r", store=store)
        assert len(server.chat_requests) == 1  # not retried: a new attempt cannot fix a key
    assert result.reason == "error"
    assert "the model call of step 1 failed: authentication failed (HTTP 401)" in (result.error or "")
    report = await inspect_run(store, "r")
    assert report.status == "finished"
    results = _model_results(await _log(store, "r"))
    assert "ModelRefusedError" in (results["s1-m1"].error or "")
    assert results["s1-m1"].transient is None
    assert "wrong-key" not in (results["s1-m1"].error or "")


@pytest.mark.parametrize(
    "failure",
    [
        FakeResponse.error(400, "bad request"),
        FakeResponse.error(404, "no such model", code="model_not_found"),
        FakeResponse.error(429, "You exceeded your current quota", code="insufficient_quota"),
    ],
    ids=["400", "404", "insufficient-quota"],
)
@pytest.mark.asyncio
async def test_permanent_errors_are_not_retried_and_end_the_run(tmp_path: Path, failure: FakeResponse) -> None:
    store = JsonlStore(tmp_path)
    with FakeOpenAIServer([failure, FakeResponse.final("never reached")]) as server:
        result = await _agent(server).run("go", run_id="r", store=store)
        assert len(server.chat_requests) == 1
    assert result.reason == "error"
    assert f"(HTTP {failure.status})" in (result.error or "")
    assert (failure.error_body or {})["message"] in (result.error or "")
    assert (await inspect_run(store, "r")).status == "finished"


@pytest.mark.asyncio
async def test_unreadable_tool_arguments_are_retried_without_an_action(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    script = [
        FakeResponse.tool_call("lookup", '{"city": "Os'),
        FakeResponse.tool_call("lookup", {"city": "Oslo"}),
        FakeResponse.final("sunny"),
    ]
    with FakeOpenAIServer(script) as server:
        result = await _agent(server).run("go", run_id="r", store=store)
    assert result.text == "sunny"
    records = await _log(store, "r")
    results = _model_results(records)
    assert "MalformedResponseError" in (results["s1-m1"].error or "")
    assert '{"city": "Os' in (results["s1-m1"].error or "")
    actions = [r for r in records if isinstance(r, Intent) and r.kind == "action"]
    assert [(a.result_id, a.args) for a in actions] == [("s1-a1", {"city": "Oslo"})]


class _Crash(BaseException):
    """Stands for the process dying: not an Exception, so the loop records nothing."""


class _CrashAfterModelResult(JsonlStore):
    """Dies right after the model result of step `step` is written, before the action intent."""

    def __init__(self, directory: Path, step: int) -> None:
        super().__init__(directory)
        self.step = step

    async def write_model_call_result(self, run_id: str, record: ModelCallResult) -> None:
        await super().write_model_call_result(run_id, record)
        if record.result_id.startswith(f"s{self.step}-"):
            raise _Crash


@pytest.mark.asyncio
async def test_resume_reuses_a_recorded_model_result_without_a_second_request(tmp_path: Path) -> None:
    script = [
        FakeResponse.tool_call("lookup", {"city": "Oslo"}, usage=(90, 10)),
        FakeResponse.final("sunny", usage=(120, 4)),
    ]
    with FakeOpenAIServer(script) as server:
        with pytest.raises(_Crash):
            await _agent(server).run("go", run_id="r", store=_CrashAfterModelResult(tmp_path, 1))
        assert len(server.chat_requests) == 1
        store = JsonlStore(tmp_path)
        result = await _agent(server).run(run_id="r", store=store)
    assert result.text == "sunny"
    assert len(server.chat_requests) == 2  # step 1 was paid for once; only step 2 was asked
    # The resumed request shows the recorded decision, exactly as an uninterrupted run would.
    assert server.chat_requests[1].messages[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"}'
    records = await _log(store, "r")
    assert [r.result_id for r in records if isinstance(r, Intent)] == ["s1-m1", "s1-a1", "s2-m1"]
    assert isinstance(records[-1], RunFinished)


@pytest.mark.asyncio
async def test_a_finished_run_resumes_without_any_request(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    with FakeOpenAIServer([FakeResponse.final("done")]) as server:
        await _agent(server).run("go", run_id="r", store=store)
        again = await _agent(server).run(run_id="r", store=store)
    assert again.text == "done"
    assert len(server.chat_requests) == 1
