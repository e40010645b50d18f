"""The agent: a model with tools, and `Agent.run`, which starts or resumes a run."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .artifacts import check_artifacts
from .._recovery.walker import max_steps_of
from .._log.errors import InvalidInputError, RunExistsError, RunMismatchError, StoreError, PolyLoopError
from .._log.ids import check_run_id, new_run_id
from .hold import held, read_or_none, walk_checked
from .._log.model_port import Model
from .._log.records import RunStarted, encode
from .result import RunResult
from .resume import Resume
from .._log.store_port import Store
from ..stores._jsonl import JsonlStore
from .loop import _Run
from .sources import run_on
from .tool_source import ToolSource, expand, using
from .tools import Tool
from .validity import checkpoint_config

DEFAULT_DIRECTORY = "runs"


def default_directory() -> str:
    """Where runs live unless told otherwise: `$POLYLOOP_DIR`, else `./runs`."""
    return os.environ.get("POLYLOOP_DIR") or DEFAULT_DIRECTORY


class Agent:
    """A model with tools, run step by step on a durable intent log.

    Args:
        model: anything implementing the `Model` protocol (e.g. `ScriptedModel`).
        tools: the tools the model may call (made with `@tool`), and tool
            sources: an MCP server (`polyloop.mcp.MCPServer`) stands for its
            tools, listed on first need (see docs/how-to/use-mcp-tools.md).
        max_steps: the step budget; reaching it ends the run with reason `max_steps`.
        system: an optional system prompt placed first in the history.
        max_attempts: model call attempts one step may use (across crashes
            and resumes) before the run ends with reason `error`. It is also
            the retry budget for outages: once this many transient failures
            of a step (connection refused, timeout, 429, 5xx, overloaded)
            came in a row in one process, the run stops resumable
            (`run_stopped`, `ModelUnavailableError`, exit code 5) instead of
            ending; resume gives it a fresh budget. See
            docs/explanation/transient-failures.md.
        retry_backoff: seconds of the first backoff after a transient model
            failure; each further failure in a row doubles the ceiling, and the
            delay is drawn uniformly below it (full jitter).
        retry_max_delay: the longest backoff, in seconds, and the longest
            `Retry-After` honoured (default 60).
        on_alert: called (sync or async) with one dict when a guarded
            action's verification fails (`"event": "verification_failed"`)
            or its rollback fails (`"rollback_failed"`), after the alert's
            durable record is written; keys `event`, `run_id`, `step`,
            `result_id`, `tool`, `args`, `idempotency_key`, `reason`,
            `rollback`, `redelivered`. Use it to page someone. When a crash
            came between the record and the call, resume calls it again
            before the rollback runs (`redelivered: True`); before an
            alert-kind stop the call may be lost, never the record
            (`polyloop inspect` lists it, resume stops again). An
            exception it raises stops the run, which stays resumable.
        approve_irreversible: every call of an `irreversible=True` tool that
            declares no `approval` of its own waits for a person's approval
            (default). Pass False to opt out explicitly; the opt-out is
            recorded in `run_started` (`config.approve_irreversible: false`).
        logic_version: what the run's logic is, recorded at the start and
            compared on every resume (a change refuses the resume with
            `CheckpointError`): a string you bump on release, `"auto"` (a
            SHA-256 of the source files of the module that built the agent,
            its tools' modules and its model's module; see
            docs/how-to/change-an-agent-safely.md for what that misses), or
            None (recorded as null; compared all the same).
        max_tool_failures: the default failure budget of every tool: a tool
            that returns an error observation this many times in a row in
            one run ends it with reason `tool_failures`. A tool's own
            `@tool(max_failures=N)` wins. None: no budget.
        max_resumes_without_progress: the crash-loop budget: once a run was
            resumed this many times without completing a step, the next
            resume stops with `CrashLoopError` (exit code 3) until a person
            lifts it. None: no budget.
    """

    # What `run_started.config.loop` its runs record: None for this built-in
    # loop, "own" for a user's loop (`polyloop.durable`). A run is only ever
    # opened by the kind of loop that started it.
    _loop: str | None = None

    def __init__(
        self,
        *,
        model: Model,
        tools: Iterable[Tool | ToolSource] = (),
        max_steps: int = 20,
        system: str | None = None,
        max_attempts: int = 6,
        retry_backoff: float = 1.0,
        retry_max_delay: float = 60.0,
        on_alert: Callable[[dict[str, Any]], Any] | None = None,
        approve_irreversible: bool = True,
        logic_version: str | None = None,
        max_tool_failures: int | None = 3,
        max_resumes_without_progress: int | None = 5,
    ) -> None:
        if type(approve_irreversible) is not bool:
            raise TypeError("approve_irreversible must be True or False")
        _check_count("max_steps", max_steps)
        _check_count("max_attempts", max_attempts)
        for name, delay in (("retry_backoff", retry_backoff), ("retry_max_delay", retry_max_delay)):
            if type(delay) not in (int, float) or not 0 <= delay < float("inf"):
                raise InvalidInputError(f"{name} must be a number of seconds, 0 or more, not {delay!r}")
        for name, value in (("max_tool_failures", max_tool_failures),
                            ("max_resumes_without_progress", max_resumes_without_progress)):
            if value is not None:
                _check_count(name, value)
        if logic_version is not None and (not isinstance(logic_version, str) or not logic_version):
            raise InvalidInputError(f"logic_version must be a non-empty string, 'auto' or None, not {logic_version!r}")
        self.logic_version = logic_version
        self.max_tool_failures = max_tool_failures
        self.max_resumes_without_progress = max_resumes_without_progress
        # Where the agent was built: the first file `logic_version="auto"` hashes.
        self._origin: str | None = sys._getframe(1).f_code.co_filename
        self.model = model
        self.tools = tools  # type: ignore[assignment]  # the setter keeps sources (MCP servers) for later
        self.max_steps = max_steps
        self.system = system
        self.max_attempts = max_attempts
        self.retry_backoff = retry_backoff
        self.retry_max_delay = retry_max_delay
        self.on_alert = on_alert
        self.approve_irreversible = approve_irreversible

    @property
    def tools(self) -> list[Tool]:
        """The agent's tools; a tool source's (an MCP server's) are listed on first need."""
        if self._tools is None or any(s.stale() for s in self.sources):
            self._tools = expand(self._declared)
        return self._tools

    @tools.setter
    def tools(self, tools: Iterable[Tool | ToolSource]) -> None:
        declared = list(tools)
        for t in declared:
            if not isinstance(t, (Tool, ToolSource)):
                raise TypeError(f"{t!r} is not a tool: decorate it with @polyloop.tool")
        self._declared = declared
        self.sources = [t for t in declared if isinstance(t, ToolSource)]
        self._tools = None if self.sources else expand(declared)

    def config(self, max_steps: int | None = None, *, inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The configuration recorded in `run_started`.

        Since log format 1.2 it also holds what `resume` compares: the
        logic version, a SHA-256 per input (`inputs`, see `run`) and per
        part of this configuration, and the retry budgets.

        Raises:
            InvalidInputError: an input cannot be read.
        """
        describe = getattr(self.model, "describe", None)
        model = describe() if callable(describe) else {"type": type(self.model).__name__}
        config = {
            "max_steps": max_steps or self.max_steps,
            "system": self.system,
            "model": model,
            "tools": [_tool_config(t, self.approve_irreversible) for t in self.tools],
            "max_attempts": self.max_attempts,
            "max_tool_failures": self.max_tool_failures,
            "max_resumes_without_progress": self.max_resumes_without_progress,
            **checkpoint_config(self, inputs),
        }
        if not self.approve_irreversible:  # the explicit opt-out is part of the record
            config["approve_irreversible"] = False
        return config

    async def run(
        self,
        goal: str | None = None,
        *,
        run_id: str | None = None,
        store: Store | None = None,
        target: str | None = None,
        max_steps: int | None = None,
        new: bool = False,
        inputs: Mapping[str, Any] | None = None,
        accept_changes: bool = False,
        accept_crash_loop: bool = False,
        reason: str | None = None,
        by: str | None = None,
    ) -> RunResult:
        """Run towards `goal`; with a `run_id` that has a log, resume that run.

        Resuming skips done executions and reuses their recorded results (no
        model call, no tool call), re-issues unknown model calls as new
        attempts, replays unknown `safe` actions, honours operators'
        resolutions, carries guarded actions on (docs/how-to/guard-a-side-effect.md:
        a pending precondition is checked, a verification run, a rollback
        run, an unknown execution reconciled) and stops at unknown `never`
        actions and at alerts. A finished run is
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
            inputs: what the run depends on, `{name: path or bytes}`: a
                file, a directory (hashed over its relative paths and
                contents) or bytes. A new run records a SHA-256 of each (and
                the path); a resume compares them again, re-reading each
                recorded path unless `inputs` is given (then exactly these
                are the run's inputs now).
            accept_changes: when resuming, accept every difference of the
                checkpoint (inputs, logic version, configuration) on the
                record (`checkpoint_accepted`) instead of refusing; needs
                `reason`. Without a difference it writes nothing.
            accept_crash_loop: when resuming a run stopped as a crash loop,
                lift the stop on the record (`crash_loop_accepted`); needs
                `reason`.
            reason: why (written to the log with an acceptance).
            by: who accepts (and who resumed); default `user@host`.

        Returns:
            The `RunResult`; `run_finished` is durable before it is returned.

        Raises:
            InvalidRunIdError: the run id is not a safe file name.
            NeedsOperatorError: an unknown `never` action (or rollback) must be
                settled first; its subclass `AlertError`: a failed verification
                that no rollback undid must be settled first.
            CorruptLogError: the log cannot come from a correct writer.
            RunActiveError: another process holds the run.
            RunExistsError: `new=True` and the run id already has a log.
            RunMismatchError: `goal` or `max_steps` differ from the recorded ones.
            CheckpointError: resuming, an input, the logic version or the
                configuration changed since the start (nothing was written).
            CrashLoopError: resuming, the run was resumed its crash-loop
                budget of times without completing a step (nothing was written).
            InvalidInputError: an input or an acceptance's reason is bad, or the run is a user's loop's.
            ModelCallError: the model call failed; the run stays resumable.
            StoreError: the store failed; the run stops and stays resumable.
            CheckpointError: resuming, a product the run referenced is missing
                or altered (docs/how-to/keep-intermediate-products.md); nothing ran.
        """
        if store is None:
            store = JsonlStore(default_directory())
        resume = Resume(inputs, accept_changes, accept_crash_loop, reason, by)
        async with using(self.sources):  # an MCP server started for the configuration closes with the run
            ask = _ask(self, goal, run_id, target=target, max_steps=max_steps, new=new, inputs=inputs, resume=resume)
            return await _start_or_resume(self, store, ask, resume)


@dataclass(frozen=True, slots=True)
class _Ask:
    """What `Agent.run` was asked, checked before anything is read or written."""

    run_id: str
    goal: str | None
    max_steps: int | None
    new: bool
    started: RunStarted | None  # what a new run records (None: no goal was given)
    unreadable: InvalidInputError | None  # refuses a new run; a resume names it as a difference


def _ask(
    agent: Agent, goal: str | None, run_id: str | None, *, target: str | None, max_steps: int | None,
    new: bool, inputs: Mapping[str, Any] | None, resume: Resume,
) -> _Ask:
    run_id = check_run_id(run_id) if run_id is not None else new_run_id()
    if max_steps is not None:
        _check_count("max_steps", max_steps)
    resume.check()
    started = None
    unreadable: InvalidInputError | None = None
    if goal is not None:
        # Everything a new run would record is checked before the first
        # byte (lock file included) is written.
        try:
            config = agent.config(max_steps, inputs=inputs)
        except InvalidInputError as exc:
            unreadable, config = exc, {}
        started = RunStarted(run_id=run_id, goal=goal, target=target, config=config)
        try:
            encode(started)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"run {run_id!r} cannot be recorded: {exc}") from None
    return _Ask(run_id, goal, max_steps, new, started, unreadable)


async def _start_or_resume(agent: Agent, store: Store, ask: _Ask, resume: Resume | None) -> RunResult:
    """Hold the run, start it (no log yet) or walk its log, check it is the run asked for, and go."""
    async with opened(agent, store, ask, resume) as run:
        return await run_on(agent, run)


@contextlib.asynccontextmanager
async def opened(agent: Agent, store: Store, ask: _Ask, resume: Resume | None) -> AsyncIterator[_Run]:
    """The run asked for, held until the block ends: started (no log yet) or walked and checked.

    The one way into a run for the built-in loop (`Agent.run`) and a user's
    loop (`polyloop.durable.open_run`): the caller opens it (`_Run.open`) and drives it.
    """
    run_id = ask.run_id
    if ask.unreadable is not None and (ask.new or await read_or_none(store, run_id) is None):
        raise ask.unreadable  # a new run: refused before the lock (and its file) is taken
    if ask.new and await read_or_none(store, run_id) is not None:
        raise RunExistsError(run_id)  # before the lock, which would trim a torn tail
    async with held(store, run_id) as records:
        if records is None:
            records = [await _start(store, ask)]
            resume = None
        elif ask.new:
            raise RunExistsError(run_id)
        walker = await walk_checked(records, run_id)
        assert walker.started is not None
        if walker.started.config.get("loop") != agent._loop:
            raise InvalidInputError(_other_loop(run_id, walker.started.config.get("loop")))
        if ask.goal is not None and ask.goal != walker.started.goal:
            raise RunMismatchError(run_id, "goal", walker.started.goal, ask.goal)
        recorded = max_steps_of(walker.started)
        if ask.max_steps is not None and ask.max_steps != recorded:
            raise RunMismatchError(run_id, "max_steps", recorded, ask.max_steps)
        if resume is None or not resume.accept_changes:  # accepted changes are weighed by Resume.open
            await check_artifacts(store, walker)
        yield _Run(agent, store, walker, resume)


def _other_loop(run_id: str, recorded: Any) -> str:
    if recorded is None:
        return f"run {run_id!r} is a polyloop.Agent's run: resume it with Agent.run (or `polyloop resume {run_id}`)"
    return (f"run {run_id!r} is a run of a user's loop (polyloop.durable): resume it with its loop's "
            f"open_run (or `polyloop resume {run_id}`), not with Agent.run")


async def _start(store: Store, ask: _Ask) -> RunStarted:
    """Write the first record of a new run (under its hold)."""
    if ask.started is None:
        raise ValueError("a new run needs a goal (an empty string is allowed)")
    if ask.unreadable is not None:
        raise ask.unreadable
    await _write_started(store, ask.started)
    return ask.started


# A step budget beyond this is a typo, not a plan; it also keeps every count
# far inside what the log's JSON integers carry.
MAX_COUNT = 1_000_000_000


def _tool_config(t: Tool, approve_irreversible: bool = True) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": t.name, "replay": t.replay}
    if t.max_failures is not None:
        entry["max_failures"] = t.max_failures
    guards = t.guard_config()
    if guards is not None:  # only then: the config of an unguarded agent is the 1.0 one
        entry["guards"] = guards
    approval = t.approval_mode(approve_irreversible=approve_irreversible)
    if approval is not None:  # log format 1.2, and again only when there is something to say
        entry["approval"] = approval
    if t.question:
        entry["question"] = True
    if t.origin is not None:  # log format 1.4: an MCP tool, its server and where its policy came from
        entry["mcp"] = t.origin
    return entry


def _check_count(name: str, value: object) -> None:
    if type(value) is not int or not 1 <= value <= MAX_COUNT:
        raise InvalidInputError(f"{name} must be a whole number from 1 to {MAX_COUNT:,}, not {value!r}")


async def _write_started(store: Store, started: RunStarted) -> None:
    try:
        await store.write_run_started(started)
    except PolyLoopError:
        raise
    except Exception as exc:
        raise StoreError(f"store failed to write run {started.run_id!r}: {exc}", run_id=started.run_id) from exc
