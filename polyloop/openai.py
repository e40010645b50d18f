"""An OpenAI-compatible chat-completions model: hosted APIs and local servers.

    from polyloop import Agent
    from polyloop.openai import OpenAIModel

    agent = Agent(model=OpenAIModel(), tools=[...])

`OpenAIModel` talks to any server that speaks the chat-completions API with
tool calling — OpenAI itself, other hosted APIs, and local servers such as
vLLM, Ollama or llama.cpp — through the official `openai` package, an
optional extra::

    pip install 'polyloop[openai]'

Configuration comes from the usual environment variables, each overridable
by a keyword argument:

| setting  | keyword    | environment                                  |
|----------|------------|----------------------------------------------|
| base URL | `base_url` | `OPENAI_BASE_URL` (default: OpenAI's API)    |
| API key  | `api_key`  | `OPENAI_API_KEY`                             |
| model    | `model`    | `POLYLOOP_MODEL`, else `OPENAI_MODEL`        |

Every call to the server is one visible attempt in the run's log: the
client's own retries are off, and rate limits, timeouts, connection errors
and 5xx answers raise `polyloop.TransientModelError`, which the run loop
records as a failed attempt and retries as a new attempt after a backoff.
Other API errors (a bad key, a bad request) propagate unchanged: the loop
records the failed attempt and stops the run, resumable once the cause is
fixed.

Importing `polyloop` never imports this module or `openai`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ._run.answer import Fields, MalformedResponseError
from ._log.model_port import Message, ModelOutput, ToolCall, Usage, message_tool_calls
from ._run.provider import HostedModel, import_extra

_openai = import_extra("openai")

__all__ = ["DEFAULT_BASE_URL", "MalformedResponseError", "OpenAIModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""The base URL used when neither `base_url` nor `OPENAI_BASE_URL` is set."""



class OpenAIModel(HostedModel):
    """A `polyloop.Model` backed by an OpenAI-compatible chat-completions server.

    Each `complete` call sends the whole history and the tool specs and
    returns every tool call of the answer (or its text as the final answer),
    with the token usage the server reports.

    Args:
        model: the model name; default `$POLYLOOP_MODEL`, else `$OPENAI_MODEL`.
        base_url: the API's base URL (ending in `/v1` for most servers);
            default `$OPENAI_BASE_URL`, else OpenAI's API.
        api_key: default `$OPENAI_API_KEY`. Local servers usually ignore the
            key, so with a base URL other than OpenAI's and no key set, a
            placeholder is sent.
        timeout: seconds the whole request may take, from connecting to
            the last byte of the answer (a wall-clock deadline, not only the
            wait for each byte); a request that takes longer fails as a
            transient error (a new attempt follows).
        params: further fields sent with every request, such as
            `{"temperature": 0, "max_tokens": 1024, "seed": 7}`.
        client: an `openai.AsyncOpenAI` to reuse (for its connection pool
            or custom HTTP settings). Its own retries are turned off. Without
            one, every call opens a fresh client and closes it afterwards, so
            the model can be used from any event loop.

    Raises:
        ValueError: no model name is configured; no API key is configured
            for OpenAI's own API; or `params` sets a field the adapter owns
            (`model`, `messages`, `tools`, `stream`).
    """

    _kind = "OpenAIModel"
    _model_env = "OPENAI_MODEL"
    _url_env = "OPENAI_BASE_URL"
    _key_env = "OPENAI_API_KEY"
    _default_url = DEFAULT_BASE_URL
    _reserved = frozenset({"model", "messages", "tools", "stream"})

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        params: Mapping[str, Any] | None = None,
        client: Any | None = None,
    ) -> None:
        super().__init__(
            model=model, base_url=base_url, api_key=api_key, timeout=timeout, params=params, client=client
        )

    def describe(self) -> dict[str, Any]:
        """What `run_started` records about the model; never the API key."""
        return self._described()

    def _body(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The chat-completions request body, before `params`.

        History messages are converted to chat-completions messages: an
        assistant turn's tool calls (see `polyloop.Message`) become its
        `tool_calls` list, each with the id the history gives it (the same
        on every resume), and tool turns become `role: "tool"` messages
        answering those ids. Tool specs become `{"type": "function", ...}`.
        """
        body: dict[str, Any] = {"model": self.model, "messages": _chat_messages(messages)}
        if tools:
            body["tools"] = _chat_tools(tools)
        return body

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelOutput:
        """Ask the server for the next decision.

        Returns:
            Every function tool call of the answer, in order (with any text
            beside them), or, when there is no tool call, the text as the
            final answer; with usage (`prompt_tokens` → input,
            `completion_tokens` → output) when the server reports it, and
            the answering `model`.

        Raises:
            TransientModelError: rate limited (429), timed out, could not
                connect, the answer broke off, or a 5xx answer;
                `retry_after` holds the server's `Retry-After` in seconds
                when it sent one. Also `MalformedResponseError` for an
                answer that cannot be read: not a JSON object, or a field
                missing, of the wrong type or out of bounds (see
                `_model_output`).
            openai.APIStatusError: any other error answer (401 bad key, 400
                bad request, 404 unknown model, 429 with `insufficient_quota`);
                retrying would not help, so the run stops resumable.
        """
        body = self.request(messages, tools)
        answer = await self._send(
            _openai,
            _openai.AsyncOpenAI,
            lambda client: client.chat.completions.with_streaming_response.create(**body),
            permanent=_out_of_credit,
        )
        return _model_output(answer)


def _chat_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Convert PolyLoop history messages (see `polyloop.Message`) to chat-completions messages."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "assistant":
            calls = message_tool_calls(m)
            msg: dict[str, Any] = {"role": "assistant", "content": m.get("content")}
            if calls:
                msg["tool_calls"] = [
                    {
                        "id": str(call["id"]),
                        "type": "function",
                        "function": {
                            "name": call["name"],
                            "arguments": json.dumps(call.get("args") or {}, ensure_ascii=False),
                        },
                    }
                    for call in calls
                ]
            elif msg["content"] is None:
                msg["content"] = ""
            out.append(msg)
        elif role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(m["tool_call_id"]),
                    "content": m.get("content") or "",
                }
            )
        else:
            out.append({"role": role, "content": m.get("content") or ""})
    return out


def _chat_tools(specs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Convert tool specs (`{"name", "description", "parameters"}`) to chat-completions tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": s["name"],
                "description": s.get("description") or "",
                "parameters": s.get("parameters") or {"type": "object", "properties": {}},
            },
        }
        for s in specs
    ]


def _model_output(answer: dict[str, Any]) -> ModelOutput:
    """Read a chat-completions answer strictly as a `ModelOutput` (or raise `MalformedResponseError`).

    Required: `model`, a non-empty `choices` list, the first choice's
    `message` and `finish_reason` (null allowed), and each function call's
    `id`, `function.name` and `function.arguments` (a JSON object in a
    string; empty means no arguments). `usage` may be left out, but when
    given it holds both counts. The bounds are `polyloop._run.answer`'s.
    The answer's `model` is kept (`ModelOutput.model`: the log's
    `model_call_result.output.model`).
    """
    fields = Fields()
    usage = fields.object(answer, "usage", "usage", required=False)
    if usage is not None:
        fields.usage = Usage(
            input_tokens=fields.count(usage, "prompt_tokens", "usage.prompt_tokens"),
            output_tokens=fields.count(usage, "completion_tokens", "usage.completion_tokens"),
        )
    model = fields.name(answer, "model", "model")
    choices = fields.items(answer, "choices", "choices")
    if not choices:
        raise fields.fail("choices", "is empty", choices)
    choice = choices[0]
    if not isinstance(choice, dict):
        raise fields.fail("choices[0]", "is not an object", choice)
    fields.name(choice, "finish_reason", "choices[0].finish_reason", nullable=True)
    message = fields.object(choice, "message", "choices[0].message")
    at = "choices[0].message"
    content = fields.text(message, "content", f"{at}.content")
    refusal = fields.text(message, "refusal", f"{at}.refusal")
    listed = fields.items(message, "tool_calls", f"{at}.tool_calls", required=False)
    calls = [_tool_call(fields, call, f"{at}.tool_calls[{i}]") for i, call in enumerate(listed)]
    text = content or refusal
    function_calls = tuple(call for call in calls if call is not None)
    if function_calls:
        return ModelOutput(text=text or None, tool_calls=function_calls, usage=fields.usage, model=model)
    return ModelOutput(text=text or "", usage=fields.usage, model=model)


def _tool_call(fields: Fields, call: Any, at: str) -> ToolCall | None:
    """One function call of an answer; None for a call of another type (a custom tool is not ours)."""
    if not isinstance(call, dict):
        raise fields.fail(at, "is not an object", call)
    if fields.name(call, "type", f"{at}.type", required=False) not in (None, "function"):
        return None
    fields.name(call, "id", f"{at}.id")
    function = fields.object(call, "function", f"{at}.function")
    name = fields.name(function, "name", f"{at}.function.name")
    raw = fields.get(function, "arguments", f"{at}.function.arguments", required=True)
    return ToolCall(name, fields.arguments(name, raw))


def _out_of_credit(exc: Any) -> bool:
    """A 429 that says the account is out of credit: retrying cannot help, stop resumable instead."""
    return exc.status_code == 429 and getattr(exc, "code", None) == "insufficient_quota"
