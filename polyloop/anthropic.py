"""A native Anthropic Messages API model.

    from polyloop import Agent
    from polyloop.anthropic import AnthropicModel

    agent = Agent(model=AnthropicModel(), tools=[...])

`AnthropicModel` talks to Anthropic's Messages API through the official
`anthropic` package, an optional extra::

    pip install 'polyloop[anthropic]'

Configuration comes from the usual environment variables, each overridable
by a keyword argument:

| setting  | keyword    | environment                                      |
|----------|------------|--------------------------------------------------|
| base URL | `base_url` | `ANTHROPIC_BASE_URL` (default: Anthropic's API)  |
| API key  | `api_key`  | `ANTHROPIC_API_KEY`                              |
| model    | `model`    | `POLYLOOP_MODEL`, else `ANTHROPIC_MODEL`         |

The SDK's own retries are off, so each request is one attempt the log
shows. Rate limits (429), overload (529), other 5xx answers, timeouts and
connection errors become `polyloop.TransientModelError`: a failed attempt,
then a new one after the loop's backoff, never shorter than the server's
`Retry-After`. Every other API error (bad key, bad request, too little
credit) is raised as the SDK raised it; the run stops there and resumes
once its cause is fixed. `import polyloop` imports neither this module nor
the SDK.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._run.answer import Fields, MalformedResponseError, bad_arguments
from ._log.model_port import Message, ModelOutput, ToolCall, Usage, message_tool_calls
from ._run.provider import HostedModel, import_extra

__all__ = ["DEFAULT_BASE_URL", "AnthropicModel", "MalformedResponseError"]

_anthropic = import_extra("anthropic")

DEFAULT_BASE_URL = "https://api.anthropic.com"  # when neither base_url nor $ANTHROPIC_BASE_URL is set


_OWN = frozenset({"model", "max_tokens", "messages", "system", "tools"})


class AnthropicModel(HostedModel):
    """A `polyloop.Model` backed by Anthropic's Messages API.

    Each `complete` call sends the whole history (system messages as the
    `system` prompt) and the tool specs, and returns every `tool_use` block
    of the answer as a tool call, or its text as the final answer, with the
    usage the API reports (cache reads and writes included) and the
    answer's `stop_reason` and `model` (kept in the log's `model_call_result.output`).

    Args:
        model: the model name; default `$POLYLOOP_MODEL`, else `$ANTHROPIC_MODEL`.
        base_url: the API's base URL (without `/v1`); default
            `$ANTHROPIC_BASE_URL`, else Anthropic's API.
        api_key: default `$ANTHROPIC_API_KEY`. With a base URL other than
            Anthropic's (a proxy or gateway) and no key set, a placeholder
            is sent.
        max_tokens: the most tokens one answer may generate (the API
            requires a limit). An answer cut at this limit has
            `stop_reason` `"max_tokens"`.
        timeout: seconds the whole request may take, from connecting to
            the last byte of the answer (a wall-clock deadline, not only the
            wait for each byte); a request that takes longer fails as a
            transient error (a new attempt follows).
        params: further fields sent with every request, such as
            `{"temperature": 0, "tool_choice": {"type": "auto"}}`.
        client: an `anthropic.AsyncAnthropic` to reuse (for its connection
            pool or custom HTTP settings). Its own retries are turned off on
            a copy. Without one, every call opens a fresh client and closes
            it afterwards, so the model can be used from any event loop.

    Raises:
        ValueError: no model name is configured; no API key is configured
            for Anthropic's own API; or `params` sets a field the adapter
            owns (`model`, `messages`, `tools`, `system`, `max_tokens`,
            `stream`).
    """

    _kind = "AnthropicModel"
    _model_env = "ANTHROPIC_MODEL"
    _url_env = "ANTHROPIC_BASE_URL"
    _key_env = "ANTHROPIC_API_KEY"
    _default_url = DEFAULT_BASE_URL
    _reserved = frozenset({"model", "messages", "tools", "system", "max_tokens", "stream"})

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 120.0,
        params: Mapping[str, Any] | None = None,
        client: Any | None = None,
    ) -> None:
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        super().__init__(
            model=model, base_url=base_url, api_key=api_key, timeout=timeout, params=params, client=client
        )
        self.max_tokens = max_tokens

    def describe(self) -> dict[str, Any]:
        """What `run_started` records about the model; never the API key."""
        return self._described(max_tokens=self.max_tokens)

    def _body(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The Messages API request body, before `params`.

        System messages become the `system` prompt. An assistant turn becomes
        one assistant message: a text block (when it has text), then one
        `tool_use` block per tool call with the id the history gives it (the
        same on every resume). The tool results that follow it become one
        user message of `tool_result` blocks, in order. Tool specs become
        `{"name", "description", "input_schema"}`.
        """
        system, chat = _messages(messages)
        body: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": chat}
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {
                    "name": s["name"],
                    "description": s.get("description") or "",
                    "input_schema": s.get("parameters") or {"type": "object", "properties": {}},
                }
                for s in tools
            ]
        return body

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ModelOutput:
        """Ask the API for the next decision.

        Returns:
            Every `tool_use` block of the answer as a tool call, in order
            (with the answer's text beside them), or, without one, the text
            as the final answer; with usage (`input_tokens`,
            `output_tokens`, and `cache_read_input_tokens` /
            `cache_creation_input_tokens` when reported), `stop_reason` and
            the answering `model`.

        Raises:
            TransientModelError: rate limited (429), overloaded (529),
                timed out, could not connect, the answer broke off, or
                another 5xx (also 408, 409); `retry_after` holds the
                server's `Retry-After` in seconds when it sent one. Also
                `MalformedResponseError` for an answer that cannot be read:
                not a JSON object, or a field missing, of the wrong type or
                out of bounds (see `_model_output`), such as a `tool_use`
                whose input is not an object.
            anthropic.APIStatusError: any other error answer (401 bad key,
                400 bad request or too little credit, 404 unknown model);
                retrying would not help, so the run stops resumable.
        """
        body = self.request(messages, tools)
        # `params` travel as extra body fields: SDK releases differ in the keywords they accept
        # (`temperature` is not one in every release), the API accepts them all the same.
        own = {k: v for k, v in body.items() if k in _OWN}
        extra = {k: v for k, v in body.items() if k not in _OWN}
        answer = await self._send(
            _anthropic,
            _anthropic.AsyncAnthropic,
            lambda client: client.messages.with_streaming_response.create(**own, extra_body=extra or None),
        )
        return _model_output(answer)


def _messages(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """(the system prompt, the Messages API messages) for a PolyLoop history (see `polyloop.Message`)."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            results.append(
                {"type": "tool_result", "tool_use_id": str(m["tool_call_id"]), "content": m.get("content") or ""}
            )
            continue
        if results:  # the results of one assistant turn go back together, in one user turn
            out.append({"role": "user", "content": results})
            results = []
        if role == "system":
            system.append(m.get("content") or "")
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.get("content"):
                blocks.append({"type": "text", "text": m["content"]})
            for call in message_tool_calls(m):
                blocks.append(
                    {"type": "tool_use", "id": str(call["id"]), "name": call["name"], "input": call.get("args") or {}}
                )
            out.append({"role": "assistant", "content": blocks or ""})
        else:
            out.append({"role": "user", "content": m.get("content") or ""})
    if results:
        out.append({"role": "user", "content": results})
    return "\n\n".join(system), out


def _model_output(answer: dict[str, Any]) -> ModelOutput:
    """Read a Messages API answer strictly as a `ModelOutput` (or raise `MalformedResponseError`).

    Required: `model`, a `content` list of blocks (each an object with a
    `type`; a `text` block's `text`; a `tool_use` block's `id`, `name` and
    object `input`) and `stop_reason` (null allowed). `usage` may be left
    out, but when given it holds both counts (the cache counts are
    optional). Blocks of other types (thinking, server tools) are not
    decisions the loop acts on and are skipped. The bounds are
    `polyloop._run.answer`'s. The answer's `model` and `stop_reason` are
    kept (the log's `model_call_result.output.model` and `.stop_reason`).
    """
    fields = Fields()
    usage = fields.object(answer, "usage", "usage", required=False)
    if usage is not None:
        fields.usage = Usage(
            input_tokens=fields.count(usage, "input_tokens", "usage.input_tokens"),
            output_tokens=fields.count(usage, "output_tokens", "usage.output_tokens"),
            cache_read_input_tokens=fields.count(
                usage, "cache_read_input_tokens", "usage.cache_read_input_tokens", required=False
            ),
            cache_creation_input_tokens=fields.count(
                usage, "cache_creation_input_tokens", "usage.cache_creation_input_tokens", required=False
            ),
        )
    model = fields.name(answer, "model", "model")
    stop = fields.name(answer, "stop_reason", "stop_reason", nullable=True)
    texts: list[str] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(fields.items(answer, "content", "content")):
        at = f"content[{i}]"
        if not isinstance(block, dict):
            raise fields.fail(at, "is not an object", block)
        kind = fields.name(block, "type", f"{at}.type")
        if kind == "text":
            texts.append(fields.text(block, "text", f"{at}.text", required=True))
        elif kind == "tool_use":
            fields.name(block, "id", f"{at}.id")
            name = fields.name(block, "name", f"{at}.name")
            args = fields.get(block, "input", f"{at}.input", required=True)
            if not isinstance(args, dict):
                raise bad_arguments(name, args, fields.usage)
            calls.append(ToolCall(name, args))
    text = "".join(texts)
    if calls:
        return ModelOutput(text=text or None, tool_calls=calls, usage=fields.usage, stop_reason=stop, model=model)
    return ModelOutput(text=text, usage=fields.usage, stop_reason=stop, model=model)
