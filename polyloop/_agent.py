"""The run loop: model call, parse, action, observation, history — intent first, always."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ._classify import Recovery, StepView, classify
from ._errors import (
    MAX_RETRY_AFTER,
    ModelCallError,
    NeedsOperatorError,
    PolyLoopError,
    RunExistsError,
    RunMismatchError,
    RunNotFoundError,
    StoreError,
    TransientModelError,
)
from ._ids import check_run_id, idempotency_key, new_run_id, result_id
from ._model import Model, ModelOutput, Usage, _History
from ._records import FinishReason, Intent, ModelCallResult, RunFinished, RunStarted, StepCompleted
from ._store import Store
from ._tools import Tool, ToolContext

DEFAULT_DIRECTORY = "runs"


def default_directory() -> str:
    """Where runs live unless told otherwise: `$POLYLOOP_DIR`, else `./runs`."""
    return os.environ.get("POLYLOOP_DIR") or DEFAULT_DIRECTORY


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended.

    Attributes:
        run_id: the run.
        reason: `final_answer`, `max_steps` or `error`.
        text: the final answer (None unless reason is `final_answer`).
        steps: how many steps the run completed.
        error: why it ended, when reason is `error`.
    """

    run_id: str
    reason: FinishReason
    text: str | None
    steps: int
    error: str | None = None

    @property
    def final(self) -> str | None:
        """The final answer; the same as `text`."""
        return self.text


class Agent:
    """A model with tools, run step by step on a durable intent log.

    Args:
        model: anything implementing the `Model` protocol (e.g. `ScriptedModel`).
        tools: the tools the model may call (made with `@tool`).
        max_steps: the step budget; reaching it ends the run with reason `max_steps`.
        system: an optional system prompt placed first in the history.
        max_attempts: model call attempts one step may use (across crashes,
            transient errors and resumes) before the run ends with reason `error`.
        retry_backoff: seconds before the first retry of a transient model
            error; doubles with each further attempt.
    """

    def __init__(
        self,
        *,
        model: Model,
        tools: Iterable[Tool] = (),
        max_steps: int = 20,
        system: str | None = None,
        max_attempts: int = 6,
        retry_backoff: float = 1.0,
    ) -> None:
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.model = model
        self.tools = list(tools)
        for t in self.tools:
            if not isinstance(t, Tool):
                raise TypeError(f"{t!r} is not a tool: decorate it with @polyloop.tool")
        names = [t.name for t in self.tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"two tools share the name {duplicates[0]!r}")
        self.max_steps = max_steps
        self.system = system
        self.max_attempts = max_attempts
        self.retry_backoff = retry_backoff

    def config(self, max_steps: int | None = None) -> dict[str, Any]:
        """The configuration recorded in `run_started`."""
        describe = getattr(self.model, "describe", None)
        model = describe() if callable(describe) else {"type": type(self.model).__name__}
        return {
            "max_steps": max_steps or self.max_steps,
            "system": self.system,
            "model": model,
            "tools": [{"name": t.name, "replay": t.replay} for t in self.tools],
            "max_attempts": self.max_attempts,
        }

    async def run(
        self,
        goal: str | None = None,
        *,
        run_id: str | None = None,
        store: Store | None = None,
        target: str | None = None,
        max_steps: int | None = None,
        new: bool = False,
    ) -> RunResult:
        """Run towards `goal`; with a `run_id` that has a log, resume that run.

        Resuming skips done executions and reuses their recorded results (no
        model call, no tool call), re-issues unknown model calls as new
        attempts, replays unknown `safe` actions, honours operators'
        resolutions and stops at unknown `never` actions. A finished run is
        returned as recorded. Cancellation leaves the run resumable and never
        writes `run_finished`.

        Args:
            goal: what the run is for; required for a new run, checked
                against the recorded goal when resuming.
            run_id: a safe file name; a sortable id is generated when omitted.
            store: where the log lives; `JsonlStore(default_directory())` by default.
            target: how to import this agent again (`file.py:name` or
                `module:name`), recorded so that `polyloop resume` needs only the id.
            max_steps: the step budget of a new run (default: the agent's).
            new: refuse (`RunExistsError`) instead of resuming an existing run.

        Returns:
            The `RunResult`; `run_finished` is durable before it is returned.

        Raises:
            InvalidRunIdError: the run id is not a safe file name.
            NeedsOperatorError: an unknown `never` action must be settled first.
            CorruptLogError: the log cannot come from a correct writer.
            RunActiveError: another process holds the run.
            RunExistsError: `new=True` and the run id already has a log.
            RunMismatchError: `goal` or `max_steps` differ from the recorded ones.
            ModelCallError: the model call failed; the run stays resumable.
            StoreError: the store failed; the run stops and stays resumable.
        """
        if store is None:
            from .stores import JsonlStore

            store = JsonlStore(default_directory())
        run_id = check_run_id(run_id) if run_id is not None else new_run_id()
        if new and await _read_or_none(store, run_id) is not None:
            raise RunExistsError(run_id)  # before the lock, which would trim a torn tail
        lock = getattr(store, "lock", None)
        held = lock(run_id) if callable(lock) else contextlib.nullcontext()
        async with held:
            records = await _read_or_none(store, run_id)
            if records is None:
                if goal is None:
                    raise ValueError("a new run needs a goal (an empty string is allowed)")
                started = RunStarted(
                    run_id=run_id, goal=goal, target=target, config=self.config(max_steps)
                )
                await _store_call(store.write_run_started(started), run_id)
                recovery = classify([started], run_id=run_id)
            else:
                if new:
                    raise RunExistsError(run_id)
                recovery = classify(records, run_id=run_id)
                recorded = recovery.started
                if goal is not None and goal != recorded.goal:
                    raise RunMismatchError(run_id, "goal", recorded.goal, goal)
                if max_steps is not None and max_steps != recovery.max_steps:
                    raise RunMismatchError(run_id, "max_steps", recovery.max_steps, max_steps)
            return await _Run(self, store, recovery).go()


async def _read_or_none(store: Store, run_id: str) -> Sequence[Any] | None:
    try:
        return await store.read_log(run_id)
    except RunNotFoundError:
        return None
    except PolyLoopError:
        raise
    except Exception as exc:
        raise StoreError(f"store failed to read run {run_id!r}: {exc}", run_id=run_id) from exc


async def _store_call(write: Awaitable[None], run_id: str) -> None:
    # Fail closed: any store failure stops the run with a library error.
    try:
        await write
    except PolyLoopError:
        raise
    except Exception as exc:
        raise StoreError(f"store failed to write run {run_id!r}: {exc}", run_id=run_id) from exc


def _usage_json(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, Usage):
        return None
    try:  # a model may hand over floats or strings; the log holds token counts
        return {"input_tokens": int(usage.input_tokens), "output_tokens": int(usage.output_tokens)}
    except (TypeError, ValueError):
        return None


def _observation_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return orjson.dumps(value, default=str).decode()


class _Run:
    """One pass of the loop over a run, from its recovery verdict to its end."""

    def __init__(self, agent: Agent, store: Store, recovery: Recovery) -> None:
        self.agent = agent
        self.store = store
        self.recovery = recovery
        self.run_id = recovery.run_id
        config = recovery.started.config
        self.max_steps: int = recovery.max_steps or agent.max_steps
        self.system = config["system"] if "system" in config else agent.system
        self.tools = {t.name: t for t in agent.tools}
        self.specs = [t.spec() for t in agent.tools]
        self.completed = 0

    async def go(self) -> RunResult:
        rec = self.recovery
        if rec.finished is not None:
            f = rec.finished
            return RunResult(self.run_id, f.reason, f.result, f.steps, f.error)
        if rec.blocking:
            raise NeedsOperatorError(self.run_id, rec.blocking)
        history = _History()
        if self.system:
            history.append({"role": "system", "content": self.system})
        history.append({"role": "user", "content": rec.started.goal})
        step = 1
        while True:
            if step > self.max_steps:
                return await self._finish("max_steps", None)
            view = rec.steps[step - 1] if step <= len(rec.steps) else None
            try:
                output, model_rid = await self._decide(step, view, history)
            except _Budget as spent:
                return await self._finish(
                    "error",
                    None,
                    error=f"the model call of step {spent.step} failed {spent.attempts} times",
                )
            call = output.tool_call
            history.append(
                {
                    "role": "assistant",
                    "content": output.text,
                    "tool_call": None
                    if call is None
                    else {"id": model_rid, "name": call.name, "args": call.args},
                }
            )
            if call is None:
                if view is None or view.completed is None:
                    await self._write_step(StepCompleted(step=step, result_id=None, observation=None))
                self.completed = step
                return await self._finish("final_answer", output.text)
            observation = await self._act(step, view, call.name, call.args)
            self.completed = step
            history.append(
                {"role": "tool", "tool_call_id": model_rid, "name": call.name, "content": observation}
            )
            step += 1

    async def _decide(
        self, step: int, view: StepView | None, history: _History
    ) -> tuple[ModelOutput, str]:
        if view is not None and view.output is not None:
            out = view.output
            assert out.output is not None
            return ModelOutput.from_json(out.output, out.usage), out.result_id
        attempt = len(view.model_calls) + 1 if view is not None else 1
        while True:
            if attempt > self.agent.max_attempts:
                raise _Budget(step, attempt - 1)
            rid = result_id("model_call", step, attempt)
            await _store_call(
                self.store.write_intent(
                    self.run_id, Intent(kind="model_call", step=step, attempt=attempt, result_id=rid)
                ),
                self.run_id,
            )
            try:
                output = await self.agent.model.complete(history.view(), self.specs)
                if not isinstance(output, ModelOutput):
                    raise TypeError(f"the model returned {type(output).__name__}, not ModelOutput")
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                spent = getattr(exc, "usage", None)
                await _store_call(
                    self.store.write_model_call_result(
                        self.run_id,
                        ModelCallResult(
                            result_id=rid, output=None, error=error, usage=_usage_json(spent)
                        ),
                    ),
                    self.run_id,
                )
                if isinstance(exc, TransientModelError) and attempt < self.agent.max_attempts:
                    backoff = self.agent.retry_backoff * 2 ** (attempt - 1)
                    if exc.retry_after:
                        backoff = max(backoff, min(exc.retry_after, MAX_RETRY_AFTER))
                    await asyncio.sleep(backoff)
                    attempt += 1
                    continue
                if attempt >= self.agent.max_attempts:
                    raise _Budget(step, attempt) from exc
                raise ModelCallError(self.run_id, step, attempt, error) from exc
            await _store_call(
                self.store.write_model_call_result(
                    self.run_id,
                    ModelCallResult(
                        result_id=rid, output=output.to_json(), usage=_usage_json(output.usage)
                    ),
                ),
                self.run_id,
            )
            return output, rid

    async def _act(self, step: int, view: StepView | None, name: str, args: dict[str, Any]) -> str:
        if view is not None and view.completed is not None:
            return view.completed.observation or ""
        actions = view.actions if view is not None else ()
        tool = self.tools.get(name)
        if tool is None:
            if actions:
                raise RunMismatchError(self.run_id, "tools", name, sorted(self.tools))
            known = ", ".join(sorted(self.tools)) or "none"
            observation = f"error: unknown tool {name!r}; available tools: {known}"
            await self._write_step(
                StepCompleted(step=step, result_id=None, observation=observation, is_error=True)
            )
            return observation
        attempt = 1
        if actions:
            last = actions[-1]
            if last.resolution is not None and last.resolution.outcome == "executed":
                observation = last.resolution.observation or ""
                await self._write_step(
                    StepCompleted(step=step, result_id=last.result_id, observation=observation)
                )
                return observation
            attempt = last.attempt + 1
        rid = result_id("action", step, attempt)
        key = idempotency_key(self.run_id, step, name, args)
        await _store_call(
            self.store.write_intent(
                self.run_id,
                Intent(
                    kind="action",
                    step=step,
                    attempt=attempt,
                    result_id=rid,
                    tool=name,
                    args=args,
                    replay=tool.replay,
                    idempotency_key=key,
                ),
            ),
            self.run_id,
        )
        ctx = ToolContext(self.run_id, step, attempt, rid, key)
        try:
            observation, is_error = _observation_text(await tool.invoke(args, ctx)), False
        except Exception as exc:  # a tool failure is data the model sees
            observation, is_error = f"error: {type(exc).__name__}: {exc}", True
        await self._write_step(
            StepCompleted(step=step, result_id=rid, observation=observation, is_error=is_error)
        )
        return observation

    async def _write_step(self, record: StepCompleted) -> None:
        await _store_call(self.store.write_step_completed(self.run_id, record), self.run_id)

    async def _finish(self, reason: FinishReason, text: str | None, error: str | None = None) -> RunResult:
        record = RunFinished(reason=reason, result=text, steps=self.completed, error=error)
        await _store_call(self.store.write_run_finished(self.run_id, record), self.run_id)
        return RunResult(self.run_id, reason, text, self.completed, error)


class _Budget(Exception):
    """The model call attempts of one step are spent."""

    def __init__(self, step: int, attempts: int) -> None:
        self.step = step
        self.attempts = attempts

