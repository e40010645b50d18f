"""The run loop: carry out the planner's verdicts on a run, from its walker's state to its end.

`_Run` executes live work: it asks the planner (`polyloop._recovery.plan.plan`)
what comes next, does it intent first, and feeds every record it writes into
the same `Walker` the reader uses, so the next decision is made from exactly
what the log now says. It implements `polyloop._run.run_port.RunPort` (its
public `write`, `complete` and `execute`), through which the guard, approval,
resume and product code act on it; the history it starts from is rebuilt by
`polyloop._run.history`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._recovery.walker import Walker
from .._log.errors import (
    AlertError,
    ApprovalRequiredError,
    NeedsOperatorError,
    PolyLoopError,
    RunMismatchError,
    StoreError,
)
from .._log.ids import call_id, idempotency_key, result_id
from .._log.model_port import _History
from .._recovery.plan import (
    AbortAction,
    AlertStop,
    AwaitDecision,
    Decided,
    CallModel,
    Complete,
    ContinueAction,
    FinishToolFailures,
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
    StepCalls,
    plan,
)
from .artifacts import Artifacts, check_artifacts
from .cancelling import cancel_channel, ended_by, stop_if_asked
from .._log.records import (
    ActionResult,
    ApprovalRequest,
    FinishReason,
    GuardCheck,
    Intent,
    Record,
    RunFinished,
    StepCompleted,
    representable,
)
from .._log.store_port import Store, capabilities_of, writers_of
from .decisions import check_recorded, request_for
from .guards import carry_out, redeliver
from .history import rebuild_history, tool_turn
from .invoke import CancelledAfter, invoke, judge
from .model_call import call_model, storable as _storable
from .outage import Outage
from .result import RunResult
from .run_port import AgentPort
from .context import ToolContext
from .tools import Tool
from .writer_turn import WriterTurn

if TYPE_CHECKING:
    from .resume import Resume

# -- live execution ---------------------------------------------------------------------


class _Run:
    """One pass of the loop over a run, from its walker's state to its end."""

    def __init__(self, agent: AgentPort, store: Store, walker: Walker, resume: Resume | None = None) -> None:
        assert walker.started is not None
        self.resume = resume  # None: a new run, nothing to check before it goes
        self.agent = agent
        self.store = store
        self.walker = walker
        self.run_id = walker.started.run_id
        self.tools = {t.name: t for t in agent.tools}
        self.specs = [t.spec() for t in agent.tools]
        self.alerted: set[str] = set()  # failed verifications this process told `on_alert` about
        # Calls of a step of several that were refused before any intent (an
        # unknown tool, arguments that do not fit): (step, call) -> observation.
        self.refused: dict[tuple[int, int], str] = {}
        self.turn = WriterTurn()  # the calls of a step write concurrently: one record at a time
        can = capabilities_of(store)
        self.cancels = cancel_channel(store)  # where `polyloop cancel` asks the run to stop, if the store can
        self._write_intents = store.write_intents if can.batching else None  # type: ignore[attr-defined]
        # Resumed with an action in flight: a product it may have replaced is only `unsettled`
        # (see polyloop._run.artifacts); once its step completes, every product is checked again
        # (leaving alone what a `checkpoint_accepted` record accepted, also this resume's).
        self.recheck_artifacts = bool(walker.artifacts) and bool(walker.in_flight())
        self._writers = writers_of(store, can)  # None where the store lacks the capability
        # Log format 1.3 rides out outages: a transient failure never ends the run (polyloop._run.outage).
        self.outage = Outage(self, agent.model, budget=walker.max_attempts, backoff=agent.retry_backoff,
                             cap=agent.retry_max_delay) if walker.minor >= 3 else None
        for t in agent.tools:
            recorded = walker.guards.get(t.name)
            if (t.guard_config() or None) != recorded and any(
                c.get("name") == t.name for c in walker.started.config.get("tools") or []
            ):
                raise RunMismatchError(self.run_id, f"guards of tool {t.name!r}", recorded, t.guard_config())
        check_recorded(self)

    async def open(self) -> None:
        """Before anything runs: a resume's checks (validity, crash loop, the count); then live.

        The one opening of a run, for the built-in loop (`go`) and a user's
        loop (`polyloop._run.steps.LoopSteps`) alike.
        """
        if self.resume is not None:
            await self.resume.open(self)
        self.walker.go_live()

    async def go(self) -> RunResult:
        await self.open()
        history = rebuild_history(self.walker)
        while True:
            planned = plan(self.walker)
            if isinstance(planned, CallModel):
                if (stopped := await stop_if_asked(self)) is not None:  # the safe point: nothing in flight
                    return stopped
                refused = await call_model(self, self.outage, self.specs, planned, history)
                if refused is not None:  # the provider refused for good: asking again cannot help
                    return await self._finish("error", None, error=refused)
            elif isinstance(planned, RunAction):
                await self._act(planned, history)
            elif isinstance(planned, ReuseResolution):
                await self.complete(planned.step, planned.result_id, planned.observation, False, planned.tool, history)
            elif isinstance(planned, CompleteFinal):
                await self.write(StepCompleted(step=planned.step, result_id=None, observation=None))
            elif isinstance(planned, FinishFinal):
                return await self._finish("final_answer", planned.text)
            elif isinstance(planned, FinishBudget):
                return await self._finish("max_steps", None)
            elif isinstance(planned, FinishAttempts):
                error = f"the model call of step {planned.step} failed {planned.attempts} times"
                return await self._finish("error", None, error=error)
            elif isinstance(planned, FinishToolFailures):
                error = f"tool {planned.tool!r} failed {planned.failures} times in a row (its failure budget)"
                return await self._finish("tool_failures", None, error=error)
            elif isinstance(planned, NeedsOperator):
                raise NeedsOperatorError(self.run_id, planned.executions)
            elif isinstance(planned, AwaitDecision):
                raise ApprovalRequiredError(self.run_id, planned.requests)
            elif isinstance(planned, Decided):
                await self.complete(planned.step, None, planned.observation, planned.is_error, planned.tool, history)
            elif isinstance(planned, AlertStop):
                for e in planned.executions:
                    if e.kind == "action":
                        await redeliver(self, self.walker.execution(e.result_id))
                raise AlertError(self.run_id, planned.executions)
            elif isinstance(planned, StepCalls):
                await self._calls(planned, history)
            elif isinstance(planned, (ContinueAction, AbortAction, Verify, Rollback, Reconcile, Complete)):
                await self._guarded(planned, history)
            else:
                assert isinstance(planned, Finished), planned  # CrashLoopStop: a resume's, never a live plan
                return self._recorded_result()

    def _recorded_result(self) -> RunResult:
        f = self.walker.finished
        assert f is not None
        return RunResult(self.run_id, f.reason, f.result, f.steps, ended_by(f), already_finished=True)

    async def write(self, record: Record) -> None:
        # Fail closed: any store failure stops the run with a library error.
        # One write at a time, fed to the walker in the order the log holds them.
        # (The turn is taken by hand, the store's write awaited here rather than in
        # `_stored`: no coroutine frame for either on each of a step's four writes.)
        turn = self.turn
        if turn.busy:
            await turn.wait()
        else:
            turn.busy = True
        try:
            writer = self._writers[type(record)]
            if writer is None:
                raise StoreError(
                    f"the store cannot write {record.TAG} records (log format 1.{_MINOR[record.TAG]}), which "
                    f"{_NEEDED_BY[record.TAG]} need: it lacks write_{record.TAG}", run_id=self.run_id,
                )
            try:
                await writer(self.run_id, record)
            except PolyLoopError:
                raise
            except Exception as exc:
                raise self._failed(exc) from exc
            if not self.walker.feed(record):  # `_fed`, written out: four times a step
                self._walker_refused()
            if type(record) is StepCompleted:
                if self.recheck_artifacts:
                    self.recheck_artifacts = False
                    await check_artifacts(self.store, self.walker, when=f"stops after step {record.step}")
                self.walker.forget_done()
        finally:
            turn.release()

    async def _stored(self, write: Any, records: Sequence[Record]) -> None:
        """Await a store write, then feed what it wrote to the walker (fail closed on both)."""
        try:
            await write
        except PolyLoopError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        for record in records:
            self._fed(record)

    def _failed(self, exc: Exception) -> StoreError:
        return StoreError(f"store failed to write run {self.run_id!r}: {exc}", run_id=self.run_id)

    def _fed(self, record: Record) -> None:
        if not self.walker.feed(record):
            self._walker_refused()

    def _walker_refused(self) -> None:
        problem = self.walker.problems[-1]
        raise AssertionError(f"the run loop wrote a record a correct writer never writes: {problem}")

    async def _act(self, planned: RunAction, history: _History) -> None:
        prepared = self._prepare(planned)
        if isinstance(prepared, str):
            await self.complete(planned.step, None, prepared, True, planned.tool, history)
            return
        if isinstance(prepared, ApprovalRequest):
            await self.write(prepared)  # durable before the run says it waits (planner: AwaitDecision)
            return
        tool, intent = prepared
        await self.write(intent)
        await self.execute(tool, _context(self, intent), planned.args, history)

    def _prepare(self, planned: RunAction) -> tuple[Tool, Intent] | ApprovalRequest | str:
        """The tool and intent of an action; or the request to write when the call waits for a
        person; or the error observation that refuses it before any intent."""
        tool = self.tools.get(planned.tool)
        if tool is None:
            if planned.attempt > 1:
                raise RunMismatchError(self.run_id, "tools", planned.tool, sorted(self.tools))
            known = ", ".join(sorted(self.tools)) or "none"
            return f"error: unknown tool {planned.tool!r}; available tools: {known}"
        invalid = tool.check_args(planned.args) if planned.attempt == 1 else None
        if invalid is not None:
            # Checked before the intent: arguments that do not fit the tool's
            # schema never reach it; the model reads why and may try again.
            return f"error: {invalid}"
        if planned.why == "first":
            request = request_for(self, tool, planned)
            if request is not None:
                return request  # the call waits for a person: nothing of it runs
        rid = result_id("action", planned.step, planned.attempt, planned.call)
        first = rid if planned.attempt == 1 else result_id("action", planned.step, 1, planned.call)
        approved = self.walker.request_of(first)
        # An approved call keeps the key of the call that was approved, edited or not.
        key = approved.idempotency_key if approved is not None else idempotency_key(
            self.run_id, planned.step, planned.tool, planned.args, planned.call)
        return tool, Intent(
            kind="action",
            step=planned.step,
            attempt=planned.attempt,
            result_id=rid,
            tool=planned.tool,
            args=planned.args,
            replay=tool.replay,
            idempotency_key=key,
            call=planned.call,
        )

    # -- a step of several tool calls (log format 1.2) ----------------------------------

    async def _calls(self, planned: StepCalls, history: _History) -> None:
        """Do every call's pending move of a step of several tool calls, or complete the step.

        When any call of the step waits for a person, its request is recorded
        (durable) and nothing of the step runs: the planner then says the
        step waits (`AwaitDecision`) until every request of it is decided.
        Otherwise new intents of the step are written together, with one
        durable write where the store can (`write_intents`), before any of
        the calls runs; then the calls run concurrently, unless one of their
        tools declares `concurrent=False` (then in order). Each call's
        outcome is recorded as it comes (`action_result`). The planner sees
        the result and says what is left: a verification, a rollback, or
        completing the step.
        """
        step = planned.step
        work: list[tuple[Any, Tool | None, Intent | None]] = []
        requests: list[ApprovalRequest] = []
        for k, move in enumerate(planned.moves, start=1):
            if (step, k) in self.refused or not isinstance(move, _PENDING):
                continue
            if isinstance(move, RunAction):
                prepared = self._prepare(move)
                if isinstance(prepared, str):
                    self.refused[(step, k)] = prepared
                elif isinstance(prepared, ApprovalRequest):
                    requests.append(prepared)
                else:
                    work.append((move, *prepared))
            else:
                work.append((move, self.tools.get(move.tool), None))
        if requests:
            for request in requests:  # every request of the step before the run says it waits
                await self.write(request)
            return  # none of the step's calls runs: the planner now says AwaitDecision
        if not work:
            await self._complete_calls(planned, history)
            return
        intents = [intent for _, _, intent in work if intent is not None]
        if intents:
            await self._write_all(intents)
        jobs = [self._call_job(move, tool, intent, history) for move, tool, intent in work]
        if len(jobs) == 1 or any(t is not None and not t.concurrent for _, t, _ in work):
            for job in jobs:
                await job
            return
        try:
            async with asyncio.TaskGroup() as group:
                for job in jobs:
                    group.create_task(job)
        except BaseExceptionGroup as group_error:
            raise _first_failure(group_error) from None

    async def _call_job(self, move: Any, tool: Tool | None, intent: Intent | None, history: _History) -> None:
        if intent is None:
            await self._guarded(move, history)
            return
        assert tool is not None
        await self.execute(tool, _context(self, intent), move.args, history)

    async def _write_all(self, intents: list[Intent]) -> None:
        """Make the intents durable before any of their calls runs (one durable write if the store can)."""
        if self._write_intents is None or len(intents) == 1:
            for intent in intents:
                await self.write(intent)
            return
        async with self.turn:
            await self._stored(self._write_intents(self.run_id, intents), intents)

    async def _complete_calls(self, planned: StepCalls, history: _History) -> None:
        """Every call's outcome is known: complete the step with all of them, in the calls' order."""
        step = planned.step
        outcomes: list[dict[str, Any]] = []
        for k, move in enumerate(planned.moves, start=1):
            refused = self.refused.pop((step, k), None)
            if refused is not None:
                outcomes.append({"result_id": None, "tool": move.tool, "observation": _storable(refused), "is_error": True})
            else:
                rid, text, is_error = _settled(move)
                outcomes.append({"result_id": rid, "tool": move.tool, "observation": _storable(text), "is_error": is_error})
        await self.write(StepCompleted(step=step, result_id=None, observation=None, calls=outcomes))
        model = self.walker.steps[step - 1].output
        assert model is not None
        n = len(outcomes)
        for k, c in enumerate(outcomes, start=1):
            history.append(tool_turn(call_id(model.result_id, k, n), c["tool"], c["observation"]))

    async def execute(self, tool: Tool, ctx: ToolContext, args: dict[str, Any], history: _History) -> None:
        """Run an action whose intent is durable: precondition, the tool, and its outcome."""
        rid = ctx.result_id
        pre = tool.guards.precondition
        if pre is not None:
            # Recorded (durably) before the tool runs: an intent without this
            # record is an action that provably did not run.
            passed, reason = await judge(pre, "precondition", args, ctx)
            await self.write(GuardCheck(result_id=rid, guard="precondition", passed=passed, reason=reason))
            if not passed:
                return  # the planner completes the step: AbortAction
        try:
            observation, is_error = await invoke(tool, args, ctx)
        except CancelledAfter as late:
            # The tool's thread ended after the run was cancelled: its outcome
            # is known, so record it rather than leave an unknown behind.
            await self._outcome(tool, ctx, *late.outcome, history)
            raise asyncio.CancelledError() from None
        await self._outcome(tool, ctx, observation, is_error, history)

    async def _outcome(
        self, tool: Tool, ctx: ToolContext, observation: str, is_error: bool, history: _History
    ) -> None:
        step, rid = ctx.step, ctx.result_id
        if ctx.call is not None or (tool.guards.verify is not None and not is_error):
            # A call of a step of several reports its outcome on its own (the
            # step completes with all of them); a verified tool's result waits
            # for its verification (planner: Verify).
            await self.write(ActionResult(result_id=rid, observation=representable(observation), is_error=is_error))
            return
        await self.complete(step, rid, observation, is_error, tool.name, history)

    async def _guarded(self, planned: Any, history: _History) -> None:
        await carry_out(self, planned, history)

    async def complete(
        self, step: int, rid: str | None, observation: str, is_error: bool, tool: str, history: _History
    ) -> None:
        observation = _storable(observation)
        await self.write(StepCompleted(step=step, result_id=rid, observation=observation, is_error=is_error))
        model = self.walker.steps[step - 1].output
        assert model is not None
        history.append(tool_turn(model.result_id, tool, observation))

    async def _finish(self, reason: FinishReason, text: str | None, error: str | None = None) -> RunResult:
        steps = self.walker.completed_steps
        await self.write(RunFinished(reason=reason, result=text, steps=steps, error=error))
        return RunResult(self.run_id, reason, text, steps, error)


_MINOR = {"guard_check": 1, "action_result": 1, "approval_request": 2, "checkpoint_accepted": 2, "resumed": 2,
          "crash_loop_accepted": 2, "run_stopped": 3}
_NEEDED_BY = {"guard_check": "guarded tools", "action_result": "guarded tools and steps of several tool calls",
              "approval_request": "tools that wait for approval or an answer",
              "checkpoint_accepted": "accepting changes", "resumed": "counting resumes",
              "crash_loop_accepted": "lifting a crash loop", "run_stopped": "stopping on a model outage"}


_PENDING = (RunAction, ContinueAction, Verify, Rollback, Reconcile)


def _context(run: _Run, intent: Intent) -> ToolContext:
    """What the tool of an action learns: its ids, key and call, and its run's products."""
    assert intent.idempotency_key is not None
    return ToolContext(run.run_id, intent.step, intent.attempt, intent.result_id, intent.idempotency_key,
                       intent.call, Artifacts(run, intent.result_id))


def _settled(move: Any) -> tuple[str | None, str, bool]:
    """(result id, observation, is_error) of a call whose outcome the planner says is known."""
    if isinstance(move, AbortAction):
        return move.result_id, f"error: {move.tool} did not run: its precondition failed: {move.reason}", True
    if isinstance(move, ReuseResolution):
        return move.result_id, move.observation, False
    if isinstance(move, Decided):  # denied, or answered: nothing of the call ran
        return None, move.observation, move.is_error
    assert isinstance(move, Complete)
    return move.result_id, move.observation, move.is_error


def _first_failure(group: BaseExceptionGroup) -> BaseException:
    """The exception to raise for a step's calls that failed together: a cancellation wins
    (Ctrl-C), then the first library error."""
    flat: list[BaseException] = []

    def collect(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                collect(inner)
        else:
            flat.append(e)

    collect(group)
    for e in flat:
        if isinstance(e, (asyncio.CancelledError, KeyboardInterrupt)):
            return e
    return flat[0]
