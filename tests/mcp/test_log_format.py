"""Log format 1.4: `config.tools[].mcp` is an optional field; logs of 1.3 and older read as before."""

from __future__ import annotations

import asyncio

from polyloop import JsonlStore, RunStarted, ScriptedModel, Agent, classify, tool
from polyloop._log.records import SCHEMA_VERSION

MCP = {"server": "fx", "tool": "write", "trusted": True, "annotations": {"readOnlyHint": True},
       "policy": "annotations", "why": "trusted server, readOnlyHint"}


def test_this_library_writes_1_4():
    assert SCHEMA_VERSION == "1.4"


def test_a_log_with_an_mcp_tool_reads():
    started = RunStarted(run_id="r", goal="g", config={"max_steps": 2, "tools": [
        {"name": "write", "replay": "safe", "mcp": MCP}]})
    assert classify([started]).executions == ()


def test_a_1_3_log_reads_and_resumes(tmp_path):
    @tool(replay="safe")
    def echo(text: str) -> str:
        """Echo."""
        return text

    agent = Agent(model=ScriptedModel([{"tool": "echo", "args": {"text": "a"}}, {"final": "done"}]), tools=[echo])
    store = JsonlStore(tmp_path)
    started = RunStarted(run_id="old", goal="g", config=agent.config(), schema_version="1.3")
    asyncio.run(store.write_run_started(started))
    result = asyncio.run(agent.run(run_id="old", store=store))
    assert result.reason == "final_answer"
    assert '"schema_version":"1.3"' in (tmp_path / "old.jsonl").read_text()
