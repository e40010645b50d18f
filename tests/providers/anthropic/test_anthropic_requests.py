"""What AnthropicModel sends and how it reads answers, over a real socket to the fake Messages API."""

from __future__ import annotations

import re
from typing import Any

import anthropic
import pytest

from polyloop import ModelOutput, ModelRefusedError, TransientModelError, ToolCall, Usage, tool
from polyloop.anthropic import AnthropicModel, MalformedResponseError
from polyloop.testing import FakeAnthropicServer, FakeResponse

KEY = "sk-ant-test"

def _turn(text: str | None, *calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """An assistant history message (see `polyloop.Message`) with the given calls."""
    listed = [{"id": i, "name": n, "args": a} for i, n, a in calls]
    turn: dict[str, Any] = {"role": "assistant", "content": text, "tool_call": listed[0] if listed else None}
    if len(listed) > 1:
        turn["tool_calls"] = listed
    return turn


def _result(call_id: str, name: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Find the report and file it ✓"},
    _turn("Search first.", ("s1-m1", "search", {"query": "report"})),
    _result("s1-m1", "search", "q3.txt"),
    _turn(None, ("s2-a1", "move", {"src": "q3.txt", "dst": "ä/q3.txt"}), ("s2-a2", "search", {"query": "q4"})),
    _result("s2-a1", "move", "error: denied"),
    _result("s2-a2", "search", "none"),
]


@tool(replay="safe")
def search(query: str, limit: int = 5) -> str:
    """Search the files."""
    return ""


@tool
def move(src: str, dst: str) -> str:
    """Move a file."""
    return ""


SPECS = [search.spec(), move.spec()]


def _model(server: FakeAnthropicServer, **kw: Any) -> AnthropicModel:
    return AnthropicModel(model="fake-model", base_url=server.base_url, api_key=KEY, **kw)


async def test_history_and_tools_are_sent_as_messages() -> None:
    with FakeAnthropicServer([FakeResponse.final("ok")], api_key=KEY) as server:
        await _model(server, max_tokens=512, params={"temperature": 0}).complete(HISTORY, SPECS)
    (request,) = server.message_requests
    body = request.body
    assert request.path == "/v1/messages"
    assert (body["model"], body["max_tokens"], body["temperature"], body["system"]) == ("fake-model", 512, 0, "Be brief.")
    assert body["messages"] == [
        {"role": "user", "content": "Find the report and file it ✓"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Search first."},
                {"type": "tool_use", "id": "s1-m1", "name": "search", "input": {"query": "report"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "s1-m1", "content": "q3.txt"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "s2-a1", "name": "move", "input": {"src": "q3.txt", "dst": "ä/q3.txt"}},
                {"type": "tool_use", "id": "s2-a2", "name": "search", "input": {"query": "q4"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "s2-a1", "content": "error: denied"},
                {"type": "tool_result", "tool_use_id": "s2-a2", "content": "none"},
            ],
        },
    ]
    assert body["tools"][1] == {"name": "move", "description": "Move a file.", "input_schema": move.parameters}


async def test_several_tool_uses_text_usage_and_stop_reason_are_read() -> None:
    reply = FakeResponse(
        text="Both at once.",
        tool_calls=(("search", {"query": "x"}), ("move", {"src": "a", "dst": "b"})),
        usage=(120, 30),
        cache=(1000, 24),
    )
    with FakeAnthropicServer([reply]) as server:
        out = await _model(server).complete(HISTORY[:2], SPECS)
    assert out == ModelOutput(
        text="Both at once.",
        tool_calls=(ToolCall("search", {"query": "x"}), ToolCall("move", {"src": "a", "dst": "b"})),
        usage=Usage(120, 30, cache_read_input_tokens=1000, cache_creation_input_tokens=24),
        stop_reason="tool_use",
        model="fake-model",  # the model the answer names (the fake answers with the one asked for)
    )
    assert out.to_json()["stop_reason"] == "tool_use" and len(out.to_json()["tool_calls"]) == 2


async def test_a_final_answer_keeps_its_stop_reason() -> None:
    script = [FakeResponse.final("All done.", usage=(50, 3)), FakeResponse(text="Cut", finish_reason="max_tokens")]
    with FakeAnthropicServer(script) as server:
        done = await _model(server).complete(HISTORY[:2], [])
        cut = await _model(server).complete(HISTORY[:2], [])
    assert done == ModelOutput(text="All done.", usage=Usage(50, 3), stop_reason="end_turn", model="fake-model")
    assert (cut.text, cut.stop_reason) == ("Cut", "max_tokens")
    assert "tools" not in server.message_requests[0].body


async def test_missing_usage_is_none() -> None:
    with FakeAnthropicServer([FakeResponse.final("x", usage=False)]) as server:
        assert (await _model(server).complete(HISTORY[:2], [])).usage is None


@pytest.mark.parametrize("raw", ["not an object", "[1, 2]"])
async def test_a_tool_use_whose_input_is_not_an_object_is_a_malformed_response(raw: str) -> None:
    reply = FakeResponse.tool_call("search", {"query": "x"}, usage=(80, 6), more=[("move", raw)])
    with FakeAnthropicServer([reply]) as server:
        with pytest.raises(MalformedResponseError) as caught:
            await _model(server).complete(HISTORY[:2], SPECS)
    assert caught.value.raw == raw and caught.value.usage == Usage(80, 6)
    assert "'move'" in str(caught.value) and "not a JSON object" in str(caught.value)
    assert isinstance(caught.value, TransientModelError)


@pytest.mark.parametrize(
    ("failure", "words", "wait"),
    [
        (FakeResponse.error(429, "slow down", retry_after=7), "rate limited (HTTP 429)", 7),
        (FakeResponse.error(529, "Overloaded"), "overloaded (HTTP 529)", None),
        (FakeResponse.error(500, "boom"), "server error (HTTP 500)", None),
        (FakeResponse.error(408), "try again (HTTP 408)", None),
    ],
    ids=["429", "529", "500", "408"],
)
async def test_transient_errors(failure: FakeResponse, words: str, wait: float | None) -> None:
    with FakeAnthropicServer([failure]) as server:
        with pytest.raises(TransientModelError) as caught:
            await _model(server).complete(HISTORY[:2], [])
    assert words in str(caught.value) and caught.value.retry_after == wait  # type: ignore[attr-defined]
    assert failure.error_body is not None and failure.error_body["message"] in str(caught.value)
    assert len(server.message_requests) == 1  # the SDK did not retry behind our back


@pytest.mark.parametrize(
    ("failure", "kind"),
    [
        (FakeResponse.error(400, "Your credit balance is too low"), anthropic.BadRequestError),
        (FakeResponse.error(404, "model: fake"), anthropic.NotFoundError),
        (FakeResponse.error(403), anthropic.PermissionDeniedError),
    ],
    ids=["400", "404", "403"],
)
async def test_permanent_errors_are_refusals_caused_by_the_sdks_error(failure: FakeResponse, kind: type) -> None:
    with FakeAnthropicServer([failure]) as server:
        with pytest.raises(ModelRefusedError, match=rf"\(HTTP {failure.status}\)") as caught:
            await _model(server).complete(HISTORY[:2], [])
    assert isinstance(caught.value.__cause__, kind)
    assert caught.value.status == failure.status


async def test_a_wrong_key_is_permanent() -> None:
    with FakeAnthropicServer([FakeResponse.final("x")], api_key="right") as server:
        with pytest.raises(ModelRefusedError, match=r"authentication failed \(HTTP 401\)") as caught:
            await _model(server).complete(HISTORY[:2], [])
    assert isinstance(caught.value.__cause__, anthropic.AuthenticationError)


async def test_connection_refused_and_timeouts_are_transient() -> None:
    server = FakeAnthropicServer().start()
    server.stop()  # nothing listens on the port any more
    with pytest.raises(TransientModelError, match="cannot connect"):
        await _model(server).complete(HISTORY[:2], [])
    with FakeAnthropicServer([FakeResponse.final("late", delay=30)]) as slow:
        with pytest.raises(TransientModelError, match="timed out"):
            await _model(slow, timeout=0.3).complete(HISTORY[:2], [])


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        (HISTORY[:5], "without `tool_result` blocks immediately after: s2-a1, s2-a2"),
        (HISTORY[:6], "without `tool_result` blocks immediately after: s2-a2"),
        ([{"role": "assistant", "content": "hi"}], "first message must use the 'user' role"),
    ],
)
async def test_the_fake_refuses_what_the_real_api_refuses(messages: list[dict[str, Any]], problem: str) -> None:
    with FakeAnthropicServer([FakeResponse.final("unused")]) as server:
        with pytest.raises(ModelRefusedError, match=re.escape(problem)) as caught:
            await _model(server).complete(messages, [])
    assert isinstance(caught.value.__cause__, anthropic.BadRequestError)
    assert server.remaining == 1
