"""A small Anthropic Messages API server for tests, on 127.0.0.1.

It speaks just enough of `POST /v1/messages` for the official `anthropic`
package (and so `polyloop.anthropic.AnthropicModel`) to talk to it over a
real socket: scripted answers — text, one or several `tool_use` blocks —
with usage (cache tokens too), scripted failures (429 with `retry-after`,
529 overloaded, 5xx, 401, slow answers for timeouts), and a record of every
request::

    from polyloop.testing import FakeAnthropicServer, FakeResponse

    with FakeAnthropicServer([
        FakeResponse.error(529),
        FakeResponse.tool_call("read_file", {"path": "a"}, more=[("read_file", {"path": "b"})]),
        FakeResponse.final("done"),
    ]) as server:
        model = AnthropicModel(base_url=server.base_url, api_key="test", model="fake")
        ...

Requests are checked the way the real API checks them (a model, `max_tokens`,
messages starting with a user turn, every `tool_use` answered by a
`tool_result` in the very next user turn, tools with an object
`input_schema`) and refused with HTTP 400 otherwise. Standard library only;
bounded like `FakeOpenAIServer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._fake_http import FakeRequest, FakeResponse, FakeServer

__all__ = ["FakeAnthropicServer", "FakeRequest", "FakeResponse"]

_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class FakeAnthropicServer(FakeServer):
    """An Anthropic Messages API server on 127.0.0.1, for tests.

    Serves `POST /v1/messages`; its arguments are `FakeServer`'s, and
    `base_url` (`http://127.0.0.1:PORT`) is what `ANTHROPIC_BASE_URL` should
    be. A reply's `tool_calls` become `tool_use` blocks (ids `toolu_<n>_<i>`)
    after a text block when it has text; `stop_reason` is `tool_use` or
    `end_turn` unless `finish_reason` overrides it; `cache` adds the cache
    token counts to `usage`. The key goes in `x-api-key` (or
    `Authorization: Bearer`, as newer SDK releases send it).
    """

    route = "/v1/messages"
    thread_name = "fake-anthropic"
    auth_message = "invalid x-api-key"

    @property
    def message_requests(self) -> list[FakeRequest]:
        """The Messages API requests received, in order."""
        return self._api_requests()

    def authorized(self, headers: Mapping[str, str]) -> bool:
        key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
        return key == self.api_key

    def error_doc(self, status: int, message: str, type: str | None, code: str | None = None) -> Any:
        kind = type or _KINDS.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def models_doc(self) -> Any:
        return {"data": [{"id": self.model, "type": "model", "display_name": self.model}], "has_more": False}

    def answer(self, body: dict[str, Any], reply: FakeResponse, number: int) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.text is not None:
            content.append({"type": "text", "text": reply.text})
        for i, (name, args) in enumerate(reply.tool_calls):
            # a str is sent as the input as it is: a malformed answer for the client to refuse
            content.append({"type": "tool_use", "id": f"toolu_{number}_{i}", "name": name, "input": args})
        doc: dict[str, Any] = {
            "id": f"msg_fake_{number}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or self.model,
            "content": content,
            "stop_reason": reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn"),
            "stop_sequence": None,
        }
        usage = reply.estimated_usage(body, content)
        if usage is not None:
            doc["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
            if reply.cache is not None:
                doc["usage"]["cache_read_input_tokens"] = reply.cache[0]
                doc["usage"]["cache_creation_input_tokens"] = reply.cache[1]
        return doc

    def check(self, body: dict[str, Any]) -> str | None:
        return _invalid(body)


def _invalid(body: dict[str, Any]) -> str | None:
    """Why the Messages API would refuse this request body, or None."""
    if type(body.get("max_tokens")) is not int or body["max_tokens"] < 1:
        return "max_tokens: Field required"
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        return "system: Input should be a valid string or a list of text blocks"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    pending: list[str] = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if i == 0 and role != "user":
            return "messages: the first message must use the 'user' role"
        blocks = _blocks(m.get("content"))
        if blocks is None:
            return f"messages.{i}.content: a string or a list of content blocks is required"
        problem = _turn(i, role, blocks, pending)
        if problem:
            return problem
    if pending:
        return _unanswered(len(messages) - 1, pending)
    return _tools(body.get("tools"))


def _blocks(content: Any) -> list[dict[str, Any]] | None:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and content and all(isinstance(b, dict) for b in content):
        return content
    return None


def _turn(i: int, role: str, blocks: list[dict[str, Any]], pending: list[str]) -> str | None:
    """Check one message; `pending` holds the tool_use ids the next user turn must answer."""
    answered = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
    if role == "user":
        unexpected = [a for a in answered if a not in pending]
        if unexpected:
            return f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {unexpected}"
        missing = [p for p in pending if p not in answered]
        if missing:
            return _unanswered(i - 1, missing)
        for b in blocks:
            if b.get("type") == "tool_result" and not isinstance(b.get("content", ""), (str, list)):
                return f"messages.{i}.content: tool_result content must be a string or blocks"
        pending.clear()
        return None
    if answered:
        return f"messages.{i}: tool_result blocks belong in a user message"
    if pending:
        return _unanswered(i - 1, pending)
    for b in blocks:
        if b.get("type") == "tool_use":
            if not isinstance(b.get("id"), str) or not isinstance(b.get("name"), str):
                return f"messages.{i}.content: tool_use needs an id and a name"
            if not isinstance(b.get("input"), dict):
                return f"messages.{i}.content: tool_use.input must be an object"
            if b["id"] in pending:
                return f"messages.{i}.content: `tool_use` ids must be unique"
            pending.append(b["id"])
        elif b.get("type") == "text" and not isinstance(b.get("text"), str):
            return f"messages.{i}.content: text blocks need text"
    return None


def _unanswered(i: int, ids: list[str]) -> str:
    return (
        f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks immediately "
        f"after: {', '.join(ids)}. Each `tool_use` block must have a corresponding `tool_result` "
        "block in the next message."
    )


def _tools(tools: Any) -> str | None:
    for i, t in enumerate(tools or []):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
            return f"tools.{i}.name: Field required"
        schema = t.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{i}.input_schema: an object schema with type 'object' is required"
    return None
