"""The storage port: what the run loop needs from a place that keeps run logs."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .cancel_port import CancellingStore
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
    RunStopped,
    StepCompleted,
)


@runtime_checkable
class Store(Protocol):
    """Where run logs live. One write per record kind, plus `read_log`.

    The library owns this port: it decides what is written when, including
    the end marker (`run_finished`). A store only has to keep what it is given.

    Ordering: records of one run must read back in the order their writes
    returned. The library never issues two writes for the same run at once.

    Durability: which writes are durable is written once, in the table
    `polyloop._log.records.DURABLE` (record class -> bool; the list is in
    docs/reference/stores.md). When a durable write returns, the record and
    every record of that run written before it must survive a crash of the
    process and of the machine. Any other write need only survive a crash of
    the process: the run's next durable write makes it durable too (prefix
    durability). A write that raises may or may not have landed, but must
    never leave a partial record visible. Our stores derive every `write_*`
    method from that table in one place (`polyloop.stores._writes.RecordWrites`).

    Concurrency: writes of different runs may run concurrently. Nothing here
    promises atomicity between a record and the side effect it describes —
    that is why intents exist.

    Errors: raise `RunExistsError` from `write_run_started` when the run id
    already has a log, `RunNotFoundError` from `read_log` when it has none,
    `CorruptLogError` when a log cannot be decoded, and `StoreError` (wrapping
    the cause with `raise ... from`) for any storage failure.
    """

    async def write_run_started(self, record: RunStarted) -> None:
        """Create the run's log with its first record; fail if it exists."""
        ...

    async def write_intent(self, run_id: str, record: Intent) -> None:
        """Append an intent (the execution starts only after it returns)."""
        ...

    async def write_model_call_result(self, run_id: str, record: ModelCallResult) -> None:
        """Append a model call result."""
        ...

    async def write_step_completed(self, run_id: str, record: StepCompleted) -> None:
        """Append a step record."""
        ...

    async def write_run_finished(self, run_id: str, record: RunFinished) -> None:
        """Append the end marker."""
        ...

    async def write_resolution(self, run_id: str, record: Resolution) -> None:
        """Append an operator's resolution."""
        ...

    async def write_guard_check(self, run_id: str, record: GuardCheck) -> None:
        """Append a guard's verdict (log format 1.1).

        A passed precondition precedes the action, a failed verification is
        an alert: both must survive before anything follows. Only agents
        with guarded tools write these; a store without this method still
        serves every other agent.
        """
        ...

    async def write_action_result(self, run_id: str, record: ActionResult) -> None:
        """Append what a verified action or a rollback returned (log format 1.1)."""
        ...

    async def write_approval_request(self, run_id: str, record: ApprovalRequest) -> None:
        """Append that a tool call waits for a person (log format 1.2).

        Written before anything of the call runs, and the run stops after it:
        the request must survive so the run is never resumed past it. Only
        agents with tools that wait for approval or an answer write these; a
        store without this method still serves every other agent.
        """
        ...

    async def write_decision(self, run_id: str, record: Decision) -> None:
        """Append a person's approval, denial or answer (log format 1.2).

        Written by `approve`, `deny` and `answer` under the run's lock.
        """
        ...

    async def write_checkpoint_accepted(self, run_id: str, record: CheckpointAccepted) -> None:
        """Append a person's acceptance of changed inputs, logic or config (log format 1.2).

        Written before the resumed run does anything. A store without this
        method serves every run except one resumed with accepted changes
        (that resume stops with `StoreError`, writing nothing).
        """
        ...

    async def write_resumed(self, run_id: str, record: Resumed) -> None:
        """Append the mark of a resume that goes on to act (log format 1.2).

        These count towards the crash-loop budget. A store without this
        method still resumes runs, but cannot count them: the crash-loop
        budget is not kept there.
        """
        ...

    async def write_crash_loop_accepted(self, run_id: str, record: CrashLoopAccepted) -> None:
        """Append a person's lifting of a crash-loop stop (log format 1.2)."""
        ...


    async def read_log(self, run_id: str) -> Sequence[Record]:
        """Every record of the run in order; a torn last write is not part of it."""
        ...


@runtime_checkable
class LockingStore(Store, Protocol):
    """A store that can also keep a run to one live holder (optional capability).

    `lock(run_id)` is an async context manager held for the whole life of a
    run or a resolution; a second holder, in this process or another, gets
    `RunActiveError` at once. It may yield the `ParsedLog` it read while
    taking the hold (then the caller does not read the log again) or None.
    The hold must end when its holder dies
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
class BatchListingStore(Protocol):
    """A store that keeps batches' manifests itself, as `PostgresStore` does (optional capability)."""

    async def batch_runs(self, name: str) -> set[str]: ...


@runtime_checkable
class ExportingStore(Protocol):
    """A store that can hand a run's log over and delete it in one transaction (optional; `PostgresStore`)."""

    async def export_and_delete(self, run_id: str, keep: Any) -> None: ...


@runtime_checkable
class ArtifactStore(Protocol):
    """A store that keeps the intermediate products of runs (optional capability, log format 1.2).

    Artifacts are addressed by run id and name (a safe file name, as
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

        The reference always follows a durable product, and the tool's
        result, which may quote it, follows the reference.
        """
        ...


# -- optional capabilities: declared once, discovered one way -------------------------------


@runtime_checkable
class GuardingStore(Protocol):
    """A store that keeps guards' verdicts and what verified actions returned (log format 1.1)."""

    async def write_guard_check(self, run_id: str, record: GuardCheck) -> None: ...

    async def write_action_result(self, run_id: str, record: ActionResult) -> None: ...


@runtime_checkable
class ApprovingStore(Protocol):
    """A store that keeps requests for a person and their decisions (log format 1.2)."""

    async def write_approval_request(self, run_id: str, record: ApprovalRequest) -> None: ...

    async def write_decision(self, run_id: str, record: Decision) -> None: ...


@runtime_checkable
class CheckpointingStore(Protocol):
    """A store that keeps accepted checkpoint changes (log format 1.2)."""

    async def write_checkpoint_accepted(self, run_id: str, record: CheckpointAccepted) -> None: ...


@runtime_checkable
class CountingStore(Protocol):
    """A store that keeps the marks of resumes and lifted crash loops (log format 1.2)."""

    async def write_resumed(self, run_id: str, record: Resumed) -> None: ...

    async def write_crash_loop_accepted(self, run_id: str, record: CrashLoopAccepted) -> None: ...


@runtime_checkable
class StoppingStore(Protocol):
    """A store that keeps the stop of a run on an outage (log format 1.3).

    A store without it (one written before 1.3) stops such runs all the same
    (exit code 5), without the record.
    """

    async def write_run_stopped(self, run_id: str, record: RunStopped) -> None: ...


@runtime_checkable
class ManyReadingStore(Protocol):
    """A store that reads many logs and their holders in one go (`polyloop ls`), and says where it is."""

    where: str

    async def read_parsed_many(self, run_ids: list[str]) -> Any: ...

    async def live_holders(self) -> Any: ...


@runtime_checkable
class FencingStore(Protocol):
    """A store whose holds are leases fenced by an epoch, as `PostgresStore`'s are.

    `lease_epoch(run_id)` is the epoch of the lease this process holds on
    the run right now (each takeover raises it; a write under a lower one
    is refused), or None when it holds none. Read by the tracing extra
    (`polyloop.lease.epoch` on the spans of the holder's share of the run).
    """

    def lease_epoch(self, run_id: str) -> int | None: ...


@runtime_checkable
class _Locks(Protocol):
    # `lock` alone: a store older than some record kinds still holds its runs.
    def lock(self, run_id: str) -> AbstractAsyncContextManager[Any]: ...


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a store can do beyond the six writes and `read_log` every store has.

    Declared by our stores as a class attribute `capabilities` (the idea of
    SQLAlchemy's `Dialect.supports_*` flags); discovered for any store by
    `capabilities_of`, the one place that looks.

    Attributes:
        writes: the optional record kinds it appends (`GuardCheck`,
            `ActionResult`, `ApprovalRequest`, `Decision`,
            `CheckpointAccepted`, `Resumed`, `CrashLoopAccepted`; `Artifact`
            comes with `artifacts`).
        batching: `write_intents` (`BatchingStore`).
        locking: `lock` (`LockingStore`).
        probing: `exists` (`ProbingStore`).
        holding: `holder` (`HoldingStore`).
        parsing: `read_parsed` (`ParsingStore`).
        artifacts: products and `write_artifact` (`ArtifactStore`).
        reads_many: `read_parsed_many`, `live_holders` and `where` (`ManyReadingStore`).
        cancelling: `request_cancel`, `cancel_request`, `clear_cancel`
            (`polyloop._log.cancel_port.CancellingStore`): a request to stop
            reaches a run's live holder.
        batches: `batch_runs` (`BatchListingStore`): the store keeps batches.
        exporting: `export_and_delete` (`ExportingStore`): `archive` hands a
            run over and deletes it in one transaction.
        fencing: `lease_epoch` (`FencingStore`): its holds are leases fenced
            by an epoch.
    """

    writes: frozenset[type] = frozenset()
    batching: bool = False
    locking: bool = False
    probing: bool = False
    holding: bool = False
    parsing: bool = False
    artifacts: bool = False
    reads_many: bool = False
    cancelling: bool = False
    batches: bool = False
    exporting: bool = False
    fencing: bool = False


# The optional record kinds, each with the protocol of a store that writes it.
OPTIONAL_WRITES: dict[type, type] = {
    GuardCheck: GuardingStore,
    ActionResult: GuardingStore,
    ApprovalRequest: ApprovingStore,
    Decision: ApprovingStore,
    CheckpointAccepted: CheckpointingStore,
    Resumed: CountingStore,
    CrashLoopAccepted: CountingStore,
    RunStopped: StoppingStore,
}
EVERY_WRITE: frozenset[type] = frozenset(OPTIONAL_WRITES)


def capabilities_of(store: object) -> Capabilities:
    """The store's optional capabilities: as it declares them, else as its methods show.

    A store that declares a `Capabilities` as `capabilities` (ours do; a
    wrapper that forwards attributes forwards its inner store's) is taken
    at its word. Any other store is discovered here, and only here, by the
    runtime-checkable protocols above: a method it lacks, or sets to None,
    is a capability it has not.
    """
    declared = getattr(store, "capabilities", None)
    if isinstance(declared, Capabilities):
        return declared
    return Capabilities(
        writes=frozenset(cls for cls, proto in OPTIONAL_WRITES.items() if isinstance(store, proto)),
        batching=isinstance(store, BatchingStore),
        locking=isinstance(store, _Locks),
        probing=isinstance(store, ProbingStore),
        holding=isinstance(store, HoldingStore),
        parsing=isinstance(store, ParsingStore),
        artifacts=isinstance(store, ArtifactStore),
        reads_many=isinstance(store, ManyReadingStore),
        cancelling=isinstance(store, CancellingStore),
        batches=isinstance(store, BatchListingStore),
        exporting=isinstance(store, ExportingStore),
        fencing=isinstance(store, FencingStore),
    )


def writers_of(store: Any, can: Capabilities | None = None) -> dict[type, Any]:
    """Each record kind's write method of `store`, or None where it lacks the capability to keep it."""
    can = can if can is not None else capabilities_of(store)
    writes = can.writes
    return {
        RunStarted: store.write_run_started,
        Intent: store.write_intent,
        ModelCallResult: store.write_model_call_result,
        StepCompleted: store.write_step_completed,
        RunFinished: store.write_run_finished,
        Resolution: store.write_resolution,
        GuardCheck: store.write_guard_check if GuardCheck in writes else None,
        ActionResult: store.write_action_result if ActionResult in writes else None,
        ApprovalRequest: store.write_approval_request if ApprovalRequest in writes else None,
        Decision: store.write_decision if Decision in writes else None,
        CheckpointAccepted: store.write_checkpoint_accepted if CheckpointAccepted in writes else None,
        Resumed: store.write_resumed if Resumed in writes else None,
        CrashLoopAccepted: store.write_crash_loop_accepted if CrashLoopAccepted in writes else None,
        Artifact: store.write_artifact if can.artifacts else None,
        RunStopped: store.write_run_stopped if RunStopped in writes else None,
    }
