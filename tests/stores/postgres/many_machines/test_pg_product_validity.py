"""The checks of products before a resume (tests/run/test_artifacts.py on JSONL), on PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import uuid

import orjson
import pytest

from polyloop import Agent, ArtifactRef, CheckpointError, ScriptedModel, ToolContext, inspect_run, tool
from polyloop.stores import PostgresStore


class Crash(BaseException):
    """Stands for the process dying."""


def make() -> Agent:
    @tool(replay="never")
    def extract(doc: str, ctx: ToolContext) -> ArtifactRef:
        """Extract a document into a product."""
        return ctx.artifacts.write("extract.json", orjson.dumps({"doc": doc}))

    @tool(replay="safe")
    async def summarize(ctx: ToolContext) -> str:
        """Summarize the product."""
        data = await ctx.artifacts.aread("extract.json")
        ref = await ctx.artifacts.awrite("summary.txt", "short: " + data.decode())
        return f"summary {ref.sha256[:8]}"

    script = [{"tool": "extract", "args": {"doc": "contract"}}, {"tool": "summarize", "args": {}}, {"final": "done"}]
    return Agent(model=ScriptedModel(script), tools=[extract, summarize])


class DiesAt:
    def __init__(self, model, n):
        self.model, self.n, self.calls = model, n, 0

    def describe(self):
        return self.model.describe()

    async def complete(self, messages, tools):
        self.calls += 1
        if self.calls == self.n:
            raise Crash
        return await self.model.complete(messages, tools)


def on(url: str, fn):
    """Run `fn(store)` on a store of its own event loop (a store serves one loop)."""

    async def go():
        async with PostgresStore(url, lease=2) as store:
            return await fn(store)

    return asyncio.run(go())


def test_an_altered_or_missing_product_refuses_the_resume_and_the_recorded_bytes_resume_it(pg_url, pg_conn):
    run_id = f"valid-{uuid.uuid4().hex[:8]}"
    agent = make()
    agent.model = DiesAt(agent.model, 2)
    with pytest.raises(Crash):
        on(pg_url, lambda s: agent.run("go", run_id=run_id, store=s))
    original = on(pg_url, lambda s: s.get_product(run_id, "extract.json"))
    flipped = bytes([original[0] ^ 1]) + original[1:]
    on(pg_url, lambda s: s.put_product(run_id, "extract.json", flipped))
    with pytest.raises(CheckpointError) as err:
        on(pg_url, lambda s: make().run("go", run_id=run_id, store=s))
    assert "altered" in str(err.value) and "--accept-changes" in str(err.value)
    path = f"{run_id}.artifacts/extract.json"
    assert err.value.differences == ({
        "what": "product", "name": "extract.json",
        "recorded": {"path": path, "size": len(original), "sha256": hashlib.sha256(original).hexdigest()},
        "now": {"size": len(flipped), "sha256": hashlib.sha256(flipped).hexdigest()},
    },)
    pg_conn.execute("DELETE FROM polyloop_products WHERE run_id = %s", (run_id,))
    with pytest.raises(CheckpointError, match="is missing"):
        on(pg_url, lambda s: make().run("go", run_id=run_id, store=s))
    report = on(pg_url, lambda s: inspect_run(s, run_id))
    assert [(a.ref.name, a.state) for a in report.artifacts] == [("extract.json", "missing")]
    on(pg_url, lambda s: s.put_product(run_id, "extract.json", original))
    assert on(pg_url, lambda s: make().run("go", run_id=run_id, store=s)).text == "done"
    assert on(pg_url, lambda s: s.get_product(run_id, "summary.txt")) == b"short: " + original
