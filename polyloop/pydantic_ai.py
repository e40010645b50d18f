"""Pydantic AI on PolyLoop: an existing `pydantic_ai.Agent`, its model requests and tool calls on a PolyLoop log.

    from pydantic_ai import Agent
    from polyloop.pydantic_ai import PolyLoopAgent

    agent = Agent("openai:gpt-4o", ...)          # your agent, unchanged
    durable = PolyLoopAgent(agent, tools={"lookup": "safe"}, target="app:main")

    async def main(run_id, store, goal):          # what `polyloop resume ID` calls
        return await durable.run(goal, run_id=run_id, store=store)

Like Pydantic AI's own durable integrations (Temporal's `TemporalAgent`,
DBOS's `DBOSAgent`), the agent's model is wrapped (`WrapperModel`) and its
toolsets too (`WrapperToolset`), for the time of a run (`Agent.override`):
each model request and each tool call goes through `polyloop.durable`. A
tool's policy comes from the `tools` map, else from its metadata
(`metadata={"polyloop": {"replay": "safe", "approval": "required"}}`), else
it is `never`; a tool with `requires_approval=True` waits for a person on
PolyLoop's record (`polyloop approve` / `deny`) instead of ending the run
with Pydantic AI's `DeferredToolRequests`. Needs the `pydantic-ai` extra
(`pip install 'polyloop[pydantic-ai]'`). See docs/how-to/keep-your-agent-framework.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any

from pydantic import TypeAdapter

from ._extras import needs_extra
from ._log.model_port import Usage
from ._log.store_port import Store
from ._run.result import RunResult
from .durable import DurableRun, Reply, RunEnded, ToolPolicy, open_run

with needs_extra("pydantic_ai", "pydantic-ai", "polyloop.pydantic_ai needs Pydantic AI"):
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai.exceptions import ModelRetry
    from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
    from pydantic_ai.models import ModelRequestParameters, StreamedResponse, infer_model
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import RunContext
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
    from pydantic_ai.toolsets.abstract import ToolsetTool

__all__ = ["PolyLoopAgent", "PolyLoopModel", "PolyLoopToolset"]

_RESPONSE = TypeAdapter(ModelResponse)
_RETRY = "error: ModelRetry: "

# The open run of this task's `PolyLoopAgent.run` (the model and toolsets are shared by runs).
_CURRENT: ContextVar[_Open | None] = ContextVar("polyloop_pydantic_ai_run", default=None)


@dataclasses.dataclass
class _Open:
    run: DurableRun
    calls: dict[str, tuple[str, dict[str, Any]]] = dataclasses.field(default_factory=dict)  # tool_call_id -> call


def _open() -> _Open:
    current = _CURRENT.get()
    if current is None:
        raise RuntimeError("a PolyLoop-wrapped model or toolset is used outside PolyLoopAgent.run")
    return current


class PolyLoopModel(WrapperModel):
    """The agent's model, each request a durable PolyLoop model call (replayed from the log on resume).

    A streamed request (an `event_stream_handler`: `agent_event_stream_handler=`) is one too: the
    wrapped model's stream is drained inside the call, and the recorded
    response is handed to the stream's consumer as events once it is durable.
    """

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        async def fetch() -> ModelResponse:
            return await self.wrapped.request(messages, model_settings, model_request_parameters)

        return await _durable_request(model_request_parameters, fetch)

    @contextlib.asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        completed = _completed_stream()  # before anything is paid

        async def fetch() -> ModelResponse:
            async with self.wrapped.request_stream(messages, model_settings, model_request_parameters,
                                                   run_context) as stream:
                async for _ in stream:
                    pass
            return stream.get()

        response = await _durable_request(model_request_parameters, fetch)
        yield completed(response, model_request_parameters=model_request_parameters, replay_events=True)


def _completed_stream() -> Any:
    """Pydantic AI's `CompletedStreamedResponse`, when it can replay a response as events (`replay_events`)."""
    import inspect

    from pydantic_ai import models
    from pydantic_ai.exceptions import UserError

    completed = getattr(models, "CompletedStreamedResponse", None)
    if completed is None or "replay_events" not in inspect.signature(completed).parameters:
        raise UserError("a streamed request under PolyLoopAgent needs a Pydantic AI whose CompletedStreamedResponse "
                        "replays events (replay_events): upgrade pydantic-ai-slim, or run without streaming")
    return completed


async def _durable_request(parameters: ModelRequestParameters, fetch: Callable[[], Awaitable[ModelResponse]],
                           ) -> ModelResponse:
    """One model request as a durable model call: `fetch()` runs only when the log does not hold it."""
    current = _open()
    functions = {t.name for t in parameters.function_tools}

    async def ask() -> Reply:
        response = await fetch()
        calls = tuple((p.tool_name, p.args_as_dict()) for p in response.parts
                      if isinstance(p, ToolCallPart) and p.tool_name in functions)
        u = response.usage
        usage = Usage(u.input_tokens or 0, u.output_tokens or 0)
        return Reply(calls, response.text, _RESPONSE.dump_python(response, mode="json"), usage)

    reply = await current.run.model_call(ask)
    response = _RESPONSE.validate_python(reply.raw)
    for part in response.parts:
        if isinstance(part, ToolCallPart):
            current.calls[part.tool_call_id] = (part.tool_name, part.args_as_dict())
    return response


@dataclasses.dataclass
class PolyLoopToolset(WrapperToolset[Any]):
    """A toolset whose tool calls are durable PolyLoop tool calls (intent before, outcome after).

    A tool Pydantic AI would defer for approval (`requires_approval=True`) is
    called instead, and waits for a person on PolyLoop's record.
    """

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self.wrapped.get_tools(ctx)
        return {name: dataclasses.replace(t, tool_def=dataclasses.replace(t.tool_def, kind="function"))
                if t.tool_def.kind == "unapproved" else t for name, t in tools.items()}

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]) -> Any:
        current = _open()
        asked = current.calls.get(ctx.tool_call_id or "", (name, tool_args))

        async def run(args: dict[str, Any]) -> Any:
            given = tool_args if args == asked[1] else tool.args_validator.validate_python(args)  # an edited approval
            return await self.wrapped.call_tool(name, given, ctx, tool)

        outcome = await current.run.tool_call(asked[0], asked[1], run)
        if outcome.is_error and outcome.text.startswith(_RETRY):
            raise ModelRetry(outcome.text[len(_RETRY):])  # what the tool raised, as Pydantic AI expects it
        return outcome.text


class PolyLoopAgent:
    """An existing `pydantic_ai.Agent`, run on a PolyLoop log.

    Args:
        agent: the Pydantic AI agent (not changed: its model and toolsets are
            overridden for the time of each `run`).
        tools: policies by tool name, `ToolPolicy` or `"safe"`/`"never"`; they
            win over a tool's metadata. A tool named nowhere is `never`.
        target: the entry point `polyloop resume` calls
            (`module:function`, called as `function(run_id=..., store=..., goal=...)`).
        fingerprint: what the configuration recorded and compared on resume is
            (default: the model's system and name).
        max_steps, max_attempts: as for `polyloop.durable.open_run`.
    """

    def __init__(self, agent: PydanticAgent[Any, Any], *, tools: Mapping[str, ToolPolicy | str] | None = None,
                 target: str | None = None, fingerprint: Any = None, max_steps: int = 1000,
                 max_attempts: int = 6) -> None:
        self.agent = agent
        model = agent.model
        if model is None:
            raise ValueError("the agent has no model: give it one when it is built")
        self.model = PolyLoopModel(infer_model(model))
        self.toolsets = [PolyLoopToolset(ts) for ts in agent.toolsets]
        self.policies = {**_from_metadata(agent.toolsets), **(tools or {})}
        self.target = target
        self.fingerprint = fingerprint if fingerprint is not None else {
            "framework": "pydantic-ai", "model": f"{self.model.system}:{self.model.model_name}"}
        self.max_steps, self.max_attempts = max_steps, max_attempts

    async def run(self, goal: str | None = None, *, run_id: str | None = None, store: Store | None = None,
                  **options: Any) -> RunResult:
        """Run (or resume, when `run_id` has a log) the agent towards `goal`; its final output as `text`.

        `options` are `open_run`'s (`inputs`, `new`, `accept_changes`, ...)
        and, prefixed `agent_`, the Pydantic AI run's (`agent_deps=...`).
        A structured output is recorded as its JSON.

        Raises:
            everything `polyloop.durable.open_run` and its calls raise
            (`ApprovalRequiredError`, `NeedsOperatorError`, `DivergenceError`, ...).
        """
        agent_options = {k[len("agent_"):]: options.pop(k) for k in list(options) if k.startswith("agent_")}
        async with open_run(run_id, store=store, goal=goal, tools=self.policies, fingerprint=self.fingerprint,
                            target=self.target, max_steps=self.max_steps, max_attempts=self.max_attempts,
                            **options) as run:
            if run.finished is not None:
                return run.finished
            token = _CURRENT.set(_Open(run))
            try:
                with self.agent.override(model=self.model, toolsets=self.toolsets, tools=[]):
                    result = await self.agent.run(run.goal, **agent_options)
                return await run.finish(_text(result.output))
            except RunEnded as ended:
                return ended.result
            finally:
                _CURRENT.reset(token)


def _text(output: Any) -> str:
    if isinstance(output, str):
        return output
    from ._run.observe import observation_text
    return observation_text(output)


def _from_metadata(toolsets: Any) -> dict[str, ToolPolicy]:
    """The policies the agent's function tools declare: `requires_approval`, `metadata["polyloop"]`."""
    found: dict[str, ToolPolicy] = {}

    def visit(ts: AbstractToolset[Any]) -> None:
        if not isinstance(ts, FunctionToolset):
            return
        for name, t in ts.tools.items():
            declared = dict((t.metadata or {}).get("polyloop") or {})
            if t.requires_approval:
                declared.setdefault("approval", "required")
            found[name] = ToolPolicy(**declared)

    for ts in toolsets:
        ts.apply(visit)
    return found
