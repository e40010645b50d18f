"""The PostgreSQL worker's metrics: what its events tell, and the queue's depth sampled from its store."""

from __future__ import annotations

import asyncio
import collections
from types import SimpleNamespace

from polyloop.otel import WorkerMetrics
from polyloop.stores import WorkerEvent


def test_events_count_takeovers_fenced_writers_and_claim_latency(sink) -> None:
    metrics = WorkerMetrics(sink.meter_provider)
    worker = SimpleNamespace(claim_seconds=collections.deque([0.25]))
    metrics.on_event(WorkerEvent("claim", "a", 1), worker)
    worker.claim_seconds.append(0.5)
    metrics.on_event(WorkerEvent("takeover", "b", 2), worker)
    metrics.on_event(WorkerEvent("lost", "b", 2, "lease taken over"), worker)
    metrics.on_event(WorkerEvent("finish", "a", 1, "final_answer"), worker)
    points = sink.points()
    assert [p.value for p in points["polyloop.worker.takeovers"]] == [1]
    assert [p.value for p in points["polyloop.worker.fenced_rejections"]] == [1]
    [claims] = points["polyloop.worker.claim.duration"]
    assert (claims.count, claims.sum) == (2, 0.75)


def test_the_queue_depth_is_sampled_from_the_store_until_cancelled(sink) -> None:
    class Store:
        def __init__(self) -> None:
            self.asked = 0

        async def queued(self) -> int:
            self.asked += 1
            if self.asked == 2:
                raise OSError("the database went away")  # the worker reports that; the sampler goes on
            return 7 * self.asked

    async def main() -> Store:
        store = Store()
        task = asyncio.create_task(WorkerMetrics(sink.meter_provider).sample(store, every=0.01))
        while store.asked < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return store

    store = asyncio.run(main())
    assert store.asked == 4  # once more as it was cancelled: the depth the worker leaves behind
    [depth] = sink.points()["polyloop.queue.depth"]
    assert depth.value == 28


def test_a_worker_that_ends_before_the_first_look_has_finished_still_reports_the_depth(sink) -> None:
    class Slow:
        async def queued(self) -> int:
            await asyncio.sleep(0.05)
            return 3

    async def main() -> None:
        task = asyncio.create_task(WorkerMetrics(sink.meter_provider).sample(Slow()))
        await asyncio.sleep(0.01)  # the first look is under way; the worker's run is already over
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    [depth] = sink.points()["polyloop.queue.depth"]
    assert depth.value == 3
