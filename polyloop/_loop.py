"""The run loop: rebuild the history from the log, then carry out the planner's verdicts.

Two separate pieces. `rebuild_history` turns what the log recorded into the
history the model is given (pure). `_Run` executes live work: it asks the
planner (`polyloop._plan.plan`) what comes next, does it intent first, and
feeds every record it writes into the same `Walker` the reader uses, so the
next decision is made from exactly what the log now says.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import orjson


from ._classify import Walker, _tool_call, walk
from ._codec import ParsedLog
from ._errors import (
    MAX_RETRY_AFTER,
    AlertError,
    CorruptLogError,
    ModelCallError,
    NeedsOperatorError,
    PolyLoopError,
    RunMismatchError,
    RunNotFoundError,
    StoreError,
    TransientModelError,
)
from ._ids import idempotency_key
from ._model import ModelOutput, Usage, _History
from ._plan import (
    AbortAction,
    AlertStop,
    CallModel,
    Complete,
    ContinueAction,
    Reconcile,
    Rollback,
    Verify,
    CompleteFinal,
    Finished,
    FinishAttempts,
    FinishBudget,
    FinishFinal,
    NeedsOperator,
    ReuseResolution,
    RunAction,
    plan,
)
from ._artifacts import Artifacts, check_products
from ._records import (
    ActionResult,
    Artifact,
    FinishReason,
    GuardCheck,
    Intent,
    ModelCallResult,
    Record,
    Resolution,
    RunFinished,
    StepCompleted,
    representable,
)
from ._store import LockingStore, ProbingStore, Store
from ._tools import Tool, ToolContext, call_guard, guard_verdict, observation_text

if TYPE_CHECKING:
    from ._agent import Agent, RunResult

# Classifying a log this long moves off the event loop (other runs share it).
_OFF_LOOP_RECORDS = 2_000


# -- reading once, under the lock ------------------------------------------------------


async def read_or_none(store: Store, run_id: str) -> Sequence[Record] | None:
    """The run's records, or None when it has no log; store failures become `StoreError`."""
    try:
        return await store.read_log(run_id)
    except RunNotFoundError:
        return None
    except PolyLoopError:
        raise
    except Exception as exc:
        raise StoreError(f"store failed to read run {run_id!r}: {exc}", run_id=run_id) from exc


@contextlib.asynccontextmanager
async def held(
    store: Store, run_id: str, *, must_exist: bool = False
) -> AsyncIterator[Sequence[Record] | None]:
    """Hold the run (when the store can) and yield its records, read once under the hold.

    A store whose lock hands back what it read while taking the hold (the
    JSONL store parses the log to seal a torn tail) is not read again. With
    `must_exist`, a run without a log raises the store's `RunNotFoundError`
    before any hold is taken (so a mistyped id leaves nothing behind).
    """
    if must_exist and isinstance(store, ProbingStore) and not await maybe_await(store.exists(run_id)):
        await store.read_log(run_id)  # raises the store's own RunNotFoundError
    read = store.read_log if must_exist else functools.partial(read_or_none, store)
    if not isinstance(store, LockingStore):
        yield await read(run_id)
        return
    async with store.lock(run_id) as taken:
        records = records_of(taken, run_id)
        yield records if records is not None else await read(run_id)


def records_of(taken: object, run_id: str) -> Sequence[Record] | None:
    """The records a store's lock handed back (None: it handed back nothing)."""
    if not isinstance(taken, ParsedLog):
        return None
    return taken.records_or_raise(run_id)


async def maybe_await(value: Any) -> Any:
    """`value`, awaited if it is awaitable (optional capabilities may be sync or async)."""
    return await value if inspect.isawaitable(value) else value


async def walk_off_loop(records: Sequence[Record], run_id: str) -> Walker:
    """`walk` a log, in a thread when it is long enough to stall other runs."""
    if len(records) < _OFF_LOOP_RECORDS:
        return walk(records, run_id=run_id)
    return await asyncio.to_thread(walk, records, run_id=run_id)


def verdict(walker: Walker, run_id: str) -> Walker:
    """`walker`, or `CorruptLogError` if the log it read breaks a rule."""
    if walker.problems or walker.started is None:
        raise CorruptLogError(run_id, walker.problems)
    return walker


# -- the history, rebuilt from the log --------------------------------------------------


def assistant_turn(output: dict[str, Any] | None, model_rid: str) -> dict[str, Any]:
    out = output or {}
    call = out.get("tool_call")
    return {
        "role": "assistant",
        "content": out.get("text"),
        "tool_call": None if call is None else {"id": model_rid, "name": call["name"], "args": call["args"]},
    }


def rebuild_history(walker: Walker) -> _History:
    """The history the model saw, rebuilt from the recorded steps (no model, no tool)."""
    history = _History()
    started = walker.started
    assert started is not None
    system = started.config.get("system")
    if system:
        history.append({"role": "system", "content": system})
    history.append({"role": "user", "content": started.goal})
    for st in walker.steps:
        if st.output is None:
            break
        history.append(assistant_turn(st.output.output, st.output.result_id))
        call = _tool_call(st.output)
        if st.completed is not None and call is not None:
            history.append(_tool_turn(st.output.result_id, call["name"], st.completed.observation or ""))
    return history


def _tool_turn(model_rid: str, name: str, observation: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": model_rid, "name": name, "content": observation}


# -- live execution ---------------------------------------------------------------------


def _usage_json(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, Usage):
        return None
    try:  # a model may hand over floats or strings; the log holds token counts
        return usage.to_json()
    except (TypeError, ValueError):
        return None


class _Run:
    """One pass of the loop over a run, from its walker's state to its end."""

    def __init__(self, agent: Agent, store: Store, walker: Walker) -> None:
        assert walker.started is not None
        self.agent = agent
        self.store = store
        self.walker = walker
        self.run_id = walker.started.run_id
        self.tools = {t.name: t for t in agent.tools}
        self.specs = [t.spec() for t in agent.tools]
        self.alerted: set[str] = set()  # failed verifications this process told `on_alert` about
        # Resumed with an action in flight: a product it may have replaced is only `unsettled`
        # (see polyloop._artifacts); once its step completes, every product is checked again.
        self.recheck_products = bool(walker.artifacts) and bool(walker.in_flight())
        self._writers = {
            Intent: store.write_intent,
            ModelCallResult: store.write_model_call_result,
            StepCompleted: store.write_step_completed,
            RunFinished: store.write_run_finished,
            Resolution: store.write_resolution,
            GuardCheck: getattr(store, "write_guard_check", None),
            ActionResult: getattr(store, "write_action_result", None),
            Artifact: getattr(store, "write_artifact", None),
        }
        for t in agent.tools:
            recorded = walker.guards.get(t.name)
            if (t.guard_config() or None) != recorded and any(
                c.get("name") == t.name for c in walker.started.config.get("tools") or []
            ):
                raise RunMismatchError(self.run_id, f"guards of tool {t.name!r}", recorded, t.guard_config())

    async def go(self) -> RunResult:
        history = rebuild_history(self.walker)
        while True:
            nxt = plan(self.walker)
            if isinstance(nxt, CallModel):
                await self._call_model(nxt, history)
            elif isinstance(nxt, RunAction):
                await self._act(nxt, history)
            elif isinstance(nxt, ReuseResolution):
                await self._complete(nxt.step, nxt.result_id, nxt.observation, False, nxt.tool, history)
            elif isinstance(nxt, CompleteFinal):
                await self._write(StepCompleted(step=nxt.step, result_id=None, observation=None))
            elif isinstance(nxt, FinishFinal):
                return await self._finish("final_answer", nxt.text)
            elif isinstance(nxt, FinishBudget):
                return await self._finish("max_steps", None)
            elif isinstance(nxt, FinishAttempts):
                error = f"the model call of step {nxt.step} failed {nxt.attempts} times"
                return await self._finish("error", None, error=error)
            elif isinstance(nxt, NeedsOperator):
                raise NeedsOperatorError(self.run_id, nxt.executions)
            elif isinstance(nxt, AlertStop):
                from ._guard_run import redeliver

                await redeliver(self, self.walker.steps[nxt.executions[0].step - 1].actions[-1])
                raise AlertError(self.run_id, nxt.executions)
            elif isinstance(nxt, (ContinueAction, AbortAction, Verify, Rollback, Reconcile, Complete)):
                await self._guarded(nxt, history)
            else:
                assert isinstance(nxt, Finished)
                return self._recorded_result()

    def _recorded_result(self) -> RunResult:
        from ._agent import RunResult

        f = self.walker.finished
        assert f is not None
        return RunResult(self.run_id, f.reason, f.result, f.steps, f.error, already_finished=True)

    async def _write(self, record: Record) -> None:
        # Fail closed: any store failure stops the run with a library error.
        writer = self._writers[type(record)]
        if writer is None:
            raise StoreError(
                f"the store cannot write {record.TAG} records (log format 1.1), which guarded tools "
                f"need: it lacks write_{record.TAG}", run_id=self.run_id,
            )
        try:
            await writer(self.run_id, record)
        except PolyLoopError:
            raise
        except Exception as exc:
            raise StoreError(f"store failed to write run {self.run_id!r}: {exc}", run_id=self.run_id) from exc
        if not self.walker.feed(record):
            problem = self.walker.problems[-1]
            raise AssertionError(f"the run loop wrote a record a correct writer never writes: {problem}")
        if self.recheck_products and isinstance(record, StepCompleted):
            self.recheck_products = False
            await check_products(self.store, self.walker, when=f"stops after step {record.step}")

    async def _call_model(self, nxt: CallModel, history: _History) -> None:
        step, attempt = nxt.step, nxt.attempt
        rid = f"s{step}-m{attempt}"
        await self._write(Intent(kind="model_call", step=step, attempt=attempt, result_id=rid))
        try:
            output = await self.agent.model.complete(history.view(), self.specs)
            if not isinstance(output, ModelOutput):
                raise TypeError(f"the model returned {type(output).__name__}, not ModelOutput")
        except (Exception, SystemExit) as exc:  # SystemExit: a model does not pick our exit code
            error = representable(f"{type(exc).__name__}: {exc}")
            spent = _usage_json(getattr(exc, "usage", None))
            await self._write(ModelCallResult(result_id=rid, output=None, error=error, usage=spent))
            if attempt >= self.walker.max_attempts:
                return  # the planner finishes the run: the budget is spent
            if not isinstance(exc, TransientModelError):
                raise ModelCallError(self.run_id, step, attempt, error) from exc
            backoff = self.agent.retry_backoff * 2 ** (attempt - 1)
            if exc.retry_after:
                backoff = max(backoff, min(exc.retry_after, MAX_RETRY_AFTER))
            await asyncio.sleep(backoff)
            return
        out = _storable(output.to_json())
        await self._write(ModelCallResult(result_id=rid, output=out, usage=_usage_json(output.usage)))
        history.append(assistant_turn(out, rid))

    async def _act(self, nxt: RunAction, history: _History) -> None:
        tool = self.tools.get(nxt.tool)
        if tool is None:
            if nxt.attempt > 1:
                raise RunMismatchError(self.run_id, "tools", nxt.tool, sorted(self.tools))
            known = ", ".join(sorted(self.tools)) or "none"
            observation = f"error: unknown tool {nxt.tool!r}; available tools: {known}"
            await self._complete(nxt.step, None, observation, True, nxt.tool, history)
            return
        invalid = tool.check_args(nxt.args) if nxt.attempt == 1 else None
        if invalid is not None:
            # Checked before the intent: arguments that do not fit the tool's
            # schema never reach it; the model reads why and may try again.
            await self._complete(nxt.step, None, f"error: {invalid}", True, nxt.tool, history)
            return
        rid = f"s{nxt.step}-a{nxt.attempt}"
        key = idempotency_key(self.run_id, nxt.step, nxt.tool, nxt.args)
        await self._write(
            Intent(
                kind="action",
                step=nxt.step,
                attempt=nxt.attempt,
                result_id=rid,
                tool=nxt.tool,
                args=nxt.args,
                replay=tool.replay,
                idempotency_key=key,
            )
        )
        ctx = ToolContext(self.run_id, nxt.step, nxt.attempt, rid, key, Artifacts(self, rid))
        await self._execute(tool, ctx, nxt.args, history)

    async def _execute(self, tool: Tool, ctx: ToolContext, args: dict[str, Any], history: _History) -> None:
        """Run an action whose intent is durable: precondition, the tool, and its outcome."""
        step, rid = ctx.step, ctx.result_id
        pre = tool.guards.precondition
        if pre is not None:
            # Recorded (durably) before the tool runs: an intent without this
            # record is an action that provably did not run.
            passed, reason = await _judge(pre, "precondition", args, ctx)
            await self._write(GuardCheck(result_id=rid, guard="precondition", passed=passed, reason=reason))
            if not passed:
                return  # the planner completes the step: AbortAction
        try:
            observation, is_error = await _invoke(tool, args, ctx)
        except _CancelledAfter as late:
            # The tool's thread ended after the run was cancelled: its outcome
            # is known, so record it rather than leave an unknown behind.
            await self._outcome(tool, step, rid, *late.outcome, history)
            raise asyncio.CancelledError() from None
        await self._outcome(tool, step, rid, observation, is_error, history)

    async def _outcome(
        self, tool: Tool, step: int, rid: str, observation: str, is_error: bool, history: _History
    ) -> None:
        if tool.guards.verify is not None and not is_error:
            # The step is not done until the target is read back (planner: Verify).
            await self._write(ActionResult(result_id=rid, observation=representable(observation)))
            return
        await self._complete(step, rid, observation, is_error, tool.name, history)

    async def _guarded(self, nxt: Any, history: _History) -> None:
        from ._guard_run import carry_out

        await carry_out(self, nxt, history)

    async def _complete(
        self, step: int, rid: str | None, observation: str, is_error: bool, tool: str, history: _History
    ) -> None:
        observation = _storable(observation)
        await self._write(StepCompleted(step=step, result_id=rid, observation=observation, is_error=is_error))
        model = self.walker.steps[step - 1].output
        assert model is not None
        history.append(_tool_turn(model.result_id, tool, observation))

    async def _finish(self, reason: FinishReason, text: str | None, error: str | None = None) -> RunResult:
        from ._agent import RunResult

        steps = self.walker.completed_steps
        await self._write(RunFinished(reason=reason, result=text, steps=steps, error=error))
        return RunResult(self.run_id, reason, text, steps, error)


def _storable(value: Any) -> Any:
    """`value` as the log will hold it: lone surrogates escaped (see `representable`).

    Checked with one C-level encode first: the recursive walk is for the
    rare value that needs it.
    """
    try:
        if isinstance(value, str):
            value.encode("utf-8")
        else:
            orjson.dumps(value)
        return value
    except (UnicodeEncodeError, TypeError):
        return representable(value)


async def _judge(fn: Any, what: str, *args: Any) -> tuple[bool, str | None]:
    """(passed, reason) of a precondition or verify; an exception fails it, with its text."""
    try:
        return guard_verdict(await call_guard(fn, *args))
    except asyncio.CancelledError:
        raise
    except (Exception, SystemExit) as exc:
        return False, f"the {what} raised {type(exc).__name__}: {exc}"


async def _invoke(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> tuple[str, bool]:
    """Run a tool; its failure is data (an error observation), never a crash of the run.

    An async tool is cancelled with the run (its outcome is then unknown,
    as after a crash). A synchronous tool runs in a thread that cancellation
    cannot stop. When
    the run is cancelled (Ctrl-C) meanwhile, this waits for the thread to end
    before letting the cancellation through, so the run's lock is never
    released while an action this process started may still be running; the
    outcome, known by then, is returned for the caller to record.
    """
    if tool.is_async:
        return await _call(tool, args, ctx)  # cancelled with the run, like any coroutine
    done = asyncio.ensure_future(_call(tool, args, ctx))
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(done)
            break
        except asyncio.CancelledError:
            if done.done() and done.cancelled():
                raise
            cancelled = True  # the thread runs on: wait for it, holding the run
    if cancelled:
        raise _CancelledAfter(result)
    return result


class _CancelledAfter(asyncio.CancelledError):
    """Cancelled while a tool thread ran; carries the outcome it reached meanwhile."""

    def __init__(self, outcome: tuple[str, bool]) -> None:
        super().__init__()
        self.outcome = outcome


async def _call(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> tuple[str, bool]:
    try:
        return observation_text(await tool.invoke(args, ctx)), False
    except asyncio.CancelledError:
        raise
    except (Exception, SystemExit) as exc:  # SystemExit: a tool does not pick polyloop's exit code
        return f"error: {type(exc).__name__}: {exc}", True
