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
"""

from __future__ import annotations

from collections.abc import Sequence

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

    async def write_run_started(self, record: RunStarted) -> None:
        """Create the run's log with its first record; `RunExistsError` if it has one."""
        await self._append_records(record.run_id, (record,), durable=DURABLE[RunStarted])

    async def write_intent(self, run_id: str, record: Intent) -> None:
        """Append an intent: the call or action it names starts after this returns."""
        await self._append_records(run_id, (record,), durable=DURABLE[Intent])

    async def write_intents(self, run_id: str, records: Sequence[Intent]) -> None:
        """Append several intents (the calls of one step) as one write, in the order given."""
        if records:
            await self._append_records(run_id, records, durable=DURABLE[Intent])

    async def write_model_call_result(self, run_id: str, record: ModelCallResult) -> None:
        """Append a model call's result."""
        await self._append_records(run_id, (record,), durable=DURABLE[ModelCallResult])

    async def write_step_completed(self, run_id: str, record: StepCompleted) -> None:
        """Append a step record."""
        await self._append_records(run_id, (record,), durable=DURABLE[StepCompleted])

    async def write_run_finished(self, run_id: str, record: RunFinished) -> None:
        """Append the end marker."""
        await self._append_records(run_id, (record,), durable=DURABLE[RunFinished])

    async def write_resolution(self, run_id: str, record: Resolution) -> None:
        """Append an operator's resolution."""
        await self._append_records(run_id, (record,), durable=DURABLE[Resolution])

    async def write_guard_check(self, run_id: str, record: GuardCheck) -> None:
        """Append a guard's verdict (log format 1.1)."""
        await self._append_records(run_id, (record,), durable=DURABLE[GuardCheck])

    async def write_action_result(self, run_id: str, record: ActionResult) -> None:
        """Append what a verified action or a rollback returned (log format 1.1)."""
        await self._append_records(run_id, (record,), durable=DURABLE[ActionResult])

    async def write_approval_request(self, run_id: str, record: ApprovalRequest) -> None:
        """Append that a tool call waits for a person (log format 1.2)."""
        await self._append_records(run_id, (record,), durable=DURABLE[ApprovalRequest])

    async def write_decision(self, run_id: str, record: Decision) -> None:
        """Append a person's approval, denial or answer (log format 1.2)."""
        await self._append_records(run_id, (record,), durable=DURABLE[Decision])

    async def write_checkpoint_accepted(self, run_id: str, record: CheckpointAccepted) -> None:
        """Append a person's acceptance of changed inputs, logic or config (log format 1.2)."""
        await self._append_records(run_id, (record,), durable=DURABLE[CheckpointAccepted])

    async def write_resumed(self, run_id: str, record: Resumed) -> None:
        """Append the mark of a resume that goes on to act (log format 1.2)."""
        await self._append_records(run_id, (record,), durable=DURABLE[Resumed])

    async def write_crash_loop_accepted(self, run_id: str, record: CrashLoopAccepted) -> None:
        """Append a person's lifting of a crash-loop stop (log format 1.2)."""
        await self._append_records(run_id, (record,), durable=DURABLE[CrashLoopAccepted])

    async def write_artifact(self, run_id: str, record: Artifact) -> None:
        """Append a product reference (log format 1.2), after its product is stored."""
        await self._append_records(run_id, (record,), durable=DURABLE[Artifact])

    async def write_run_stopped(self, run_id: str, record: RunStopped) -> None:
        """Append the stop of a run whose model stayed unavailable (log format 1.3)."""
        await self._append_records(run_id, (record,), durable=DURABLE[RunStopped])
