"""The batching capability (`write_intents`) as properties any store that offers it must have.

`BatchingCases` is a pytest base class like `polyloop.testing.StoreContract`:
a test class subclasses it and provides a `store_factory` fixture. The
JSONL and memory stores run it in tests/stores/contract, the PostgreSQL store in
tests/stores/postgres.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from polyloop import (
    Agent,
    Intent,
    ModelCallResult,
    RunStarted,
    ScriptedModel,
    StepCompleted,
    tool,
)
from polyloop._log.store_port import BatchingStore
from polyloop.testing._contract import _make


def _fresh(label: str) -> str:
    return f"batch-{label}-{uuid.uuid4().hex[:10]}"


def _logical(records: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(r.TAG, {n: getattr(r, n) for n in r.__slots__ if n != "at"}) for r in records]


def _calls(n: int) -> list[Intent]:
    return [
        Intent(kind="action", step=1, attempt=1, result_id=f"s1-c{k}-a1", tool="peek", args={"n": k},
               replay="safe", idempotency_key=f"key-{k}", call=k)
        for k in range(1, n + 1)
    ]


def _held(store: Any, run_id: str) -> Any:
    lock = getattr(store, "lock", None)
    return lock(run_id) if lock is not None else contextlib.nullcontext()


async def _close(store: Any) -> None:
    close = getattr(store, "aclose", None)
    if close is not None:
        await close()


calls_seen: list[int] = []


@tool(name="peek", replay="safe")
async def peek(n: int) -> str:
    """Look at item n."""
    calls_seen.append(n)
    return f"item {n}"


class BatchingCases:
    """Properties of `write_intents`: order, numbering, and the run loop's use of it."""

    def run(self, coro: Any) -> None:
        asyncio.run(coro)

    def test_the_store_offers_write_intents(self, store_factory: Any) -> None:
        async def go() -> None:
            store = await _make(store_factory)
            try:
                assert isinstance(store, BatchingStore)
            finally:
                await _close(store)

        self.run(go())

    def test_batched_intents_read_back_in_order_between_single_writes(self, store_factory: Any) -> None:
        async def go() -> None:
            store = await _make(store_factory)
            run_id = _fresh("order")
            calls = _calls(3)
            written = [
                RunStarted(run_id=run_id, goal="g"),
                Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
                ModelCallResult(result_id="s1-m1", output={"text": None, "tool_call": None}),
                *calls,
                StepCompleted(step=1, result_id=None, observation=None),
                Intent(kind="model_call", step=2, attempt=1, result_id="s2-m1"),
            ]
            try:
                async with _held(store, run_id):
                    await store.write_run_started(written[0])
                    await store.write_intent(run_id, written[1])
                    await store.write_model_call_result(run_id, written[2])
                    await store.write_intents(run_id, calls)
                    await store.write_step_completed(run_id, written[-2])
                    await store.write_intent(run_id, written[-1])
                # A fresh store instance reads what the first one wrote.
                reader = await _make(store_factory)
                try:
                    assert _logical(await reader.read_log(run_id)) == _logical(written)
                finally:
                    if reader is not store:
                        await _close(reader)
            finally:
                await _close(store)

        self.run(go())

    def test_an_empty_batch_writes_nothing(self, store_factory: Any) -> None:
        async def go() -> None:
            store = await _make(store_factory)
            run_id = _fresh("empty")
            try:
                async with _held(store, run_id):
                    await store.write_run_started(RunStarted(run_id=run_id, goal="g"))
                    await store.write_intents(run_id, [])
                    await store.write_intent(run_id, Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"))
                assert [r.TAG for r in await store.read_log(run_id)] == ["run_started", "intent"]
            finally:
                await _close(store)

        self.run(go())

    def test_a_step_of_several_calls_runs_through_write_intents(self, store_factory: Any) -> None:
        async def go() -> None:
            store = await _make(store_factory)
            run_id = _fresh("loop")
            batches: list[int] = []
            real = store.write_intents

            async def counted(rid: str, records: Any) -> None:
                batches.append(len(records))
                await real(rid, records)

            # A wrapper, not a subclass: the property holds for the store as given.
            class Counting:
                def __getattr__(self, name: str) -> Any:
                    return getattr(store, name)

                write_intents = staticmethod(counted)

            script = [{"calls": [{"tool": "peek", "args": {"n": k}} for k in (1, 2, 3)]}, {"final": "done"}]
            calls_seen.clear()
            try:
                agent = Agent(model=ScriptedModel(script), tools=[peek])
                result = await agent.run("g", run_id=run_id, store=Counting())
                assert result.reason == "final_answer"
                assert batches == [3]
                assert sorted(calls_seen) == [1, 2, 3]
                log = await store.read_log(run_id)
                intents = [r for r in log if r.TAG == "intent" and r.kind == "action"]
                assert [(i.call, i.result_id) for i in intents] == [(k, f"s1-c{k}-a1") for k in (1, 2, 3)]
                assert log[-1].TAG == "run_finished"
            finally:
                await _close(store)

        self.run(go())

