"""`timeout=` bounds the whole request: a slow-drip server, cancellation, an answer that breaks off.

The SDKs' own timeout bounds each wait for a byte; a server that sends a valid
answer one byte at a time never trips it. The adapters put a wall-clock
deadline around the whole request: a request that outlives it is a failed
attempt (a `TransientModelError`), and a caller's cancellation is never turned
into one.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
import time
from pathlib import Path

import pytest
from providers import HISTORY, PROVIDERS, Provider, client_connections

from polyloop import Agent, Intent, JsonlStore, ModelCallResult, TransientModelError
from polyloop._run.provider import retry_after
from polyloop.openai import MalformedResponseError
from polyloop.testing import FakeResponse


def _drip(reply: FakeResponse, seconds: float = 0.1) -> FakeResponse:
    return dataclasses.replace(reply, drip=seconds)


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
async def test_a_slow_drip_answer_fails_once_the_timeout_has_passed(provider: Provider) -> None:
    # One byte every 0.1 s: a few hundred bytes would take half a minute, each read well in time.
    with provider.server([_drip(FakeResponse.final("a valid answer, slowly"))]) as server:
        started = time.monotonic()
        with pytest.raises(TransientModelError, match=r"timed out \(timeout=1s\)") as caught:
            await provider.adapter(server, timeout=1).complete(HISTORY, [])
        elapsed = time.monotonic() - started
        assert not isinstance(caught.value, MalformedResponseError)
        assert 0.9 < elapsed < 5
        await asyncio.sleep(0.2)
        assert client_connections(server.port) == 0  # the response was closed, not left dripping


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
async def test_a_timed_out_request_is_a_failed_attempt_then_a_new_one(provider: Provider, tmp_path: Path) -> None:
    store = JsonlStore(tmp_path)
    script = [_drip(FakeResponse.final("too slow")), FakeResponse.final("in time", usage=(5, 1))]
    with provider.server(script) as server:
        agent = Agent(model=provider.adapter(server, timeout=1), tools=[], retry_backoff=0.01)
        started = time.monotonic()
        result = await agent.run("go", run_id="r", store=store)
        assert time.monotonic() - started < 6
    assert result.text == "in time"
    records = list(await store.read_log("r"))
    assert [r.result_id for r in records if isinstance(r, Intent)] == ["s1-m1", "s1-m2"]
    first = next(r for r in records if isinstance(r, ModelCallResult))
    assert first.output is None and "timed out (timeout=1s)" in (first.error or "")


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
async def test_the_callers_cancellation_propagates_and_closes_the_connection(provider: Provider) -> None:
    with provider.server([FakeResponse.final("late", delay=30)]) as server:
        task = asyncio.create_task(provider.adapter(server, timeout=30).complete(HISTORY, []))
        await _until(lambda: client_connections(server.port) == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _until(lambda: client_connections(server.port) == 0)


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
async def test_the_callers_own_deadline_is_not_taken_for_the_models(provider: Provider) -> None:
    # The caller's timeout fires first: it is the caller's TimeoutError, not a failed model attempt.
    with provider.server([FakeResponse.final("late", delay=30)]) as server:
        with pytest.raises(TimeoutError) as caught:
            async with asyncio.timeout(0.3):
                await provider.adapter(server, timeout=30).complete(HISTORY, [])
    assert not isinstance(caught.value, TransientModelError)


@pytest.mark.parametrize("provider", PROVIDERS, ids=str)
async def test_an_answer_that_breaks_off_is_transient(provider: Provider) -> None:
    server = provider.server([_drip(FakeResponse.final("cut short"), 0.05)]).start()
    try:
        task = asyncio.create_task(provider.adapter(server, timeout=30).complete(HISTORY, []))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(server.stop)  # the server hangs up halfway through the body
        with pytest.raises(TransientModelError, match="broke off") as caught:
            await task
        assert not isinstance(caught.value, MalformedResponseError)
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "1e400"}, None),
        ({"retry-after-ms": "nan", "retry-after": "2"}, 2.0),
        ({"retry-after-ms": "inf"}, None),
        ({"retry-after": "Mon, 99 Foo 2020"}, None),
        ({"retry-after": "\x00"}, None),
    ],
    ids=["seconds", "negative", "nan", "inf", "overflow", "ms-nan-falls-back", "ms-inf", "bad-date", "nul"],
)
def test_a_hostile_retry_after_is_no_wait(headers: dict[str, str], wait: float | None) -> None:
    assert retry_after(headers) == wait


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.02)

