"""An in-memory store: the reference model of the storage port, and a test double."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from .._log.errors import CorruptLogError, RunActiveError, RunExistsError, RunNotFoundError, SchemaVersionError
from .._log.ids import check_artifact_name, check_run_id
from .._log.records import Record, RunStarted, encode
from .._log.store_port import EVERY_WRITE, Capabilities
from ..stores._writes import RecordWrites
from .._log.codec import parse_log


class MemoryStore(RecordWrites):
    """Keeps run logs in memory, encoded exactly as the JSONL store writes them.

    Useful in tests and as the durability-free baseline of benchmarks. Nothing
    survives the process; within it, it behaves like any store: exclusive
    creation, ordered appends, one holder per run (`lock`), and records that
    go through the same JSON encoding, so a value that would not serialize
    fails here too. It keeps products too (the `ArtifactStore` capability),
    as bytes in memory.
    """

    capabilities = Capabilities(writes=EVERY_WRITE, batching=True, locking=True, holding=True, artifacts=True)

    def __init__(self) -> None:
        self._logs: dict[str, bytearray] = {}  # each run's log: the bytes a JSONL file would hold
        self._held: set[str] = set()
        self._artifacts: dict[tuple[str, str], bytes] = {}

    def __repr__(self) -> str:
        return f"MemoryStore({len(self._logs)} runs)"

    def run_ids(self) -> list[str]:
        """The runs it holds, in creation order."""
        return list(self._logs)

    def raw(self, run_id: str) -> bytes:
        """The run's log as the bytes a JSONL file would hold."""
        return bytes(self._log(run_id))

    def _log(self, run_id: str) -> bytearray:
        try:
            return self._logs[check_run_id(run_id)]
        except KeyError:
            raise RunNotFoundError(run_id, "memory") from None

    async def _append_records(self, run_id: str, records: Sequence[Record], *, durable: bool) -> None:
        # The one append `RecordWrites` derives every write from; nothing here
        # outlives the process, so `durable` asks nothing more of it.
        first = records[0]
        if type(first) is RunStarted:
            run_id = check_run_id(run_id)
            if run_id in self._logs:
                raise RunExistsError(run_id)
            self._logs[run_id] = bytearray(encode(first))
            return
        # A run that has a log has a checked id: no check per append.
        log = self._logs.get(run_id) if type(run_id) is str else None
        if log is None:
            log = self._log(run_id)
        # Copied into one buffer per run, as a file holds them: the bytes orjson returns hold
        # its whole ~8 KiB write buffer (tracemalloc), so keeping each line as returned made it
        # cost about five times its length, and an exact-size copy of each cost more CPU.
        for record in records:
            log += encode(record)

    async def put_product(self, run_id: str, name: str, data: bytes) -> None:
        self._artifacts[(check_run_id(run_id), check_artifact_name(name))] = bytes(data)

    async def get_product(self, run_id: str, name: str) -> bytes | None:
        return self._artifacts.get((check_run_id(run_id), check_artifact_name(name)))

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
