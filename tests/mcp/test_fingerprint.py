"""A server's tool list is part of the run's configuration fingerprint (no server needed: listings as data).

The same refusal against a real server, between a real crash and a real resume, is in
test_mcp_kill_points.py (exit code 4, then accepted on the record)."""

from __future__ import annotations

from mcp_types import Tool as Listed, ToolAnnotations

from polyloop import Agent, RunStarted, ScriptedModel
from polyloop._run.tool_source import ToolSource
from polyloop._run.validity import differences, refusal
from polyloop.mcp import MCPServer, MCPTool

SCHEMA = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}


class Listing(ToolSource):
    """A server's listing as data: what `MCPServer.tools` builds from what the server lists."""

    def __init__(self, server: MCPServer, listed: list[Listed]) -> None:
        self.server, self.listed = server, listed

    def tools(self):
        return [MCPTool(self.server, t) for t in self.listed]


def _agent(*listed: Listed, trust: bool = True) -> Agent:
    source = Listing(MCPServer("fx", command="never-started", trust=trust), list(listed))
    return Agent(model=ScriptedModel([{"final": "x"}]), tools=[source])


def _write(**hints) -> Listed:
    return Listed(name="write", input_schema=SCHEMA, annotations=ToolAnnotations(**hints) if hints else None)


def _changes(before: Agent, after: Agent) -> list[str]:
    started = RunStarted(run_id="r", goal="g", config=before.config())
    return [d["name"] for d in differences(started, [], after)]


def test_an_annotation_upgraded_to_read_only_is_a_change_of_that_tool():
    assert _changes(_agent(_write()), _agent(_write())) == []
    assert _changes(_agent(_write()), _agent(_write(read_only_hint=True))) == ["tool write"]


def test_annotations_count_even_for_an_untrusted_server_whose_policy_they_do_not_change():
    assert _changes(_agent(_write(), trust=False), _agent(_write(read_only_hint=True), trust=False)) == ["tool write"]


def test_a_changed_input_schema_a_new_tool_and_a_gone_tool_are_changes():
    other = Listed(name="other", input_schema={"type": "object"})
    wider = Listed(name="write", input_schema={**SCHEMA, "required": []})
    assert _changes(_agent(_write()), _agent(wider)) == ["tool write"]
    assert _changes(_agent(_write()), _agent(_write(), other)) == ["tool other"]
    diffs = differences(RunStarted(run_id="r", goal="g", config=_agent(_write(), other).config()), [], _agent(_write()))
    assert "the agent's configuration lost tool other" in str(refusal("r", diffs))


def test_a_plain_tools_fingerprint_is_what_it_was_before_mcp():
    from polyloop import tool
    from polyloop._run.validity import _digest, config_hashes

    @tool
    def plain(x: int) -> int:
        """x."""
        return x

    agent = Agent(model=ScriptedModel([{"final": "x"}]), tools=[plain])
    old = _digest({"spec": plain.spec(), "replay": "never", "guards": None, "max_failures": None})
    assert config_hashes(agent)["tool plain"] == old
    assert "mcp" not in agent.config()["tools"][0]
