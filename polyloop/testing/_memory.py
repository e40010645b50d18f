"""An in-memory store: the reference model of the storage port, and a test double."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from .._log.errors import CorruptLogError, RunActiveError, RunExistsError, RunNotFoundError, SchemaVersionError
from .._log.ids import check_product_name, check_run_id
from .._log.records import (
    RunStopped,
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
    encode,
)
from .._log.codec import parse_log


class MemoryStore:
    """Keeps run logs in memory, encoded exactly as the JSONL store writes them.

    Useful in tests and as the durability-free baseline of benchmarks. Nothing
    survives the process; within it, it behaves like any store: exclusive
    creation, ordered appends, one holder per run (`lock`), and records that
    go through the same JSON encoding, so a value that would not serialize
    fails here too. It keeps products too (the `ArtifactStore` capability),
    as bytes in memory.
    """

    def __init__(self) -> None:
        self._logs: dict[str, list[bytes]] = {}
        self._held: set[str] = set()
        self._products: dict[tuple[str, str], bytes] = {}

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._logs)} runs)"

    def run_ids(self) -> list[str]:
        """The runs it holds, in creation order."""
        return list(self._logs)

    def raw(self, run_id: str) -> bytes:
        """The run's log as the bytes a JSONL file would hold."""
        return b"".join(self._lines(run_id))

    def _lines(self, run_id: str) -> list[bytes]:
        try:
            return self._logs[check_run_id(run_id)]
        except KeyError:
            raise RunNotFoundError(run_id, "memory") from None

    async def write_run_started(self, record: RunStarted) -> None:
        run_id = check_run_id(record.run_id)
        if run_id in self._logs:
            raise RunExistsError(run_id)
        self._logs[run_id] = [encode(record)]

    async def write_intent(self, run_id: str, record: Intent) -> None:
        self._lines(run_id).append(encode(record))

    async def write_intents(self, run_id: str, records: Sequence[Intent]) -> None:
        """Append several intents at once (see `polyloop.stores.JsonlStore.write_intents`)."""
        self._lines(run_id).extend(encode(r) for r in records)

    async def write_model_call_result(self, run_id: str, record: ModelCallResult) -> None:
        self._lines(run_id).append(encode(record))

    async def write_step_completed(self, run_id: str, record: StepCompleted) -> None:
        self._lines(run_id).append(encode(record))

    async def write_run_finished(self, run_id: str, record: RunFinished) -> None:
        self._lines(run_id).append(encode(record))

    async def write_resolution(self, run_id: str, record: Resolution) -> None:
        self._lines(run_id).append(encode(record))

    async def write_guard_check(self, run_id: str, record: GuardCheck) -> None:
        self._lines(run_id).append(encode(record))

    async def write_action_result(self, run_id: str, record: ActionResult) -> None:
        self._lines(run_id).append(encode(record))

    async def write_approval_request(self, run_id: str, record: ApprovalRequest) -> None:
        self._lines(run_id).append(encode(record))

    async def write_decision(self, run_id: str, record: Decision) -> None:
        self._lines(run_id).append(encode(record))

    async def write_checkpoint_accepted(self, run_id: str, record: CheckpointAccepted) -> None:
        self._lines(run_id).append(encode(record))

    async def write_resumed(self, run_id: str, record: Resumed) -> None:
        self._lines(run_id).append(encode(record))

    async def write_crash_loop_accepted(self, run_id: str, record: CrashLoopAccepted) -> None:
        self._lines(run_id).append(encode(record))

    async def write_run_stopped(self, run_id: str, record: RunStopped) -> None:
        self._lines(run_id).append(encode(record))

    async def write_artifact(self, run_id: str, record: Artifact) -> None:
        self._lines(run_id).append(encode(record))

    async def put_product(self, run_id: str, name: str, data: bytes) -> None:
        self._products[(check_run_id(run_id), check_product_name(name))] = bytes(data)

    async def get_product(self, run_id: str, name: str) -> bytes | None:
        return self._products.get((check_run_id(run_id), check_product_name(name)))

    async def read_log(self, run_id: str) -> list[Record]:
        parsed = parse_log(self.raw(run_id))
        if parsed.schema_version is not None:
            raise SchemaVersionError(run_id, parsed.schema_version)
        if parsed.problems:
            raise CorruptLogError(run_id, parsed.problems)
        return parsed.records

    def holder(self, run_id: str) -> str | None:
        return "this process" if run_id in self._held else None

    @contextlib.asynccontextmanager
    async def lock(self, run_id: str) -> AsyncIterator[None]:
        run_id = check_run_id(run_id)
        if run_id in self._held:
            raise RunActiveError(run_id, "another task of this process")
        self._held.add(run_id)
        try:
            yield
        finally:
            self._held.discard(run_id)
