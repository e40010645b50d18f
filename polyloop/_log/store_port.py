"""The storage port: what the run loop needs from a place that keeps run logs."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from .records import (
    ActionResult,
    ApprovalRequest,
    Decision,
    CheckpointAccepted,
    CrashLoopAccepted,
    Resumed,
    Artifact,
    GuardCheck,
    Intent,
    ModelCallResult,
    Record,
    Resolution,
    RunFinished,
    RunStarted,
    StepCompleted,
)


@runtime_checkable
class Store(Protocol):
    """Where run logs live. One write per record kind, plus `read_log`.

    The library owns this port: it decides what is written when, including
    the end marker (`run_finished`). A store only has to keep what it is given.

    Ordering: records of one run must read back in the order their writes
    returned. The library never issues two writes for the same run at once.

    Durability: when `write_run_started`, `write_intent`, `write_run_finished`,
    `write_resolution`, `write_guard_check`, `write_approval_request` or
    `write_decision` returns, the record (and every record of that run
    `write_resolution`, `write_guard_check` or one of the 1.2 writes
    (`write_checkpoint_accepted`, `write_resumed`, `write_crash_loop_accepted`) returns, the record (and every record of that run
    written before it) must survive a crash of the process and of the
    machine. `write_model_call_result`, `write_step_completed` and
    `write_action_result` need only
    survive a crash of the process; the next durable write of the run makes
    them durable too (prefix durability). A write that raises may or may not
    have landed, but must never leave a partial record visible.

    Concurrency: writes of different runs may run concurrently. Nothing here
    promises atomicity between a record and the side effect it describes —
    that is why intents exist.

    Errors: raise `RunExistsError` from `write_run_started` when the run id
    already has a log, `RunNotFoundError` from `read_log` when it has none,
    `CorruptLogError` when a log cannot be decoded, and `StoreError` (wrapping
    the cause with `raise ... from`) for any storage failure.
    """

    async def write_run_started(self, record: RunStarted) -> None:
        """Create the run's log with its first record; fail if it exists. Durable."""
        ...

    async def write_intent(self, run_id: str, record: Intent) -> None:
        """Append an intent. Durable before it returns: the execution starts after."""
        ...

    async def write_model_call_result(self, run_id: str, record: ModelCallResult) -> None:
        """Append a model call result. Survives a process crash; durable with the next intent."""
        ...

    async def write_step_completed(self, run_id: str, record: StepCompleted) -> None:
        """Append a step record. Survives a process crash; durable with the next intent."""
        ...

    async def write_run_finished(self, run_id: str, record: RunFinished) -> None:
        """Append the end marker. Durable before it returns."""
        ...

    async def write_resolution(self, run_id: str, record: Resolution) -> None:
        """Append an operator's resolution. Durable before it returns."""
        ...

    async def write_guard_check(self, run_id: str, record: GuardCheck) -> None:
        """Append a guard's verdict (log format 1.1). Durable before it returns.

        A passed precondition precedes the action, a failed verification is
        an alert: both must survive before anything follows. Only agents
        with guarded tools write these; a store without this method still
        serves every other agent.
        """
        ...

    async def write_action_result(self, run_id: str, record: ActionResult) -> None:
        """Append what a verified action or a rollback returned (log format 1.1).

        Survives a process crash; durable with the next durable write.
        """
        ...

    async def write_approval_request(self, run_id: str, record: ApprovalRequest) -> None:
        """Append that a tool call waits for a person (log format 1.2). Durable before it returns.

        Written before anything of the call runs, and the run stops after it:
        the request must survive so the run is never resumed past it. Only
        agents with tools that wait for approval or an answer write these; a
        store without this method still serves every other agent.
        """
        ...

    async def write_decision(self, run_id: str, record: Decision) -> None:
        """Append a person's approval, denial or answer (log format 1.2). Durable before it returns.

        Written by `approve`, `deny` and `answer` under the run's lock.
        """
        ...

    async def write_checkpoint_accepted(self, run_id: str, record: CheckpointAccepted) -> None:
        """Append a person's acceptance of changed inputs, logic or config (log format 1.2). Durable.

        Written before the resumed run does anything. A store without this
        method serves every run except one resumed with accepted changes
        (that resume stops with `StoreError`, writing nothing).
        """
        ...

    async def write_resumed(self, run_id: str, record: Resumed) -> None:
        """Append the mark of a resume that goes on to act (log format 1.2). Durable.

        These count towards the crash-loop budget. A store without this
        method still resumes runs, but cannot count them: the crash-loop
        budget is not kept there.
        """
        ...

    async def write_crash_loop_accepted(self, run_id: str, record: CrashLoopAccepted) -> None:
        """Append a person's lifting of a crash-loop stop (log format 1.2). Durable."""
        ...

    # `write_run_stopped(run_id, record: RunStopped)` (log format 1.3, durable) appends a stop on
    # a model outage. It is not part of this Protocol, so stores written before 1.3 still are
    # `Store`s; a store without it stops such runs all the same (exit code 5), without the record.

    async def read_log(self, run_id: str) -> Sequence[Record]:
        """Every record of the run in order; a torn last write is not part of it."""
        ...


@runtime_checkable
class LockingStore(Store, Protocol):
    """A store that can also keep a run to one live holder (optional capability).

    `lock(run_id)` is an async context manager held for the whole life of a
    run or a resolution; a second holder, in this process or another, gets
    `RunActiveError` at once. It may yield the `ParsedLog` it read while
    taking the hold (then the caller does not read the log again) or None. The hold must end when its holder dies
    (an OS lock does this; across machines, a lease that lapses).
    """

    def lock(self, run_id: str) -> AbstractAsyncContextManager[Any]: ...


@runtime_checkable
class BatchingStore(Protocol):
    """A store that can make several intents durable with one write (optional capability).

    When the model asks for several tool calls at once, the run loop writes
    all their intents before any call runs: with `write_intents` in one
    durable write (durable before it returns, like `write_intent`, in the
    order given), else one `write_intent` each.
    """

    async def write_intents(self, run_id: str, records: Sequence[Intent]) -> None: ...


@runtime_checkable
class ProbingStore(Protocol):
    """A store that can tell cheaply whether a run has a log (optional capability).

    Used to refuse a mistyped run id before a lock (and its file) is taken.
    `exists` may be a plain or an async method.
    """

    def exists(self, run_id: str) -> Any: ...


@runtime_checkable
class HoldingStore(Protocol):
    """A store that can name a run's live holder without taking the hold (optional).

    `holder(run_id)` returns who holds it (e.g. `pid 41 on host`), or None.
    `inspect` uses it to report a run as `active`. `holder` may be a plain
    or an async method.
    """

    def holder(self, run_id: str) -> Any: ...


@runtime_checkable
class ParsingStore(Protocol):
    """A store that can hand back a log with its line numbers and torn tail (optional).

    `read_parsed(run_id)` returns a `polyloop._log.codec.ParsedLog` without
    judging it, so `inspect` and `verify` can point at lines.
    """

    async def read_parsed(self, run_id: str) -> Any: ...


@runtime_checkable
class ArtifactStore(Protocol):
    """A store that keeps the intermediate products of runs (optional capability, log format 1.2).

    Products are addressed by run id and name (a safe file name, as
    `polyloop.check_run_id` defines it); the library writes the reference
    (`write_artifact`) only after `put_product` returned. Without this
    capability a tool's `ctx.artifacts.write` fails with a `StoreError`
    (the tool's error observation) and nothing else changes.
    """

    async def put_product(self, run_id: str, name: str, data: bytes) -> None:
        """Store `data` as product `name` of the run, replacing any earlier one.

        Atomic: a reader sees the whole earlier product (or none) or the
        whole new one, never a part, whatever crash comes in between.
        Durable before it returns, through a crash of the machine. Raise
        `StoreError` on failure (the product is then the earlier one or absent).
        """
        ...

    async def get_product(self, run_id: str, name: str) -> bytes | None:
        """The product's bytes as stored, or None when there is none. Nothing is verified here."""
        ...

    async def write_artifact(self, run_id: str, record: Artifact) -> None:
        """Append a product reference to the run's log (log format 1.2).

        Survives a crash of the process; durable with the next durable
        write (the reference always follows a durable product, and the
        tool's result, which may quote it, follows the reference).
        """
        ...
