"""The port's `write_*` methods, derived once from the durability table.

Each store implements one narrow primitive, `_append_records(run_id,
records, *, durable)`: append these records of one run, in order, as one
write, durable before it returns when `durable` is true (the idea of
Litestream's `ReplicaClient`: a small primitive per backend, the logic
written once above it). The first record of a run is its `run_started`;
appending it creates the log (`RunExistsError` if there is one). Every
public `write_*` method of the storage port (polyloop/_log/store_port.py)
is derived here from `polyloop._log.records.DURABLE`, so no store decides
on its own which records are fsynced. A store may still override a write to
do more around it (`PostgresStore.write_decision` requeues a parked run),
calling this one for the append.

Each derived write returns the append's coroutine rather than awaiting it in
one of its own: the caller awaits the same thing, one coroutine frame fewer
on each of a step's four writes (docs/performance.md). A store that overrides
one writes it as `async def` and awaits `super()`'s, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence

from .._log.records import (
    DURABLE,
    ActionResult,
    ApprovalRequest,
    Artifact,
    CheckpointAccepted,
    CrashLoopAccepted,
    Decision,
    GuardCheck,
    Intent,
    ModelCallResult,
    Record,
    Resolution,
    Resumed,
    RunFinished,
    RunStarted,
    RunStopped,
    StepCompleted,
)


class RecordWrites:
    """The storage port's writes over a store's `_append_records` (a mixin of every store of ours)."""

    async def _append_records(self, run_id: str, records: Sequence[Record], *, durable: bool) -> None:
        raise NotImplementedError

    def write_run_started(self, record: RunStarted) -> Awaitable[None]:
        """Create the run's log with its first record; `RunExistsError` if it has one."""
        return self._append_records(record.run_id, (record,), durable=DURABLE[RunStarted])

    def write_intent(self, run_id: str, record: Intent) -> Awaitable[None]:
        """Append an intent: the call or action it names starts after this returns."""
        return self._append_records(run_id, (record,), durable=DURABLE[Intent])

    async def write_intents(self, run_id: str, records: Sequence[Intent]) -> None:
        """Append several intents (the calls of one step) as one write, in the order given."""
        if records:
            await self._append_records(run_id, records, durable=DURABLE[Intent])

    def write_model_call_result(self, run_id: str, record: ModelCallResult) -> Awaitable[None]:
        """Append a model call's result."""
        return self._append_records(run_id, (record,), durable=DURABLE[ModelCallResult])

    def write_step_completed(self, run_id: str, record: StepCompleted) -> Awaitable[None]:
        """Append a step record."""
        return self._append_records(run_id, (record,), durable=DURABLE[StepCompleted])

    def write_run_finished(self, run_id: str, record: RunFinished) -> Awaitable[None]:
        """Append the end marker."""
        return self._append_records(run_id, (record,), durable=DURABLE[RunFinished])

    def write_resolution(self, run_id: str, record: Resolution) -> Awaitable[None]:
        """Append an operator's resolution."""
        return self._append_records(run_id, (record,), durable=DURABLE[Resolution])

    def write_guard_check(self, run_id: str, record: GuardCheck) -> Awaitable[None]:
        """Append a guard's verdict (log format 1.1)."""
        return self._append_records(run_id, (record,), durable=DURABLE[GuardCheck])

    def write_action_result(self, run_id: str, record: ActionResult) -> Awaitable[None]:
        """Append what a verified action or a rollback returned (log format 1.1)."""
        return self._append_records(run_id, (record,), durable=DURABLE[ActionResult])

    def write_approval_request(self, run_id: str, record: ApprovalRequest) -> Awaitable[None]:
        """Append that a tool call waits for a person (log format 1.2)."""
        return self._append_records(run_id, (record,), durable=DURABLE[ApprovalRequest])

    def write_decision(self, run_id: str, record: Decision) -> Awaitable[None]:
        """Append a person's approval, denial or answer (log format 1.2)."""
        return self._append_records(run_id, (record,), durable=DURABLE[Decision])

    def write_checkpoint_accepted(self, run_id: str, record: CheckpointAccepted) -> Awaitable[None]:
        """Append a person's acceptance of changed inputs, logic or config (log format 1.2)."""
        return self._append_records(run_id, (record,), durable=DURABLE[CheckpointAccepted])

    def write_resumed(self, run_id: str, record: Resumed) -> Awaitable[None]:
        """Append the mark of a resume that goes on to act (log format 1.2)."""
        return self._append_records(run_id, (record,), durable=DURABLE[Resumed])

    def write_crash_loop_accepted(self, run_id: str, record: CrashLoopAccepted) -> Awaitable[None]:
        """Append a person's lifting of a crash-loop stop (log format 1.2)."""
        return self._append_records(run_id, (record,), durable=DURABLE[CrashLoopAccepted])

    def write_artifact(self, run_id: str, record: Artifact) -> Awaitable[None]:
        """Append a product reference (log format 1.2), after its product is stored."""
        return self._append_records(run_id, (record,), durable=DURABLE[Artifact])

    def write_run_stopped(self, run_id: str, record: RunStopped) -> Awaitable[None]:
        """Append the stop of a run whose model stayed unavailable (log format 1.3)."""
        return self._append_records(run_id, (record,), durable=DURABLE[RunStopped])
