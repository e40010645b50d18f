"""A user's loop on the run engine: the model calls and tool calls it asks for, intent first.

`Agent.run` drives a `_Run` (`polyloop._run.loop`) from the planner's verdicts;
`LoopSteps` lets a loop someone else wrote (by hand, Pydantic AI, ...) drive the
same `_Run`: the same opening (validity, crash loop, the `resumed` count), the
same records written the same way (`_Run.write`), the same model call
(`polyloop._run.model_call.call_model`, given the loop's own request), the same
tool execution (`_Run._prepare`, `_Run.execute`), approvals and stops. The
public face is `polyloop.durable`.

A user's loop is replayed from its start on every resume: what the log
already holds is handed back (no model call, no tool call), and the first
call past the log's end runs live under the planner's verdict. Each call the
loop asks for must be the one the log records at that point; the first that
is not raises `DivergenceError` before anything of it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from .._log.divergence import DivergenceError
from .._log.errors import AlertError, ApprovalRequiredError, InvalidInputError, NeedsOperatorError
from .._log.model_port import ModelOutput, ToolCall, Usage, _History
from .._log.records import ModelCallResult, StepCompleted
from .._recovery.plan import (
    AbortAction,
    AlertStop,
    AwaitDecision,
    CallModel,
    Complete,
    CompleteFinal,
    Decided,
    Finished,
    FinishAttempts,
    FinishBudget,
    FinishToolFailures,
    NeedsOperator,
    ReuseResolution,
    RunAction,
    StepCalls,
    plan,
)
from .._recovery.state import tool_calls_of
from .cancelling import ended_by, stop_if_asked
from .context import ToolContext
from .model_call import call_model
from .result import RunResult
from .artifacts import Artifacts
from .tools import Tool, _Guards

if TYPE_CHECKING:
    from .loop import _Run
    from .resume import Resume

NOT_CALLED = "error: the loop did not make this call"

# How `resume_run` asks for a run of a user's loop: it calls the loop's entry
# point, whose `polyloop.durable.open_run` of that run id resumes it this way
# (and whose `open_run_sync`, in a thread of its own, runs on resume's event loop).
_RESUMING: ContextVar[tuple[str, Resume, asyncio.AbstractEventLoop] | None] = ContextVar(
    "polyloop_resuming", default=None)


def resuming(run_id: str | None) -> Resume | None:
    """The resume `resume_run` asked for, when it is resuming `run_id` (None otherwise)."""
    asked = _RESUMING.get()
    return asked[1] if asked is not None and asked[0] == run_id else None


def resuming_loop(run_id: str | None) -> asyncio.AbstractEventLoop | None:
    """The event loop of the `resume_run` resuming `run_id`, for a synchronous loop's run outside it.

    That loop serves the store resume was given (a `PostgresStore` serves one
    event loop); None when this thread runs an event loop itself, or nothing resumes `run_id`.
    """
    asked = _RESUMING.get()
    if asked is None or asked[0] != run_id or not asked[2].is_running():
        return None
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asked[2]
    return None


@contextlib.contextmanager
def resume_as(run_id: str, resume: Resume) -> Iterator[None]:
    """While the block runs, `open_run(run_id)` resumes with `resume`'s options."""
    token = _RESUMING.set((run_id, resume, asyncio.get_running_loop()))
    try:
        yield
    finally:
        _RESUMING.reset(token)


class RunEnded(Exception):
    """The run ended while a user's loop asked for a call: its budget was spent, or it was cancelled.

    Attributes:
        result: how it ended (`RunResult`; `run_finished` is durable).
    """

    def __init__(self, result: RunResult) -> None:
        self.result = result
        super().__init__(f"run {result.run_id!r} ended ({result.reason})")


@dataclass(frozen=True, slots=True)
class Reply:
    """A model's answer as a user's loop hands it to the log, and as the log hands it back.

    Attributes:
        calls: the tool calls it asks for, `(name, args)` pairs, in order; none: a final answer.
        text: its text (the final answer when there is no call).
        raw: the loop's own form of the answer (any JSON value), returned on replay as recorded.
        usage: the tokens it spent, when known.
        replayed: True when it came from the log (no model was called).
    """

    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    text: str | None = None
    raw: Any = None
    usage: Usage | None = None
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """A tool call's outcome: the observation text the log records, and whether it is an error.

    `replayed` is True when it came from the log (nothing ran).
    """

    text: str
    is_error: bool = False
    replayed: bool = False


class _Answer(ModelOutput):
    """A `ModelOutput` that also carries the loop's own form of the answer (`output.raw`, log format 1.4)."""

    __slots__ = ("raw",)

    def __init__(self, reply: Reply) -> None:
        calls = [ToolCall(name, dict(args)) for name, args in reply.calls]
        super().__init__(text=reply.text, tool_calls=calls, usage=reply.usage)
        object.__setattr__(self, "raw", reply.raw)

    def to_json(self) -> dict[str, Any]:
        doc = super().to_json()
        if self.raw is not None:
            doc["raw"] = self.raw
        return doc


class StepTool(Tool):
    """A tool of a user's loop: its policy, and the function each call runs (given by the loop)."""

    def __init__(self, name: str, *, replay: str = "never", approval: Any = None,
                 irreversible: bool = False, description: str = "") -> None:
        if replay not in ("safe", "never"):
            raise ValueError(f"replay must be 'safe' or 'never', not {replay!r}")
        if approval is not None and approval != "required" and not callable(approval):
            raise ValueError(f"approval must be 'required', a predicate on the arguments or None, not {approval!r}")
        self.irreversible = irreversible
        self.concurrent = False
        self.approval = approval
        self.question = False
        self.max_failures = None
        self.guards = _Guards()
        self.fn = _never_called
        self.name = name
        self.description = description
        self.replay = replay  # type: ignore[assignment]
        self.is_async = True
        self._checked = {}
        self.parameters = {"type": "object"}
        self.calls: dict[tuple[int, int | None], Callable[[dict[str, Any]], Any]] = {}

    def check_args(self, args: Any) -> str | None:
        return None  # the loop's framework checked them

    async def invoke(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        fn = self.calls.pop((ctx.step, ctx.call))
        value = fn(dict(args))
        if inspect.isawaitable(value):
            value = await value
        return value


def _never_called(**_: Any) -> Any:
    raise RuntimeError("a loop's tool runs the function its tool_call gives")


class LoopSteps:
    """A user's loop driving one open run: `model_call`, `tool_call`, `finish` (one call at a time)."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.walker = run.walker
        self.run_id = run.run_id
        self.step = 0  # the step of the loop's last model call
        self.claimed: set[int] = set()  # the calls (1-based) of that step the loop made
        self.history = _History()  # what `_Run` appends to; a user's loop keeps its own
        self._lock = asyncio.Lock()

    # -- model calls ---------------------------------------------------------------

    async def model_call(self, ask: Callable[[], Awaitable[Reply]]) -> Reply:
        async with self._lock:
            if self.step and not tool_calls_of(self.walker.steps[self.step - 1].output):
                raise InvalidInputError(
                    f"run {self.run_id!r}: a model reply without tool calls is the final answer (step "
                    f"{self.step}); the loop must finish there, not call the model again")
            await self._close_step()
            n, w = self.step + 1, self.walker
            live = False
            while True:
                if len(w.steps) >= n and w.steps[n - 1].output is not None:
                    self.step, self.claimed = n, set()
                    return reply_of(w.steps[n - 1].output, replayed=not live)
                planned = plan(w)
                if not isinstance(planned, CallModel):
                    await self._stop(planned, f"a model call at step {n}")
                    continue
                if (stopped := await stop_if_asked(self.run)) is not None:
                    raise RunEnded(stopped)
                live = True

                async def answer() -> ModelOutput:
                    reply = await ask()
                    if not isinstance(reply, Reply):
                        raise TypeError(f"a loop's model call returned {type(reply).__name__}, not Reply")
                    answer = _Answer(reply)
                    try:
                        orjson.dumps(answer.to_json())
                    except TypeError as exc:  # a failed model call, not the store's failure to write it
                        raise TypeError(f"a loop's reply must be JSON (its calls' args, its raw): {exc}") from None
                    return answer

                refused = await call_model(self.run, self.run.outage, [], planned, self.history, answer)
                if refused is not None:
                    raise RunEnded(await self.run._finish("error", None, error=refused))

    async def _stop(self, planned: Any, asked: str) -> None:
        """Carry out a verdict that is not the call asked for: end, stop for a person, or refuse."""
        run = self.run
        if isinstance(planned, FinishBudget):
            raise RunEnded(await run._finish("max_steps", None))
        if isinstance(planned, FinishAttempts):
            error = f"the model call of step {planned.step} failed {planned.attempts} times"
            raise RunEnded(await run._finish("error", None, error=error))
        if isinstance(planned, FinishToolFailures):
            raise RunEnded(await run._finish("tool_failures", None, error=f"tool {planned.tool!r} failed"))
        if isinstance(planned, NeedsOperator):
            raise NeedsOperatorError(self.run_id, planned.executions)
        if isinstance(planned, AwaitDecision):
            raise ApprovalRequiredError(self.run_id, planned.requests)
        if isinstance(planned, AlertStop):
            raise AlertError(self.run_id, planned.executions)
        if isinstance(planned, Finished):
            f = self.walker.finished
            assert f is not None
            raise RunEnded(RunResult(self.run_id, f.reason, f.result, f.steps, ended_by(f), already_finished=True))
        raise DivergenceError(self.run_id, self.step or 1, _expected(planned), asked)

    # -- closing a step ------------------------------------------------------------

    async def _close_step(self) -> None:
        """Before the loop's next model call (or its end): check or complete its current step."""
        s = self.step
        if s == 0:
            return
        st = self.walker.steps[s - 1]
        calls = tool_calls_of(st.output)
        if st.completed is not None:
            for k in range(1, len(calls) + 1):
                if k not in self.claimed and _ran(st, k):
                    raise DivergenceError(self.run_id, s, _call_text(calls[k - 1]), "the next model call")
            return
        if not calls:
            await self.run.write(StepCompleted(step=s, result_id=None, observation=None))
            return
        for k in range(1, len(calls) + 1):
            if k not in self.claimed and (st.attempts(k if st.calls is not None else None)):
                raise DivergenceError(self.run_id, s, _call_text(calls[k - 1]), "the next model call")
        if st.calls is None:
            await self.run.complete(s, None, NOT_CALLED, True, calls[0]["name"], self.history)
            return
        planned = plan(self.walker)
        if not isinstance(planned, StepCalls):
            await self._stop(planned, "the next model call")
        for k in range(1, len(calls) + 1):
            if k not in self.claimed:
                self.run.refused[(s, k)] = NOT_CALLED
        await self.run._complete_calls(planned, self.history)

    # -- tool calls ----------------------------------------------------------------

    async def tool_call(self, name: str, args: dict[str, Any], fn: Callable[[dict[str, Any]], Any]) -> Outcome:
        async with self._lock:
            tool = self.run.tools.get(name)
            if not isinstance(tool, StepTool):
                raise InvalidInputError(f"tool {name!r} was not declared when the run was opened (tools=...)")
            s = self.step
            st = self.walker.steps[s - 1] if s else None
            calls = tool_calls_of(st.output) if st is not None else []
            k = next((k for k, c in enumerate(calls, 1)
                      if k not in self.claimed and c["name"] == name and c["args"] == args), None)
            if st is None or k is None:
                recorded = ", ".join(_call_text(c) for i, c in enumerate(calls, 1) if i not in self.claimed)
                raise DivergenceError(self.run_id, max(s, 1), recorded or "no further tool call",
                                      f"tool call {_call_text({'name': name, 'args': args})}")
            self.claimed.add(k)
            if st.completed is not None:
                return _recorded(st, k)
            call = k if st.calls is not None else None
            tool.calls[(s, call)] = fn
            try:
                return await (self._one_of_several(s, k) if call is not None else self._only_call(s))
            finally:
                tool.calls.pop((s, call), None)

    async def _only_call(self, s: int) -> Outcome:
        run, st = self.run, self.walker.steps[s - 1]
        while st.completed is None:
            planned = plan(self.walker)
            if isinstance(planned, RunAction):
                await run._act(planned, self.history)
            elif isinstance(planned, ReuseResolution):
                await run.complete(s, planned.result_id, planned.observation, False, planned.tool, self.history)
            elif isinstance(planned, Decided):
                await run.complete(s, None, planned.observation, planned.is_error, planned.tool, self.history)
            else:
                await self._stop(planned, "the tool call")
        return Outcome(st.completed.observation or "", bool(st.completed.is_error))

    async def _one_of_several(self, s: int, k: int) -> Outcome:
        run = self.run
        while True:
            planned = plan(self.walker)
            if not isinstance(planned, StepCalls):
                await self._stop(planned, "the tool call")
                continue
            move = planned.moves[k - 1]
            settled = _settled(move)
            if settled is not None:
                return settled
            if not isinstance(move, RunAction):
                await self._stop(move, "the tool call")
            if move.why == "first":
                requests = [p for m in planned.moves if isinstance(m, RunAction) and m.why == "first"
                            for p in [run._prepare(m)] if not isinstance(p, (str, tuple))]
                if requests:
                    for request in requests:  # every request of the step before the run says it waits
                        await run.write(request)
                    continue  # the planner now says AwaitDecision
            prepared = run._prepare(move)
            assert isinstance(prepared, tuple), prepared
            tool, intent = prepared
            await run.write(intent)
            assert intent.idempotency_key is not None
            ctx = ToolContext(run.run_id, intent.step, intent.attempt, intent.result_id,
                              intent.idempotency_key, intent.call, Artifacts(run, intent.result_id))
            await run.execute(tool, ctx, move.args, self.history)

    # -- the end -------------------------------------------------------------------

    async def finish(self, text: str | None) -> RunResult:
        async with self._lock:
            w = self.walker
            if w.finished is not None and self.step >= len(w.steps):
                f = w.finished
                return RunResult(self.run_id, f.reason, f.result, f.steps, ended_by(f), already_finished=True)
            if len(w.steps) > self.step:
                raise DivergenceError(self.run_id, self.step + 1, f"a model call at step {self.step + 1}",
                                      "the end of the run")
            st = w.steps[self.step - 1] if self.step else None
            if st is None or tool_calls_of(st.output):
                raise InvalidInputError(
                    "a loop finishes after a model reply without tool calls (the final answer); "
                    f"run {self.run_id!r} is at step {self.step}, whose reply asked for tool calls")
            await self._close_step()
            return await self.run._finish("final_answer", text)


def reply_of(output: ModelCallResult, *, replayed: bool) -> Reply:
    """The `Reply` a model call's recorded result stands for."""
    out = output.output or {}
    calls = tuple((c["name"], c["args"]) for c in tool_calls_of(output))
    usage = Usage.from_json(output.usage) if output.usage else None
    return Reply(calls, out.get("text"), out.get("raw"), usage, replayed)


def _ran(st: Any, k: int) -> bool:
    """Whether call `k` of a completed step ran (or was settled by a person) as the log records it."""
    done = st.completed
    if done.calls is not None:
        return done.calls[k - 1].get("result_id") is not None
    return done.result_id is not None


def _recorded(st: Any, k: int) -> Outcome:
    done = st.completed
    if done.calls is not None:
        c = done.calls[k - 1]
        return Outcome(c["observation"], bool(c["is_error"]), replayed=True)
    return Outcome(done.observation or "", bool(done.is_error), replayed=True)


def _settled(move: Any) -> Outcome | None:
    """The outcome of a call of a step of several whose outcome the planner says is known."""
    if isinstance(move, AbortAction):
        return Outcome(f"error: {move.tool} did not run: its precondition failed: {move.reason}", True)
    if isinstance(move, ReuseResolution):
        return Outcome(move.observation, False)
    if isinstance(move, (Decided, Complete)):
        return Outcome(move.observation, move.is_error)
    return None


def _call_text(call: dict[str, Any]) -> str:
    return f"{call['name']}({_short(call['args'])})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _expected(planned: Any) -> str:
    if isinstance(planned, CallModel):
        return f"a model call at step {planned.step}"
    if isinstance(planned, (RunAction, StepCalls)):
        return f"the tool calls of step {planned.step}"
    if isinstance(planned, CompleteFinal):
        return f"the end of the run after step {planned.step}"
    return type(planned).__name__
