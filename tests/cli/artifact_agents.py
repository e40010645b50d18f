"""An agent that keeps intermediate products, for the CLI tests (target `artifact_agents.py:pipeline`).

`POLYLOOP_TEST_DIE_AT_CALL=N` SIGKILLs the process at the agent's N-th model call;
`POLYLOOP_TEST_DIE_IN_SUMMARIZE=1` SIGKILLs it as the `safe` action `summarize` starts
(its intent is durable, its outcome never recorded: the step is interrupted).
"""

from __future__ import annotations

import os
import signal

from polyloop import Agent, ScriptedModel, ToolContext, tool

SCRIPT = [
    {"tool": "extract", "args": {"doc": "contract"}},
    {"tool": "summarize", "args": {}},
    {"final": "done"},
]


@tool(replay="safe")
def extract(doc: str, ctx: ToolContext):
    """Extract a document into a product."""
    return ctx.artifacts.write("extract.json", '{"doc": "%s", "parties": 2}' % doc)


@tool(replay="safe")
async def summarize(ctx: ToolContext) -> str:
    """Summarize the product."""
    if os.environ.get("POLYLOOP_TEST_DIE_IN_SUMMARIZE"):
        os.kill(os.getpid(), signal.SIGKILL)
    data = await ctx.artifacts.aread("extract.json")
    ref = await ctx.artifacts.awrite("summary.txt", b"%d bytes" % len(data))
    return f"summary in {ref.path}"


class Dies:
    def __init__(self, model):
        self.model = model
        self.calls = 0

    async def complete(self, messages, tools):
        self.calls += 1
        if str(self.calls) == os.environ.get("POLYLOOP_TEST_DIE_AT_CALL"):
            os.kill(os.getpid(), signal.SIGKILL)
        return await self.model.complete(messages, tools)


def pipeline() -> Agent:
    return Agent(model=Dies(ScriptedModel(SCRIPT)), tools=[extract, summarize])
