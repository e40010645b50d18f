"""Outages of an OpenAI-compatible server over a real socket: ridden out, or stopped resumable (issue 27 §1).

A transient failure (connection refused, 429, 5xx) never ends a run: it is
retried with backoff, honouring Retry-After; past the retry budget the run
stops resumable (`run_stopped`, `ModelUnavailableError`) and a resume
carries on. Runs sharing the endpoint wait together.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from polyloop import (
    Agent,
    JsonlStore,
    ModelCallResult,
    ModelUnavailableError,
    RunFinished,
    RunStopped,
    inspect_run,
)
from polyloop.openai import OpenAIModel
from polyloop.testing import FakeOpenAIServer, FakeResponse

KEY = "test-key"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _agent(base_url: str, **kw: Any) -> Agent:
    model = OpenAIModel(model="fake-model", base_url=base_url, api_key=KEY, timeout=5)
    kw.setdefault("retry_backoff", 0.01)
    return Agent(model=model, **kw)


@pytest.mark.asyncio
async def test_a_server_down_then_back_within_the_budget_is_ridden_out(tmp_path: Path) -> None:
    port = _free_port()
    store = JsonlStore(tmp_path)
    run = asyncio.create_task(_agent(f"http://127.0.0.1:{port}/v1", max_attempts=50, retry_backoff=0.05,
                                     retry_max_delay=0.2).run("go", run_id="r", store=store))
    await asyncio.sleep(0.8)  # the server is down: attempts fail with connection refused
    assert not run.done()
    with FakeOpenAIServer([FakeResponse.final("back")], api_key=KEY, port=port):
        result = await asyncio.wait_for(run, 10)
    assert (result.reason, result.text) == ("final_answer", "back")
    results = [r for r in await store.read_log("r") if isinstance(r, ModelCallResult)]
    assert len(results) >= 3 and all(r.transient for r in results[:-1])
    assert all("cannot connect" in (r.error or "") for r in results[:-1])


@pytest.mark.asyncio
async def test_a_server_down_past_the_budget_stops_resumable_and_resume_carries_on(tmp_path: Path) -> None:
    port = _free_port()
    store = JsonlStore(tmp_path)
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(ModelUnavailableError) as caught:
        await _agent(url, max_attempts=3).run("go", run_id="r", store=store)
    assert (caught.value.attempts, caught.value.step) == (3, 1)
    assert caught.value.endpoint == f"OpenAIModel {url}"
    records = list(await store.read_log("r"))
    assert not any(isinstance(r, RunFinished) for r in records)
    stop = records[-1]
    assert isinstance(stop, RunStopped)
    assert (stop.cause, stop.attempts, stop.failures) == ("model_unavailable", 3, 3)
    assert "cannot connect" in stop.error
    doc = (await inspect_run(store, "r")).to_json()
    assert doc["status"] == "resumable" and doc["waiting"] == []
    assert doc["reason"].startswith(f"stopped on an outage: the model at OpenAIModel {url} was unavailable")
    assert doc["stopped"]["attempts"] == 3 and doc["stopped"]["since"] == stop.since
    with FakeOpenAIServer([FakeResponse.final("back")], api_key=KEY, port=port) as server:
        result = await _agent(url, max_attempts=3).run(run_id="r", store=store)  # a fresh budget
        assert len(server.chat_requests) == 1
    assert result.text == "back"
    assert [r.result_id for r in await store.read_log("r") if isinstance(r, ModelCallResult)][-1] == "s1-m4"


@pytest.mark.asyncio
async def test_429_with_retry_after_is_honoured_and_capped(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    script = [FakeResponse.error(429, "slow down", retry_after=1), FakeResponse.final("done")]
    with FakeOpenAIServer(script, api_key=KEY) as server:
        began = time.monotonic()
        result = await _agent(server.base_url).run("go", run_id="r", store=store)
        waited = time.monotonic() - began
    assert result.text == "done" and waited >= 1.0
    first = next(r for r in await store.read_log("r") if isinstance(r, ModelCallResult))
    assert first.transient and "rate limited (HTTP 429)" in (first.error or "")
    script = [FakeResponse.error(429, "slow down", retry_after=3600), FakeResponse.final("done")]
    with FakeOpenAIServer(script, api_key=KEY) as server:  # an hour is capped at retry_max_delay
        began = time.monotonic()
        result = await _agent(server.base_url, retry_max_delay=0.5).run("go", run_id="r2", store=store)
        assert result.text == "done" and 0.5 <= time.monotonic() - began < 5


@pytest.mark.asyncio
@pytest.mark.parametrize("runs", [50, pytest.param(200, marks=pytest.mark.slow)])
async def test_a_5xx_burst_across_many_runs_waits_together_and_every_run_finishes(tmp_path: Path, runs: int) -> None:
    store = JsonlStore(tmp_path)
    down_until = [0.0]

    def responder(body: Any) -> FakeResponse:
        if time.monotonic() < down_until[0]:
            return FakeResponse.error(503, "upstream restarting")
        return FakeResponse.final("ok")

    with FakeOpenAIServer(responder=responder, api_key=KEY, lifetime=120) as server:
        agent = _agent(server.base_url, max_attempts=30, retry_backoff=0.02, retry_max_delay=0.2)
        down_until[0] = time.monotonic() + 1.5
        results = await asyncio.gather(*(agent.run("go", run_id=f"r{i}", store=store) for i in range(runs)))
        attempts = len(server.chat_requests)
    assert all(r.reason == "final_answer" for r in results)
    # Every run: one answered call; the outage: the calls under way when it began, then one probe at a time.
    print(f"\n{runs} runs through a 1.5 s 5xx burst: {attempts} model calls in all")
    assert attempts <= runs + runs + 30


@pytest.mark.asyncio
async def test_a_bad_key_ends_the_run_at_once_naming_the_providers_error(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    with FakeOpenAIServer([FakeResponse.final("never")], api_key=KEY) as server:
        model = OpenAIModel(model="fake-model", base_url=server.base_url, api_key="wrong", timeout=5)
        result = await Agent(model=model, retry_backoff=0.01).run("go", run_id="r", store=store)
        assert len(server.chat_requests) == 1
    assert result.reason == "error"
    assert (result.error or "").startswith(
        f"the model call of step 1 failed: authentication failed (HTTP 401) by {server.base_url}:")
    doc = (await inspect_run(store, "r")).to_json()
    assert doc["status"] == "finished" and doc["stopped"] is None
