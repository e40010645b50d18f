"""`watch_run` and the log followers under it: whole records only, in order, each once."""

from __future__ import annotations

import os

import pytest

from polyloop import (
    Agent,
    CorruptLogError,
    JsonlStore,
    RunNotFoundError,
    ScriptedModel,
    StoreError,
    encode_record,
    tool,
    watch_run,
)
from polyloop.stores._follow import follower
from polyloop.testing import MemoryStore


@tool(replay="safe")
def look(name: str) -> str:
    """Look something up."""
    return f"{name}: ok"


def agent() -> Agent:
    return Agent(
        model=ScriptedModel([{"tool": "look", "args": {"name": str(i)}} for i in range(3)] + [{"final": "done"}]),
        tools=[look],
    )


async def _finished(store, run_id: str) -> bytes:
    await agent().run("look around", store=store, run_id=run_id)
    return b"".join(encode_record(r) for r in await store.read_log(run_id))


async def test_a_line_being_written_is_returned_once_its_newline_lands(tmp_path):
    whole = await _finished(JsonlStore(tmp_path / "done"), "r")
    lines = whole.splitlines(keepends=True)
    store = JsonlStore(tmp_path / "runs")
    log = store.path("r")
    log.parent.mkdir()
    cut = len(lines[3]) // 2
    log.write_bytes(b"".join(lines[:3]) + lines[3][:cut])  # a record half written
    tail = follower(store, "r")
    assert len(await tail.more()) == 3
    assert await tail.more() == []  # the half line waits
    with open(log, "ab") as f:
        f.write(lines[3][cut:])
    got = await tail.more()
    assert [encode_record(r) for r in got] == [lines[3]]
    with open(log, "ab") as f:
        f.write(b"".join(lines[4:]))
    rest = await tail.more()
    assert [encode_record(r) for r in rest] == lines[4:]


async def test_a_torn_tail_cut_by_a_resume_moves_nothing_already_returned(tmp_path):
    whole = await _finished(JsonlStore(tmp_path / "done"), "r")
    lines = whole.splitlines(keepends=True)
    store = JsonlStore(tmp_path / "runs")
    log = store.path("r")
    log.parent.mkdir()
    log.write_bytes(b"".join(lines[:4]) + b'{"record": "inte')  # torn by a crash
    tail = follower(store, "r")
    assert len(await tail.more()) == 4
    os.truncate(log, len(b"".join(lines[:4])))  # what a resume's lock does to the torn tail
    with open(log, "ab") as f:
        f.write(b"".join(lines[4:]))
    assert [encode_record(r) for r in await tail.more()] == lines[4:]


async def test_a_corrupt_line_is_reported_at_its_line_in_the_whole_log(tmp_path):
    whole = await _finished(JsonlStore(tmp_path / "done"), "r")
    lines = whole.splitlines(keepends=True)
    store = JsonlStore(tmp_path / "runs")
    log = store.path("r")
    log.parent.mkdir()
    log.write_bytes(b"".join(lines[:3]))
    tail = follower(store, "r")
    await tail.more()
    with open(log, "ab") as f:
        f.write(lines[3] + b"not json\n")
    with pytest.raises(CorruptLogError) as caught:
        await tail.more()
    assert caught.value.problems[0].line == 5


async def test_a_log_replaced_under_the_watcher_is_a_store_error(tmp_path):
    store = JsonlStore(tmp_path / "runs")
    whole = await _finished(store, "r")
    tail = follower(store, "r")
    await tail.more()
    replacement = tmp_path / "other.jsonl"
    replacement.write_bytes(whole)
    os.replace(replacement, store.path("r"))
    with pytest.raises(StoreError, match="replaced"):
        await tail.more()
    os.unlink(store.path("r"))
    with pytest.raises(StoreError, match="removed"):
        await tail.more()


async def test_watch_run_yields_every_record_then_the_end(tmp_path):
    store = JsonlStore(tmp_path / "runs")
    await _finished(store, "r")
    events = [e async for e in watch_run(store, "r")]
    records = [e for e in events if e.kind == "record"]
    assert [e.index for e in records] == list(range(len(await store.read_log("r"))))
    assert all(e.backlog for e in records)
    assert events[-1].kind == "end" and events[-1].report.status == "finished"
    results = [e for e in records if e.record.TAG == "model_call_result"]
    assert [e.step for e in results] == [1, 2, 3, 4]  # a result belongs to the step of its intent


async def test_watch_run_waits_for_a_run_to_start_through_its_sleep_seam(tmp_path):
    store = JsonlStore(tmp_path / "runs")
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:  # the run starts while the watcher waits
            await _finished(store, "late")

    events = [e async for e in watch_run(store, "late", wait=True, poll=0.1, idle=0.3, sleep=sleep)]
    assert events[0].kind == "waiting"
    assert slept == [0.1, 0.2, 0.3]  # backing off, up to `idle`
    assert events[-1].report.status == "finished"
    with pytest.raises(RunNotFoundError):
        [e async for e in watch_run(store, "never")]


async def test_a_store_without_a_follower_of_its_own_is_read_whole(memory: MemoryStore):
    await agent().run("look around", store=memory, run_id="m")
    events = [e async for e in watch_run(memory, "m")]
    assert len([e for e in events if e.kind == "record"]) == len(await memory.read_log("m"))
    assert events[-1].report.status == "finished"


class _Growing:
    """A log a test grows one record per pause of the watcher, held until the test lets it go."""

    def __init__(self, records: list) -> None:
        self.pending = list(records)
        self.log: list = []
        self.held = True
        self.slept: list[float] = []

    async def read_log(self, run_id: str) -> list:
        if not self.log:
            raise RunNotFoundError(run_id)
        return list(self.log)

    def holder(self, run_id: str) -> str | None:
        return "pid 1 on test" if self.held else None

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self.pending:
            self.log.append(self.pending.pop(0))
        elif len(self.slept) > 12:
            self.held = False  # the process died with its step half done


async def test_records_arrive_while_held_and_a_release_without_an_end_is_a_stop(tmp_path):
    store = JsonlStore(tmp_path / "runs")
    await _finished(store, "r")
    records = list(await store.read_log("r"))
    cut = next(i for i, r in enumerate(records) if r.TAG == "intent" and r.kind == "action") + 1
    growing = _Growing(records[1:cut])  # run_started is there at once; the action's result never comes
    growing.log.append(records[0])
    events = [e async for e in watch_run(growing, "r", poll=0.1, idle=0.8, sleep=growing.sleep)]
    kinds = [e.kind for e in events]
    assert kinds[0] == "record" and kinds[1] == "held"
    assert [e.record for e in events if e.kind == "record"] == records[:cut]
    assert kinds[-2:] == ["released", "end"]
    assert [i.result_id for i in events[-1].in_flight] == ["s1-a1"]  # in flight when its holder died
    assert events[-1].report.status == "resumable"  # a safe action: resume replays it
    arriving = len(records[1:cut])
    assert growing.slept[:arriving] == [0.1] * arriving  # one look per `poll` while records arrive
    assert growing.slept[arriving:arriving + 5] == [0.1, 0.1, 0.2, 0.4, 0.8]  # then backing off to `idle`
