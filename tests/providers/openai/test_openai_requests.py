"""What OpenAIModel sends and how it reads answers, over a real socket to the fake server."""

from __future__ import annotations

import json

import pytest

from polyloop import ModelOutput, ToolCall, Usage, tool
from polyloop.openai import MalformedResponseError, OpenAIModel
from polyloop.testing import FakeOpenAIServer, FakeResponse

HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Rename the file ✓"},
    {
        "role": "assistant",
        "content": "Look first.",
        "tool_call": {"id": "s1-m2", "name": "list_files", "args": {}},
    },
    {"role": "tool", "tool_call_id": "s1-m2", "name": "list_files", "content": "a.txt"},
    {
        "role": "assistant",
        "content": None,
        "tool_call": {"id": "s2-m1", "name": "rename", "args": {"old": "a.txt", "new": "ä.txt"}},
    },
    {"role": "tool", "tool_call_id": "s2-m1", "name": "rename", "content": "error: denied"},
]


@tool(replay="safe")
def list_files() -> str:
    """List the files."""
    return ""


@tool
def rename(old: str, new: str, force: bool = False) -> str:
    """Rename a file."""
    return ""


SPECS = [list_files.spec(), rename.spec()]


def _model(server: FakeOpenAIServer, **kw: object) -> OpenAIModel:
    return OpenAIModel(model="fake-model", base_url=server.base_url, api_key="test-key", **kw)  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_history_and_tools_are_sent_as_chat_completions() -> None:
    with FakeOpenAIServer([FakeResponse.final("ok")], api_key="test-key") as server:
        await _model(server).complete(HISTORY, SPECS)
    [request] = server.chat_requests
    assert request.status == 200
    assert request.headers["authorization"] == "Bearer test-key"
    assert request.body["model"] == "fake-model"
    assert request.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Rename the file ✓"},
        {
            "role": "assistant",
            "content": "Look first.",
            "tool_calls": [
                {"id": "s1-m2", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "s1-m2", "content": "a.txt"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "s2-m1",
                    "type": "function",
                    "function": {"name": "rename", "arguments": '{"old": "a.txt", "new": "ä.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "s2-m1", "content": "error: denied"},
    ]
    assert request.tools == [
        {
            "type": "function",
            "function": {
                "name": "list_files",
                "description": "List the files.",
                "parameters": {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "rename",
                "description": "Rename a file.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "old": {"type": "string"},
                        "new": {"type": "string"},
                        "force": {"type": "boolean", "default": False},
                    },
                    "required": ["old", "new"],
                    "additionalProperties": False,
                },
            },
        },
    ]


@pytest.mark.asyncio
async def test_no_tools_sends_no_tools_field() -> None:
    with FakeOpenAIServer([FakeResponse.final("ok")]) as server:
        await _model(server).complete([{"role": "user", "content": "hi"}], [])
    assert "tools" not in server.chat_requests[0].body


@pytest.mark.asyncio
async def test_client_retries_are_off() -> None:
    with FakeOpenAIServer([FakeResponse.error(500)]) as server:
        with pytest.raises(Exception):
            await _model(server).complete([{"role": "user", "content": "hi"}], [])
    [request] = server.chat_requests  # one request, not the client's default three
    assert request.headers.get("x-stainless-retry-count", "0") == "0"


@pytest.mark.asyncio
async def test_a_tool_call_is_read_with_text_and_usage() -> None:
    script = [FakeResponse.tool_call("rename", {"old": "a", "new": "b"}, text="Renaming.", usage=(120, 17))]
    with FakeOpenAIServer(script) as server:
        out = await _model(server).complete(HISTORY[:2], SPECS)
    assert out == ModelOutput(
        text="Renaming.", tool_call=ToolCall("rename", {"old": "a", "new": "b"}), usage=Usage(120, 17),
        model="fake-model",  # the answer's `model` (the fake answers with the one asked for)
    )


@pytest.mark.asyncio
async def test_a_final_answer_is_read_as_text() -> None:
    with FakeOpenAIServer([FakeResponse.final("All done.", usage=(50, 3))]) as server:
        out = await _model(server).complete(HISTORY[:2], SPECS)
    assert out == ModelOutput(text="All done.", tool_call=None, usage=Usage(50, 3), model="fake-model")


@pytest.mark.asyncio
async def test_missing_usage_is_none() -> None:
    with FakeOpenAIServer([FakeResponse.final("x", usage=False)]) as server:
        out = await _model(server).complete(HISTORY[:2], SPECS)
    assert out.usage is None


@pytest.mark.asyncio
async def test_every_tool_call_of_an_answer_is_passed_through() -> None:
    reply = FakeResponse.tool_call("list_files", {}, text="Both.", more=[("rename", {"old": "a", "new": "b"})])
    with FakeOpenAIServer([reply]) as server:
        out = await _model(server).complete(HISTORY[:2], SPECS)
    assert out.tool_calls == (ToolCall("list_files", {}), ToolCall("rename", {"old": "a", "new": "b"}))
    assert out.tool_call == ToolCall("list_files", {}) and out.text == "Both."


PARALLEL = [
    {"role": "user", "content": "Look and rename"},
    {
        "role": "assistant",
        "content": None,
        "tool_call": {"id": "s1-a1", "name": "list_files", "args": {}},
        "tool_calls": [
            {"id": "s1-a1", "name": "list_files", "args": {}},
            {"id": "s1-a2", "name": "rename", "args": {"old": "a", "new": "b"}},
        ],
    },
    {"role": "tool", "tool_call_id": "s1-a1", "name": "list_files", "content": "a"},
    {"role": "tool", "tool_call_id": "s1-a2", "name": "rename", "content": "ok"},
]


@pytest.mark.asyncio
async def test_a_turn_with_several_calls_is_one_assistant_message_then_one_result_each() -> None:
    with FakeOpenAIServer([FakeResponse.final("done")]) as server:
        await _model(server).complete(PARALLEL, SPECS)
    sent = server.chat_requests[0].messages
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in sent[1]["tool_calls"]] == [
        ("s1-a1", "list_files", {}),
        ("s1-a2", "rename", {"old": "a", "new": "b"}),
    ]
    assert [m["tool_call_id"] for m in sent[2:]] == ["s1-a1", "s1-a2"]


@pytest.mark.asyncio
async def test_a_call_left_without_a_result_is_refused_as_a_real_server_would() -> None:
    with FakeOpenAIServer([FakeResponse.final("unused")]) as server:
        with pytest.raises(Exception, match="did not have response messages: s1-a2"):
            await _model(server).complete(PARALLEL[:3], SPECS)


@pytest.mark.asyncio
async def test_empty_arguments_mean_no_arguments() -> None:
    with FakeOpenAIServer([FakeResponse.tool_call("list_files", "")]) as server:
        out = await _model(server).complete(HISTORY[:2], SPECS)
    assert out.tool_call == ToolCall("list_files", {})


@pytest.mark.parametrize("raw", ['{"old": "a", ', "[1, 2]", "null", "not json"])
@pytest.mark.asyncio
async def test_unreadable_arguments_are_a_malformed_response(raw: str) -> None:
    with FakeOpenAIServer([FakeResponse.tool_call("rename", raw, usage=(80, 6))]) as server:
        with pytest.raises(MalformedResponseError) as caught:
            await _model(server).complete(HISTORY[:2], SPECS)
    assert caught.value.raw == raw
    assert caught.value.usage == Usage(80, 6)  # paid for, though unusable
    assert "rename" in str(caught.value) and "not a JSON object" in str(caught.value)


@pytest.mark.asyncio
async def test_params_go_with_every_request() -> None:
    with FakeOpenAIServer([FakeResponse.final("x")]) as server:
        await _model(server, params={"temperature": 0, "max_tokens": 64}).complete(HISTORY[:2], [])
    body = server.chat_requests[0].body
    assert (body["temperature"], body["max_tokens"]) == (0, 64)


def test_arguments_round_trip_through_json() -> None:
    model = OpenAIModel(model="m", base_url="http://127.0.0.1:1/v1")
    sent = model.request(HISTORY, SPECS)["messages"][4]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent) == {"old": "a.txt", "new": "ä.txt"}
