"""Outages of the Anthropic API over a real socket: overloaded (529), refused connections, Retry-After."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from polyloop import Agent, JsonlStore, ModelCallResult, ModelUnavailableError, RunStopped, inspect_run
from polyloop.anthropic import AnthropicModel
from polyloop.testing import FakeAnthropicServer, FakeResponse

KEY = "sk-ant-test"


def _agent(base_url: str, **kw: float) -> Agent:
    model = AnthropicModel(model="claude-fake", base_url=base_url, api_key=KEY, timeout=5.0)
    return Agent(model=model, retry_backoff=0.01, **kw)  # type: ignore[arg-type]


async def test_an_overloaded_api_stops_the_run_resumable_and_resume_finishes_it(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    overloaded = [FakeResponse.error(529, "Overloaded")] * 3
    with FakeAnthropicServer([*overloaded, FakeResponse.final("calm again")], api_key=KEY) as server:
        with pytest.raises(ModelUnavailableError, match="overloaded \\(HTTP 529\\)"):
            await _agent(server.base_url, max_attempts=3).run("go", run_id="r", store=store)
        assert len(server.message_requests) == 3
        doc = (await inspect_run(store, "r")).to_json()
        assert doc["status"] == "resumable" and "Overloaded" in doc["reason"]
        result = await _agent(server.base_url, max_attempts=3).run(run_id="r", store=store)
    assert result.text == "calm again"
    records = list(await store.read_log("r"))
    assert sum(isinstance(r, RunStopped) for r in records) == 1
    assert [r.transient for r in records if isinstance(r, ModelCallResult)] == [True, True, True, None]


async def test_connection_refused_then_back_on_the_same_port(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = JsonlStore(tmp_path)
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(ModelUnavailableError, match="cannot connect"):
        await _agent(url, max_attempts=2).run("go", run_id="r", store=store)
    with FakeAnthropicServer([FakeResponse.final("up")], api_key=KEY, port=port):
        result = await _agent(url, max_attempts=2).run(run_id="r", store=store)
    assert result.text == "up"


async def test_overloaded_with_retry_after_waits_as_asked(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    script = [FakeResponse.error(529, "Overloaded", retry_after=1), FakeResponse.final("done")]
    with FakeAnthropicServer(script, api_key=KEY) as server:
        began = time.monotonic()
        result = await _agent(server.base_url).run("go", run_id="r", store=store)
    assert result.text == "done" and time.monotonic() - began >= 1.0


async def test_a_wrong_key_ends_the_run_naming_the_providers_error(tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    with FakeAnthropicServer([FakeResponse.final("never")], api_key="another-key") as server:
        result = await _agent(server.base_url).run("go", run_id="r", store=store)
        assert len(server.message_requests) == 1
    assert result.reason == "error"
    assert "authentication failed (HTTP 401)" in (result.error or "")
