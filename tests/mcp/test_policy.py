"""Policies from annotations, trust explicit: what each declaration makes of a listed tool (no server needed)."""

from __future__ import annotations

import pytest
from mcp_types import Tool as Listed, ToolAnnotations

from polyloop.mcp import MCPServer, MCPTool, policy_of

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}, "count": {"type": "integer"}},
          "required": ["path"]}


def _listed(name="t", **hints) -> Listed:
    return Listed(name=name, description="d", input_schema=SCHEMA,
                  annotations=ToolAnnotations(**hints) if hints else None)


def _tool(listed: Listed, **server) -> MCPTool:
    return MCPTool(MCPServer("srv", command="never-started", **server), listed)


@pytest.mark.parametrize("hints", [{}, {"read_only_hint": True}, {"idempotent_hint": True, "destructive_hint": False}])
def test_an_untrusted_server_gets_never_whatever_it_claims(hints):
    t = _tool(_listed(**hints))
    assert (t.replay, t.approval) == ("never", None)
    assert t.origin["policy"] == "untrusted" and t.origin["trusted"] is False


@pytest.mark.parametrize("hints", [{}, {"read_only_hint": True}, {"destructive_hint": False}])
def test_approve_destructive_on_an_untrusted_server_makes_every_tool_wait(hints):
    # No claim of an untrusted server counts: each of its tools is destructive (the spec's default),
    # so asking for approval of destructive tools is never silently a no-op there.
    t = _tool(_listed(**hints), approve_destructive=True)
    assert (t.replay, t.approval) == ("never", "required")
    assert t.origin["policy"] == "untrusted"


@pytest.mark.parametrize("hints, replay, approval", [
    ({"read_only_hint": True}, "safe", None),
    ({"idempotent_hint": True, "destructive_hint": False}, "safe", None),
    ({"idempotent_hint": True}, "never", "required"),  # destructive is the default
    ({"destructive_hint": True}, "never", "required"),
    ({}, "never", "required"),  # no annotations: destructive by default
    ({"destructive_hint": False}, "never", None),  # additive, not idempotent
])
def test_a_trusted_server_gets_its_annotations_policy(hints, replay, approval):
    t = _tool(_listed(**hints), trust=True, approve_destructive=True)
    assert (t.replay, t.approval) == (replay, approval)
    assert t.origin["policy"] == "annotations"
    assert _tool(_listed(**hints), trust=True).approval is None  # approval only when asked for


def test_an_override_always_wins_and_says_so():
    listed = _listed("rm", read_only_hint=True)
    over = {"rm": {"replay": "never", "approval": "required", "max_failures": 2}}
    for trust in (True, False):
        t = _tool(listed, trust=trust, overrides=over)
        assert (t.replay, t.approval, t.max_failures) == ("never", "required", 2)
        assert t.origin["policy"] == "override"
    assert _tool(listed, overrides={"rm": {"replay": "safe"}}).replay == "safe"  # untrusted, said by the agent


def test_the_origin_records_the_annotations_as_listed():
    t = _tool(_listed(read_only_hint=True, open_world_hint=False), trust=True)
    assert t.origin["annotations"] == {"readOnlyHint": True, "openWorldHint": False}
    assert t.origin["server"] == "srv" and t.origin["tool"] == "t"


def test_an_idempotency_key_argument_is_filled_by_polyloop_and_hidden_from_the_model():
    schema = {"type": "object", "properties": {"k": {"type": "string"}, "idempotency_key": {"type": "string"}},
              "required": ["k", "idempotency_key"]}
    t = MCPTool(MCPServer("srv", command="x"), Listed(name="put", input_schema=schema))
    assert t.key_parameter == "idempotency_key"
    assert t.parameters["required"] == ["k"] and "idempotency_key" not in t.parameters["properties"]
    assert schema["required"] == ["k", "idempotency_key"]  # the listing itself is untouched


def test_arguments_are_checked_against_the_input_schema_in_one_line():
    t = _tool(_listed())
    assert t.check_args({"path": "a", "count": 2}) is None
    bad = t.check_args({"count": "ten"})
    assert bad is not None and bad.startswith("invalid arguments for tool 't': ")
    assert "count: 'ten' is not of type 'integer'" in bad and "'path' is a required property" in bad
    assert "must be a JSON object, not an array" in (t.check_args([1]) or "")


def test_bad_declarations_are_refused():
    with pytest.raises(ValueError, match="exactly one of command"):
        MCPServer("s")
    with pytest.raises(ValueError, match="exactly one of command"):
        MCPServer("s", command="a", url="http://x")
    with pytest.raises(ValueError, match="unknown keys"):
        MCPServer("s", command="a", overrides={"t": {"replay": "safe", "colour": "red"}})
    with pytest.raises(TypeError):
        MCPServer("s", command="a", trust="yes")  # type: ignore[arg-type]
    assert policy_of(None, trusted=True) == ("never", None, "trusted server, no destructiveHint: destructive by default")


@pytest.mark.parametrize("override, said", [
    ({"replay": "sometimes"}, "replay must be 'safe' or 'never', not 'sometimes'"),
    ({"approval": "maybe"}, "approval must be 'required', a predicate on the arguments or None, not 'maybe'"),
    ({"max_failures": "x"}, "max_failures must be a positive whole number or None, not 'x'"),
    ({"max_failures": 0}, "max_failures must be a positive whole number or None, not 0"),
    ({"concurrent": "no"}, "concurrent must be True or False, not 'no'"),
])
def test_an_override_the_tool_could_not_take_is_refused_when_the_server_is_declared(override, said):
    # Not when a run lists the tools: by then an approval of "maybe" was taken for "required", and a
    # max_failures of "x" was written in run_started, a log that then read as corrupt.
    with pytest.raises(ValueError, match=r"MCP server 's': override of 't': ") as caught:
        MCPServer("s", command="never-started", overrides={"t": override})
    assert said in str(caught.value)
    assert _tool(_listed(), overrides={"t": {"approval": lambda args: True, "max_failures": 1}}).max_failures == 1


def test_only_takes_a_list_of_names_not_one_string():
    # A string is an iterable of letters: only="get_time" was refused at the run's start as "lists no tool '_'".
    with pytest.raises(TypeError, match=r"only= takes a list of tool names, not the string 'get_time'"):
        MCPServer("s", command="never-started", only="get_time")  # type: ignore[arg-type]
    assert MCPServer("s", command="never-started", only=("get_time",)).only == ["get_time"]


@pytest.mark.parametrize("declared, said", [
    ({"command": []}, "the command is empty"),  # was accepted, as a server with neither command nor URL
    ({"url": ""}, "the URL is empty"),
    ({"command": "x", "timeout": 0}, "timeout must be a positive number of seconds or None, not 0"),
    ({"command": "x", "timeout": -1}, "timeout must be a positive number of seconds or None, not -1"),
    ({"command": "x", "start_timeout": None}, "start_timeout must be a positive number of seconds, not None"),
    ({"command": "x", "overrides": {"t": "never"}}, "override of 't' must be a dict such as {'replay': 'never'}"),
])
def test_a_declaration_that_could_not_work_is_refused_in_words(declared, said):
    with pytest.raises(ValueError) as caught:
        MCPServer("s", **declared)
    assert said in str(caught.value)
    with pytest.raises(TypeError, match="prefix must be a string, not None"):
        MCPServer("s", command="x", prefix=None)  # type: ignore[arg-type]
    assert MCPServer("s", command=["x"], timeout=None, start_timeout=0.5).timeout is None


def test_an_override_of_the_failure_budget_alone_leaves_the_policy_where_it_came_from():
    listed = _listed("rm", read_only_hint=True)
    t = _tool(listed, trust=True, overrides={"rm": {"max_failures": 2}})
    assert (t.replay, t.max_failures, t.origin["policy"]) == ("safe", 2, "annotations")
    assert t.origin["why"] == "trusted server, readOnlyHint; the agent's override of ['max_failures']"
    t = _tool(listed, trust=True, overrides={"rm": {"approval": "required"}})
    assert (t.replay, t.approval, t.origin["policy"]) == ("safe", "required", "override")
    assert t.origin["why"] == "the agent's override of ['approval']; replay: trusted server, readOnlyHint"
