"""A small OpenAI-compatible chat-completions server for tests, on 127.0.0.1.

It speaks just enough of `POST /v1/chat/completions` for a real client (the
official `openai` package, or `polyloop.openai.OpenAIModel`) to talk to it
over a real socket: scripted answers (tool calls — one or several — and
final answers) with usage, scripted failures (429, 5xx, 401, slow answers
for timeouts), and a record of every request it got so a test can assert on
what was sent::

    from polyloop.testing import FakeOpenAIServer, FakeResponse

    with FakeOpenAIServer([
        FakeResponse.error(429, retry_after=0),
        FakeResponse.tool_call("read_file", {"path": "notes.txt"}),
        FakeResponse.final("done"),
    ]) as server:
        model = OpenAIModel(base_url=server.base_url, api_key="test", model="fake")
        ...
        assert len(server.chat_requests) == 3

The server needs nothing beyond the standard library. It is bounded and
stops by itself: it serves at most `lifetime` seconds, closes every
connection after one answer, gives up on a client that sends nothing for a
few seconds, and cuts scripted delays short when it stops. Use it as a
context manager (or call `stop()`), so its socket and threads are closed.
`tools/fake_model_server.py` in the repository runs one by hand.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ._fake_http import FakeRequest, FakeResponse, FakeServer

__all__ = ["FakeOpenAIServer", "FakeRequest", "FakeResponse"]

_KINDS = {400: "invalid_request_error", 401: "invalid_request_error", 429: "rate_limit_error"}


class FakeOpenAIServer(FakeServer):
    """An OpenAI-compatible chat-completions server on 127.0.0.1, for tests.

    Serves `POST /v1/chat/completions`; its arguments are `FakeServer`'s,
    and `base_url` (`http://127.0.0.1:PORT/v1`) is what `OPENAI_BASE_URL`
    should be. Requests are checked the way a real server checks them (a
    model, a message list, every assistant `tool_calls` id answered by a
    `tool` message before the next turn, every tool a `function` with a
    name) and rejected with HTTP 400 otherwise. The key goes in
    `Authorization: Bearer <key>`.
    """

    route = "/chat/completions"
    base_path = "/v1"
    thread_name = "fake-openai"
    auth_message = "Incorrect API key provided."

    @property
    def chat_requests(self) -> list[FakeRequest]:
        """The chat-completions requests received, in order."""
        return self._api_requests()

    def authorized(self, headers: Mapping[str, str]) -> bool:
        return headers.get("authorization") == f"Bearer {self.api_key}"

    def error_doc(self, status: int, message: str, type: str | None, code: str | None = None) -> Any:
        kind = type or _KINDS.get(status, "server_error")
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def answer(self, body: dict[str, Any], reply: FakeResponse, number: int) -> dict[str, Any]:
        calls = [
            {
                "id": f"call_{number}_{i}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for i, (name, args) in enumerate(reply.tool_calls)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if calls:
            message["tool_calls"] = calls
        doc: dict[str, Any] = {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": 1_700_000_000 + number,
            "model": body.get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.finish_reason or ("tool_calls" if calls else "stop"),
                    "logprobs": None,
                }
            ],
        }
        usage = reply.estimated_usage(body, message)
        if usage is not None:
            prompt, completion = usage
            doc["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        return doc

    def check(self, body: dict[str, Any]) -> str | None:
        return _invalid(body)


def _invalid(body: dict[str, Any]) -> str | None:
    """Why a chat-completions request would be refused by a real server, or None."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    open_ids: set[str] = set()
    pending: list[str] = []  # calls of the last assistant turn not answered yet
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{i}]: unknown role {role!r}"
        if role != "tool" and pending:
            return _unanswered(pending)
        if role == "assistant":
            problem = _assistant(i, m, open_ids)
            if problem:
                return problem
            pending = [c["id"] for c in m.get("tool_calls") or []]
        elif role == "tool":
            if m.get("tool_call_id") not in open_ids:
                return (
                    f"messages[{i}]: messages with role 'tool' must be a response to a "
                    "preceding message with 'tool_calls'"
                )
            if m["tool_call_id"] in pending:
                pending.remove(m["tool_call_id"])
            if not isinstance(m.get("content"), str):
                return f"messages[{i}]: tool content must be a string"
        elif not isinstance(m.get("content"), str):
            return f"messages[{i}]: content must be a string"
    if pending:
        return _unanswered(pending)
    for i, t in enumerate(body.get("tools") or []):
        fn = t.get("function") if isinstance(t, dict) else None
        if t.get("type") != "function" or not isinstance(fn, dict) or not fn.get("name"):
            return f"tools[{i}]: expected {{'type': 'function', 'function': {{'name', ...}}}}"
    return None


def _unanswered(ids: list[str]) -> str:
    return (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(ids)}"
    )


def _assistant(i: int, m: dict[str, Any], open_ids: set[str]) -> str | None:
    ids = []
    for call in m.get("tool_calls") or []:
        fn = call.get("function") or {}
        if call.get("type") != "function" or not isinstance(call.get("id"), str):
            return f"messages[{i}].tool_calls: each call needs an id and type 'function'"
        if not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str):
            return f"messages[{i}].tool_calls: function needs a name and string arguments"
        ids.append(call["id"])
    if len(set(ids)) != len(ids):
        return f"messages[{i}].tool_calls: duplicate tool call ids {ids}"
    open_ids.update(ids)
    if m.get("content") is None and not m.get("tool_calls"):
        return f"messages[{i}]: an assistant message needs content or tool_calls"
    return None
