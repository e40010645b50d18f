"""The shared backoff of a model endpoint (polyloop._run.retry): full jitter, Retry-After, the breaker."""

from __future__ import annotations

import asyncio
import email.utils
import time

from polyloop._run.provider import retry_after
from polyloop._run.retry import Endpoint, full_jitter


def test_full_jitter_draws_below_a_doubling_ceiling_and_the_cap() -> None:
    assert full_jitter(1.0, 1, 60, rng=lambda: 1.0) == 1.0
    assert full_jitter(1.0, 4, 60, rng=lambda: 1.0) == 8.0
    assert full_jitter(1.0, 40, 60, rng=lambda: 1.0) == 60.0
    assert full_jitter(1.0, 4, 60, rng=lambda: 0.25) == 2.0
    assert full_jitter(1.0, 10_000, 60, rng=lambda: 0.5) == 30.0  # no overflow


def test_retry_after_reads_seconds_milliseconds_and_an_http_date() -> None:
    assert retry_after({"retry-after": "7"}) == 7.0
    assert retry_after({"retry-after-ms": "1500"}) == 1.5
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= (retry_after({"retry-after": date}) or 0) <= 30
    assert retry_after({"retry-after": "soon"}) is None and retry_after({}) is None


async def test_calls_under_way_when_an_endpoint_fails_count_once_and_then_one_probe_goes_at_a_time() -> None:
    e = Endpoint("OpenAIModel http://x", shared=True)
    levels = [await e.admit(0, 5) for _ in range(3)]
    assert levels == [0, 0, 0]  # healthy: everyone calls
    for level in levels:
        e.failed(level, "HTTP 503", 0.05)
    assert e.failures == 1 and e.total == 3
    waiting = [asyncio.create_task(e.admit(0, 5)) for _ in range(4)]
    await asyncio.sleep(0.2)
    probes = [t for t in waiting if t.done()]
    assert [t.result() for t in probes] == [1]  # half-open: one probe, the others wait for its verdict
    e.succeeded()
    assert await asyncio.gather(*[t for t in waiting if t not in probes]) == [0, 0, 0]


async def test_runs_give_up_together_once_the_endpoint_failed_their_budget_in_a_row() -> None:
    e = Endpoint("OpenAIModel http://x", shared=True)
    started = e.total
    for level in range(3):
        assert await e.admit(started, 3) == level
        e.failed(level, "cannot connect", 0.01)
    assert e.failures == 3
    assert await e.admit(started, 3) is None  # this run waited through 3 failures in a row
    late = asyncio.create_task(e.admit(e.total, 3))  # one that came later waits for the next probe's verdict
    await asyncio.sleep(0.05)
    assert late.done() and late.result() == 3  # it is the probe
    e.failed(3, "cannot connect", 0.01)
    assert await e.admit(started + 3, 3) is None


async def test_a_probe_cancelled_before_its_verdict_lets_another_run_probe() -> None:
    e = Endpoint("OpenAIModel http://x", shared=True)
    e.failed(0, "HTTP 503", 0.01)
    await asyncio.sleep(0.02)
    assert await e.admit(0, 5) == 1  # the probe
    waiting = asyncio.create_task(e.admit(0, 5))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # it waits for the probe's verdict
    e.released()  # the probe was cancelled (Ctrl-C) before an answer
    assert await asyncio.wait_for(waiting, 1) == 1  # the next run probes instead of waiting forever

