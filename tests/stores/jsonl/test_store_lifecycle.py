"""A JSONL store owns its machinery: disk threads started lazily, ended by aclose, a finalizer,
and a lock that hands back the log it read (read once, under the lock, off the event loop)."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest

from polyloop import Intent, JsonlStore, RunStarted, encode_record
from polyloop.stores._disk import Disk

MI = Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1")


_STARTED: dict[str, RunStarted] = {}


def started(run_id: str = "r") -> RunStarted:
    return _STARTED.setdefault(run_id, RunStarted(run_id=run_id, goal="g"))


@pytest.fixture(autouse=True)
def fsyncs_on_threads(monkeypatch):
    # These tests are about the disk threads; with the default engine the
    # fsyncs of appends go to the kernel in batches and start no thread
    # (its own lifecycle: tests/stores/jsonl/test_batched_fsync.py).
    monkeypatch.setenv("POLYLOOP_FSYNC", "threads")


def disk_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "polyloop-disk"}


class SlowDisk(Disk):
    """The real disk; fsync and read take `delay` seconds and record the thread they ran on."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.synced = 0
        self.read_on: list[threading.Thread] = []

    def fsync(self, fd: int) -> None:
        time.sleep(self.delay)
        super().fsync(fd)
        self.synced += 1

    def read(self, path: str) -> bytes:
        self.read_on.append(threading.current_thread())
        time.sleep(self.delay)
        return super().read(path)


async def test_threads_start_on_first_use_and_aclose_ends_them(tmp_path):
    before = disk_threads()
    store = JsonlStore(tmp_path)
    assert disk_threads() == before  # constructing a store starts nothing
    await store.write_run_started(started())
    await store.write_intent("r", MI)
    mine = disk_threads() - before
    assert mine
    await store.aclose()
    assert not any(t.is_alive() for t in mine)
    await store.aclose()  # idempotent


async def test_async_with_closes_the_store_and_a_closed_store_starts_again(tmp_path):
    before = disk_threads()
    async with JsonlStore(tmp_path) as store:
        await store.write_run_started(started())
        first = disk_threads() - before
    assert first and not any(t.is_alive() for t in first)
    # Documented choice: closing frees the threads; the store stays usable.
    await store.write_intent("r", MI)
    assert await store.read_log("r") == [started(), MI]
    second = disk_threads() - before
    assert second and not (second & first)
    await store.aclose()
    assert not any(t.is_alive() for t in second)


async def test_closing_waits_for_a_write_in_flight(tmp_path):
    disk = SlowDisk(delay=0.3)
    store = JsonlStore(tmp_path, _disk=disk)
    await store.write_run_started(started())
    synced = disk.synced
    write = asyncio.create_task(store.write_intent("r", MI))
    await asyncio.sleep(0.05)  # the append is in; its fsync is on a disk thread
    assert not write.done()
    await store.aclose()
    assert disk.synced == synced + 1  # the fsync ended before aclose returned
    await write
    assert (await store.read_log("r"))[-1] == MI
    await store.aclose()


async def test_a_forgotten_store_ends_its_threads_when_collected(tmp_path):
    before = disk_threads()

    async def use_and_forget() -> None:
        store = JsonlStore(tmp_path)
        await store.write_run_started(started())

    await use_and_forget()
    mine = disk_threads() - before
    assert mine
    gc.collect()
    for t in mine:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in mine)


async def test_each_store_has_its_own_threads(tmp_path):
    before = disk_threads()
    a, b = JsonlStore(tmp_path / "a"), JsonlStore(tmp_path / "b")
    await a.write_run_started(started())
    only_a = disk_threads() - before
    await b.write_run_started(started())
    await a.aclose()
    assert not any(t.is_alive() for t in only_a)
    await b.write_intent("r", MI)  # b is unaffected by closing a
    await b.aclose()


async def test_the_lock_yields_none_for_a_run_without_a_log(store):
    async with store.lock("new") as parsed:
        assert parsed is None


async def test_the_lock_yields_what_read_log_returns(store):
    store.directory.mkdir(parents=True)
    head = encode_record(started()) + encode_record(MI)
    store.path("r").write_bytes(head + b'{"record":"intent","ki')
    async with store.lock("r") as parsed:
        assert parsed is not None and parsed.torn_line == 3 and parsed.torn_offset == len(head)
        assert parsed.records == await store.read_log("r") == [started(), MI]
        assert parsed.lines == [1, 2] and not parsed.problems


async def test_a_whole_last_record_without_its_newline_is_torn_and_cut_by_the_first_write(store):
    store.directory.mkdir(parents=True)
    first = encode_record(started())
    store.path("r").write_bytes(first + encode_record(MI)[:-1])
    async with store.lock("r") as parsed:
        assert parsed.records == [started()] and parsed.torn_line == 2
        assert store.path("r").read_bytes() == first + encode_record(MI)[:-1]  # nothing written yet
        await store.write_intent("r", MI)
    assert store.path("r").read_bytes() == first + encode_record(MI)


async def test_a_hold_that_writes_nothing_leaves_a_torn_tail_as_it_was(store):
    store.directory.mkdir(parents=True)
    data = encode_record(started()) + b'{"record":"inte'
    store.path("r").write_bytes(data)
    async with store.lock("r") as parsed:
        assert parsed.records == [started()] and parsed.torn_line == 2
    assert store.path("r").read_bytes() == data


@pytest.mark.parametrize("how", ["read_log", "read_parsed", "lock"])
async def test_reading_and_parsing_happen_off_the_event_loop(tmp_path, how):
    disk = SlowDisk(delay=0.2)
    store = JsonlStore(tmp_path, _disk=disk)
    await store.write_run_started(started())
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        if how == "lock":
            async with store.lock("r") as parsed:
                assert parsed.records == [started()]
        else:
            await getattr(store, how)("r")
    finally:
        task.cancel()
    assert disk.read_on and threading.main_thread() not in disk.read_on
    # The loop kept running while the read took its 0.2 s: a read on the loop would leave the ticker at
    # most the one tick before it (a loaded machine may stretch each 10 ms sleep, so not 20 of them).
    assert ticks >= 2
    await store.aclose()


async def test_list_runs_is_sorted_and_sees_new_runs(tmp_path):
    store = JsonlStore(tmp_path / "runs")
    assert await store.list_runs() == []
    for run_id in ("b", "a-2", "a-10"):
        await store.write_run_started(started(run_id))
    assert await store.list_runs() == ["a-10", "a-2", "b"]
    await store.aclose()


def test_the_disk_seam_is_not_part_of_the_public_signature():
    import inspect

    assert list(inspect.signature(JsonlStore).parameters) == ["directory"]
