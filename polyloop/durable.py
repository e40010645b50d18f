"""Durable steps for any agent loop: keep your loop, record each model call and tool call on a PolyLoop log.

    async with polyloop.durable.open_run("r1", store=store, goal=prompt, target="app:main",
                                         tools={"pay": "never", "lookup": "safe"}) as run:
        while True:
            reply = await run.model_call(lambda: ask_my_model(history))
            if not reply.calls:
                return await run.finish(reply.text)
            for name, args in reply.calls:
                outcome = await run.tool_call(name, args, my_tools[name])

Each call writes an intent before it runs and its result after, exactly as
`polyloop.Agent` does (it drives the same engine). On a resume the loop runs
again from its start: what the log holds is handed back (`replayed=True`: no
model call, no tool call), an unknown `safe` call runs again, an unknown
`never` call stops for an operator (`NeedsOperatorError`), and a call that
waits for a person stops (`ApprovalRequiredError`) until `polyloop approve`
or `deny`. A call the log does not record at that point raises
`DivergenceError` (exit code 4). See docs/how-to/keep-your-agent-framework.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ._log.divergence import DivergenceError
from ._log.errors import InvalidInputError
from ._log.store_port import Store
from ._run.agent import Agent, _ask, default_directory, opened
from ._run.result import RunResult
from ._run.resume import Resume
from ._run.steps import LoopSteps, Outcome, Reply, RunEnded, StepTool, resuming, resuming_loop
from ._run.target import canonical_target
from ._run.tools import Approval, Replay
from .stores._jsonl import JsonlStore

__all__ = [
    "DivergenceError",
    "DurableRun",
    "Outcome",
    "Reply",
    "RunEnded",
    "SyncRun",
    "ToolPolicy",
    "open_run",
    "open_run_sync",
]

LOOP = "own"
"""`run_started.config.loop` of a run of a user's loop (log format 1.4)."""


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """What PolyLoop must know of one tool of a user's loop.

    Attributes:
        replay: `"never"` (default: an unknown outcome stops for an operator)
            or `"safe"` (an unknown outcome runs the call again).
        approval: `"required"`, a predicate on the arguments (a true value
            requires approval), or None; a call that needs it waits for
            `polyloop approve` / `deny`, nothing of it runs before.
        irreversible: the call cannot be undone; without an `approval` of its
            own it then waits for approval too.
        description: recorded in the configuration (its hash is compared on resume).
    """

    replay: Replay = "never"
    approval: Approval = None
    irreversible: bool = False
    description: str = ""


class _Fingerprint:
    """The loop's configuration as `run_started.config.model` records it (compared on resume)."""

    def __init__(self, fingerprint: Any) -> None:
        self.fingerprint = fingerprint

    def describe(self) -> dict[str, Any]:
        return {"type": "loop", "fingerprint": self.fingerprint}


class _LoopAgent(Agent):
    """The configuration of a user's loop, recorded and compared as an `Agent`'s is."""

    _loop = LOOP

    def config(self, max_steps: int | None = None, *, inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {**super().config(max_steps, inputs=inputs), "loop": LOOP}


class DurableRun:
    """One open run of a user's loop. Calls are made one at a time, in the loop's order.

    Attributes:
        run_id: the run.
        goal: what the run is for (recorded in `run_started`).
    """

    def __init__(self, steps: LoopSteps) -> None:
        self._steps = steps
        started = steps.walker.started
        assert started is not None
        self.run_id = steps.run_id
        self.goal: str = started.goal

    @property
    def finished(self) -> RunResult | None:
        """How the run ended, when its log already says it did (then nothing runs)."""
        f = self._steps.walker.finished
        if f is None:
            return None
        return RunResult(self.run_id, f.reason, f.result, f.steps, None, already_finished=True)

    async def model_call(self, fn: Callable[[], Any]) -> Reply:
        """The loop's next model call: `fn()` (sync or async) returns a `Reply`.

        A call the log holds is returned from it (`replayed=True`; `fn` is not
        called); else the intent is made durable, `fn` runs, and its reply is
        recorded (`reply.raw`, any JSON value, is handed back as it was
        recorded). A failure of `fn` is recorded and retried as `Agent` does
        (`max_attempts`, transient failures with backoff). Before it, the
        loop's previous step is completed: a tool call it asked for that the
        loop did not make is recorded as not made (`error: the loop did not make this call`).

        Raises:
            DivergenceError: the log records something else at this point.
            RunEnded: the run ended (its budget spent, or cancelled).
            ModelCallError, ModelUnavailableError, StoreError: as `Agent.run`.
        """

        async def ask() -> Reply:
            value = fn()
            return await value if inspect.isawaitable(value) else value

        return await self._steps.model_call(ask)

    async def tool_call(self, name: str, args: dict[str, Any], fn: Callable[[dict[str, Any]], Any]) -> Outcome:
        """One tool call the last reply asked for: `fn(args)` (sync or async) runs it.

        Its value becomes the observation text (a string as is, anything else
        as JSON); an exception becomes an error observation (`is_error=True`).
        Done calls are returned from the log (`replayed=True`); an unknown
        `safe` call runs again, an unknown `never` call raises
        `NeedsOperatorError`; a call that needs approval records its request
        and raises `ApprovalRequiredError`; an approved call runs with the
        approved arguments, a denied one returns the denial (`is_error=True`).

        Raises:
            DivergenceError: the last reply (as the log records it) has no such call left.
            InvalidInputError: `name` was not declared in `tools`.
        """
        return await self._steps.tool_call(name, args, fn)

    async def finish(self, text: str | None) -> RunResult:
        """End the run with its final answer (`run_finished` is durable when this returns).

        Raises:
            DivergenceError: the log records more steps than the loop made.
            InvalidInputError: the last reply asked for tool calls.
        """
        return await self._steps.finish(text)


@contextlib.asynccontextmanager
async def open_run(
    run_id: str | None = None,
    *,
    store: Store | None = None,
    goal: str | None = None,
    tools: Mapping[str, ToolPolicy | str] | None = None,
    fingerprint: Any = None,
    inputs: Mapping[str, Any] | None = None,
    target: str | None = None,
    max_steps: int = 1000,
    max_attempts: int = 6,
    retry_backoff: float = 1.0,
    retry_max_delay: float = 60.0,
    logic_version: str | None = None,
    max_resumes_without_progress: int | None = 5,
    new: bool = False,
    accept_changes: bool = False,
    accept_crash_loop: bool = False,
    reason: str | None = None,
    by: str | None = None,
) -> AsyncIterator[DurableRun]:
    """Open a run of your own loop (start it, or resume it when `run_id` has a log), held until the block ends.

    Args:
        run_id: a safe file name; generated when omitted.
        store: where the log lives (`JsonlStore(default_directory())` by default).
        goal: what the run is for; required for a new run, compared when resuming.
        tools: every tool the loop may call, `{name: ToolPolicy or "safe"/"never"}`.
        fingerprint: any JSON value naming the loop's configuration (model,
            system prompt, settings...): recorded, and a change refuses the
            resume (`CheckpointError`) unless accepted.
        inputs, logic_version, max_resumes_without_progress, new,
        accept_changes, accept_crash_loop, reason, by: as for `Agent.run` and `Agent`.
        target: your entry point (`module:function` or `file.py:function`),
            recorded so that `polyloop resume ID` calls
            `function(run_id=..., store=..., goal=...)` (async or sync).
        max_steps: the step budget (one step: one model reply and its tool calls).
        max_attempts, retry_backoff, retry_max_delay: as for `Agent`.

    Raises:
        everything `Agent.run` raises before its loop runs (`CheckpointError`,
        `CrashLoopError`, `RunActiveError`, `RunMismatchError`, ...), and
        `InvalidInputError` for a bad tool policy.
    """
    agent = _LoopAgent(
        model=_Fingerprint(fingerprint), tools=[_step_tool(n, p) for n, p in (tools or {}).items()],
        max_steps=max_steps, max_attempts=max_attempts, retry_backoff=retry_backoff,
        retry_max_delay=retry_max_delay, logic_version=logic_version, max_tool_failures=None,
        max_resumes_without_progress=max_resumes_without_progress,
    )
    agent._origin = _entry_file(target)  # what `logic_version="auto"` hashes first
    if store is None:
        store = JsonlStore(default_directory())
    resume = resuming(run_id) or Resume(inputs, accept_changes, accept_crash_loop, reason, by)
    ask = _ask(agent, goal, run_id, target=canonical_target(target) if target else None, max_steps=None,
               new=new, inputs=inputs if inputs is not None else resume.inputs, resume=resume)
    async with opened(agent, store, ask, resume) as run:  # refuses a run a polyloop.Agent started
        await run.open()
        yield DurableRun(LoopSteps(run))


def _entry_file(target: str | None) -> str | None:
    if not target:
        return None
    where = target.rpartition(":")[0]
    if where.endswith(".py") or "/" in where:
        return where
    module = sys.modules.get(where)
    return getattr(module, "__file__", None)


def _step_tool(name: str, policy: ToolPolicy | str) -> StepTool:
    if isinstance(policy, str):
        policy = ToolPolicy(replay=policy)  # type: ignore[arg-type]
    if not isinstance(policy, ToolPolicy):
        raise InvalidInputError(f"the policy of tool {name!r} must be a ToolPolicy, 'safe' or 'never', not {policy!r}")
    try:
        return StepTool(name, replay=policy.replay, approval=policy.approval, irreversible=policy.irreversible,
                        description=policy.description)
    except ValueError as exc:
        raise InvalidInputError(f"tool {name!r}: {exc}") from None


# -- the same, for a synchronous loop ----------------------------------------------


class SyncRun:
    """`DurableRun` for a synchronous loop (`open_run_sync`): the same methods, blocking."""

    def __init__(self, run: DurableRun, portal: _Portal) -> None:
        self._run, self._portal = run, portal
        self.run_id, self.goal = run.run_id, run.goal

    @property
    def finished(self) -> RunResult | None:
        return self._run.finished

    def model_call(self, fn: Callable[[], Reply]) -> Reply:
        return self._portal.call(self._run.model_call(fn))

    def tool_call(self, name: str, args: dict[str, Any], fn: Callable[[dict[str, Any]], Any]) -> Outcome:
        return self._portal.call(self._run.tool_call(name, args, fn))

    def finish(self, text: str | None) -> RunResult:
        return self._portal.call(self._run.finish(text))


class _Portal:
    """An event loop in a thread of its own, where a synchronous loop's run is held and written.

    Under `polyloop resume` (its entry point called in a thread) it is resume's
    own event loop instead, which serves the store resume gave the loop.
    """

    def __init__(self, run_id: str | None = None) -> None:
        self.thread: threading.Thread | None = None
        host = resuming_loop(run_id)
        if host is not None:
            self.loop = host
            return
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="polyloop-durable", daemon=True)
        self.thread.start()

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        if self.thread is None:
            return  # resume's loop: not ours to stop
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@contextlib.contextmanager
def open_run_sync(run_id: str | None = None, **options: Any) -> Iterator[SyncRun]:
    """`open_run` for a synchronous loop: the same arguments; the calls block.

    The run is held, and its records written, on an event loop in a thread
    of its own; the loop's functions run there, one at a time. Under
    `polyloop resume` (which calls a synchronous entry point in a thread) that
    event loop is resume's own, the one the store it hands the loop serves.
    """
    portal = _Portal(run_id)
    try:
        cm = open_run(run_id, **options)
        run = portal.call(cm.__aenter__())
        try:
            yield SyncRun(run, portal)
        except BaseException as exc:
            if not portal.call(cm.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            portal.call(cm.__aexit__(None, None, None))
    finally:
        portal.close()
