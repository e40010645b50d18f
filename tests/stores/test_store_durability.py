"""The durability rule is written once (`DURABLE`), and every store of ours follows it from there.

A write of a durable kind reaches the disk (an fsync of the log) before it returns; any other
kind does not fsync on its own. Checked on the real JSONL store through its disk seam, on the
in-memory store and on `RecordWrites` for any store built on it; the reference page's table is
the code's table.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from polyloop import JsonlStore
from polyloop._log.records import (
    DURABLE,
    RECORD_TYPES,
    ActionResult,
    ApprovalRequest,
    Artifact,
    CheckpointAccepted,
    CrashLoopAccepted,
    Decision,
    GuardCheck,
    Intent,
    ModelCallResult,
    Resolution,
    Resumed,
    RunFinished,
    RunStarted,
    RunStopped,
    StepCompleted,
)
from polyloop._log.store_port import Capabilities, capabilities_of, writers_of
from polyloop.stores._disk import Disk
from polyloop.stores._writes import RecordWrites
from polyloop.testing import MemoryStore

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference" / "stores.md"

ONE_OF_EACH = [
    Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
    ModelCallResult(result_id="s1-m1", output={"text": "x", "tool_call": None}),
    StepCompleted(step=1, result_id=None, observation=None),
    Resolution(result_id="s1-a1", outcome="not_executed", by="op", reason="checked"),
    GuardCheck(result_id="s1-a1", guard="precondition", passed=True),
    ActionResult(result_id="s1-a1", observation="ok"),
    ApprovalRequest(result_id="s1-a1", step=1, kind="approval", tool="pay", args={}, args_sha256="0" * 64,
                    idempotency_key="k"),
    Decision(id="s1-a1", decision="denied", by="ann", request_sha256="0" * 64, args_sha256="0" * 64, reason="no"),
    CheckpointAccepted(differences=[], reason="ok", by="ann"),
    Resumed(by="ann"),
    CrashLoopAccepted(resumes=3, reason="ok", by="ann"),
    Artifact(result_id="s1-a1", name="x", path="r.artifacts/x", size=0, sha256="0" * 64),
    RunStopped(cause="model_unavailable", step=1, attempts=1, failures=1, error="HTTP 503",
               since="2026-01-01T00:00:00Z"),
    RunFinished(reason="final_answer", result="done", steps=1),
]


def test_every_record_kind_has_one_row_and_the_sample_covers_them():
    assert set(DURABLE) == set(RECORD_TYPES)
    assert {type(r) for r in ONE_OF_EACH} | {RunStarted} == set(RECORD_TYPES)


def test_what_must_be_durable_is_what_the_spec_names():
    # SPEC §6: run_started, intents, run_finished and resolution are fsynced; results and step
    # records are not (prefix durability); the later kinds as the port documents them.
    assert {cls.TAG for cls, durable in DURABLE.items() if durable} == {
        "run_started", "intent", "run_finished", "resolution", "guard_check", "approval_request",
        "decision", "checkpoint_accepted", "resumed", "crash_loop_accepted", "run_stopped",
    }


class CountingDisk(Disk):
    """The real disk, counting fsyncs of files (a disk of its own also keeps fsyncs off the kernel batch)."""

    def __init__(self) -> None:
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        super().fsync(fd)


async def _fsyncs_per_write(store: JsonlStore, disk: CountingDisk, *, held: bool) -> dict[str, int]:
    counts: dict[str, int] = {}

    async def write_all() -> None:
        await store.write_run_started(RunStarted(run_id="r", goal="g"))
        writers = writers_of(store)
        for record in ONE_OF_EACH:
            before = disk.fsyncs
            await writers[type(record)]("r", record)
            counts[record.TAG] = disk.fsyncs - before

    if held:
        async with store.lock("r"):
            await write_all()
    else:
        await write_all()
    await store.aclose()
    return counts


@pytest.mark.parametrize("held", [False, True], ids=["unheld", "held"])
def test_the_jsonl_store_fsyncs_exactly_the_durable_kinds(tmp_path, held):
    disk = CountingDisk()
    store = JsonlStore(tmp_path, _disk=disk)
    counts = asyncio.run(_fsyncs_per_write(store, disk, held=held))
    assert {tag: n > 0 for tag, n in counts.items()} == {type(r).TAG: DURABLE[type(r)] for r in ONE_OF_EACH}
    assert len(asyncio.run(JsonlStore(tmp_path).read_log("r"))) == len(ONE_OF_EACH) + 1


def test_the_jsonl_store_batches_intents_in_one_fsync(tmp_path):
    disk = CountingDisk()
    store = JsonlStore(tmp_path, _disk=disk)
    intents = [Intent(kind="model_call", step=1, attempt=a, result_id=f"s1-m{a}") for a in (1, 2, 3)]

    async def go() -> int:
        await store.write_run_started(RunStarted(run_id="r", goal="g"))
        before = disk.fsyncs
        await store.write_intents("r", intents)
        await store.aclose()
        return disk.fsyncs - before

    assert asyncio.run(go()) == 1
    assert asyncio.run(JsonlStore(tmp_path).read_log("r"))[1:] == intents


class Spy(RecordWrites):
    """A store built on `RecordWrites`: what each public write asks of the one append."""

    capabilities = Capabilities()

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bool]] = []

    async def _append_records(self, run_id, records, *, durable):
        self.calls.append((records[0].TAG, len(records), durable))


def test_every_public_write_asks_the_append_for_the_tables_durability():
    spy = Spy()

    async def go() -> None:
        await spy.write_run_started(RunStarted(run_id="r", goal="g"))
        for record in ONE_OF_EACH:
            await getattr(spy, f"write_{record.TAG}")("r", record)
        await spy.write_intents("r", [ONE_OF_EACH[0]] * 2)

    asyncio.run(go())
    expected = [("run_started", 1, True)] + [(type(r).TAG, 1, DURABLE[type(r)]) for r in ONE_OF_EACH]
    assert spy.calls == [*expected, ("intent", 2, True)]


def test_the_reference_table_is_the_codes_table():
    text = DOCS.read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| (yes|no) \|", text, re.M))
    assert rows == {cls.TAG: "yes" if durable else "no" for cls, durable in DURABLE.items()}


class ThirdParty:
    """A store that declares nothing: the six writes, `read_log`, and a lock."""

    async def write_run_started(self, record): ...
    async def write_intent(self, run_id, record): ...
    async def write_model_call_result(self, run_id, record): ...
    async def write_step_completed(self, run_id, record): ...
    async def write_run_finished(self, run_id, record): ...
    async def write_resolution(self, run_id, record): ...
    async def write_guard_check(self, run_id, record): ...
    async def write_action_result(self, run_id, record): ...
    async def write_approval_request(self, run_id, record): ...
    async def write_decision(self, run_id, record): ...
    async def write_checkpoint_accepted(self, run_id, record): ...
    async def write_resumed(self, run_id, record): ...
    async def write_crash_loop_accepted(self, run_id, record): ...
    async def read_log(self, run_id): ...
    def lock(self, run_id): ...


class OlderThirdParty(ThirdParty):
    write_approval_request = write_decision = None  # type: ignore[assignment]
    write_checkpoint_accepted = write_resumed = write_crash_loop_accepted = None  # type: ignore[assignment]


def test_a_store_that_declares_nothing_is_discovered_by_its_methods():
    can = capabilities_of(ThirdParty())
    assert can.locking and not (can.batching or can.probing or can.holding or can.parsing or can.artifacts)
    assert can.writes == {GuardCheck, ActionResult, ApprovalRequest, Decision, CheckpointAccepted, Resumed,
                          CrashLoopAccepted}
    older = capabilities_of(OlderThirdParty())
    assert older.writes == {GuardCheck, ActionResult} and older.locking  # it still holds its runs
    writers = writers_of(OlderThirdParty())
    assert writers[Decision] is None and writers[Artifact] is None and writers[GuardCheck] is not None


def test_our_stores_declare_what_they_have():
    for store in (JsonlStore("unused"), MemoryStore()):
        declared = store.capabilities
        assert capabilities_of(store) is declared
        assert declared.artifacts and declared.locking and declared.batching
        for cls in declared.writes:
            assert callable(writers_of(store)[cls])
