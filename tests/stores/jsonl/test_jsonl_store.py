"""The JSONL store: every durability rule of SPEC §6, each with a test that fails without it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import orjson
import pytest

from polyloop import (
    CorruptLogError,
    Intent,
    InvalidRunIdError,
    JsonlStore,
    ModelCallResult,
    Resolution,
    RunActiveError,
    RunExistsError,
    RunFinished,
    RunNotFoundError,
    RunStarted,
    SchemaVersionError,
    StepCompleted,
    StoreError,
)
from polyloop.stores import parse_log
from polyloop.stores._disk import Disk

MI = Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1")
MR = ModelCallResult(result_id="s1-m1", output={"text": None, "tool_call": {"name": "t", "args": {}}})
AI = Intent(kind="action", step=1, attempt=1, result_id="s1-a1", tool="t", args={}, replay="never",
            idempotency_key="pl-k")
SC = StepCompleted(step=1, result_id="s1-a1", observation="ok")
RS = Resolution(result_id="s1-a1", outcome="executed", observation="ok", by="op")
RF = RunFinished(reason="max_steps", result=None, steps=1)


_STARTED: dict[str, RunStarted] = {}


def started(run_id="r"):
    return _STARTED.setdefault(run_id, RunStarted(run_id=run_id, goal="g"))


async def write_all(store, run_id="r"):
    await store.write_run_started(started(run_id))
    await store.write_intent(run_id, MI)
    await store.write_model_call_result(run_id, MR)
    await store.write_intent(run_id, AI)
    await store.write_step_completed(run_id, SC)
    await store.write_run_finished(run_id, RF)


async def test_one_file_per_run_one_tagged_record_per_line(store):
    await write_all(store, "a")
    await store.write_run_started(started("b"))
    assert sorted(p.name for p in store.directory.glob("*.jsonl")) == ["a.jsonl", "b.jsonl"]
    lines = store.path("a").read_bytes().splitlines()
    assert [orjson.loads(line)["record"] for line in lines] == [
        "run_started", "intent", "model_call_result", "intent", "step_completed", "run_finished",
    ]
    assert await store.read_log("a") == [started("a"), MI, MR, AI, SC, RF]


@pytest.mark.parametrize("run_id", ["../x", "/abs", ".hidden", "", "ünï", "a/b", "..", "x\n"])
async def test_unsafe_run_ids_write_nothing_anywhere(tmp_path, run_id):
    store = JsonlStore(tmp_path / "runs")
    with pytest.raises(InvalidRunIdError):
        await store.write_run_started(started(run_id))
    with pytest.raises(InvalidRunIdError):
        await store.read_log(run_id)
    with pytest.raises(InvalidRunIdError):
        async with store.lock(run_id):
            pass
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


async def test_missing_run_is_not_found(store):
    with pytest.raises(RunNotFoundError):
        await store.read_log("nope")


class SpyDisk(Disk):
    """The real disk, recording what each fsync made durable and on which thread."""

    def __init__(self) -> None:
        self.synced: list[str] = []
        self.threads: list[threading.Thread] = []
        self.delay = 0.0

    def fsync(self, fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        with open(path, "rb") as f:
            last = orjson.loads(f.read().splitlines()[-1])
        self.synced.append(last["record"] + (":" + last["kind"] if last["record"] == "intent" else ""))
        self._wait()
        super().fsync(fd)

    def fsync_dir(self, path):
        self.synced.append("<dir>")
        self._wait()
        super().fsync_dir(path)

    def _wait(self):
        self.threads.append(threading.current_thread())
        time.sleep(self.delay)


@pytest.fixture
def spy(tmp_path):
    disk = SpyDisk()
    return disk, JsonlStore(tmp_path / "spied", _disk=disk)


async def test_fsync_happens_at_exactly_the_durable_writes(spy):
    disk, store = spy
    await write_all(store)
    await store.write_resolution("r", RS)
    assert disk.synced == [
        "run_started", "<dir>", "<dir>", "intent:model_call", "intent:action", "run_finished", "resolution",
    ]


async def test_fsync_runs_off_the_event_loop(spy):
    disk, store = spy
    await write_all(store)
    assert disk.threads and threading.main_thread() not in disk.threads


async def test_a_slow_disk_does_not_block_the_loop(spy):
    disk, store = spy
    disk.delay = 0.2
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    await store.write_run_started(started())
    task.cancel()
    assert ticks >= 10  # the loop kept running while fsync slept


def _open_in(directory: Path) -> set[str]:
    """The files under `directory` this process has open."""
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(directory)):
                names.add(target)
    return names


async def test_no_file_handle_outlives_a_write(store):
    # (The store's own descriptors, e.g. its eventfd for batched fsyncs, live until aclose.)
    await write_all(store)
    await store.read_log("r")
    assert _open_in(store.directory) == set()


async def test_run_started_is_exclusive_even_when_concurrent(store):
    results = await asyncio.gather(
        *(store.write_run_started(RunStarted(run_id="r", goal=f"g{i}")) for i in range(8)),
        return_exceptions=True,
    )
    assert sum(r is None for r in results) == 1
    assert all(isinstance(r, RunExistsError) for r in results if r is not None)
    (first,) = await store.read_log("r")
    assert first.goal in {f"g{i}" for i in range(8)}


class FailingDisk(Disk):
    """The real disk, until `fail` is set: then a write lands `keep` bytes and raises `fail`."""

    def __init__(self) -> None:
        self.fail: OSError | None = None
        self.keep = 0.5

    def write(self, fd, data):
        if self.fail is None:
            return super().write(fd, data)
        super().write(fd, data[: int(len(data) * self.keep)])
        raise self.fail


async def test_a_write_that_fails_halfway_leaves_no_visible_record(tmp_path):
    disk = FailingDisk()
    store = JsonlStore(tmp_path / "runs", _disk=disk)
    await store.write_run_started(started())
    await store.write_intent("r", MI)
    disk.fail = OSError(28, "No space left on device")
    with pytest.raises(StoreError, match="No space left"):
        await store.write_model_call_result("r", MR)
    with pytest.raises(StoreError):
        await store.write_intent("r", AI)
    assert await store.read_log("r") == [started(), MI]
    assert store.path("r").read_bytes().endswith(b"\n")
    disk.fail = None
    await store.write_model_call_result("r", MR)
    assert (await store.read_log("r"))[-1] == MR


async def test_a_crash_while_creating_leaves_no_run(tmp_path):
    disk = FailingDisk()
    store = JsonlStore(tmp_path / "runs", _disk=disk)
    disk.fail, disk.keep = OSError(5, "I/O error"), 0.1
    with pytest.raises(StoreError):
        await store.write_run_started(started())
    assert not store.path("r").exists()
    disk.fail = None
    await store.write_run_started(started())
    assert await store.read_log("r") == [started()]


async def test_a_vanished_log_stops_writes(store):
    await store.write_run_started(started())
    store.path("r").unlink()
    with pytest.raises(StoreError, match="no longer exists"):
        await store.write_intent("r", MI)


def good_lines():
    return b"".join(
        orjson.dumps({"record": r.TAG, **{k: getattr(r, k) for k in r.__slots__}}) + b"\n"
        for r in [started(), MI, MR]
    )


@pytest.mark.parametrize(
    "tail",
    [b'{"record":"intent","kind":"act', b"\x00\x00\x00", b'{"rec', b"{", b"garbage", b"\x00" * 4096],
    ids=["cut-json", "zeros", "cut-key", "one-brace", "garbage-unterminated", "a-page-of-zeros"],
)
async def test_an_unterminated_last_segment_is_a_torn_tail(store, tail):
    store.directory.mkdir(parents=True)
    store.path("r").write_bytes(good_lines() + tail)
    assert len(await store.read_log("r")) == 3
    parsed = parse_log(good_lines() + tail)
    assert parsed.torn_line == 4 and parsed.torn_offset == len(good_lines()) and not parsed.problems


@pytest.mark.parametrize(
    "line",
    [b"garbage\n", b'{"record":"intent","kind":"act\n', b"\x00\x00\x00\n", b'{"rec\r\n'],
    ids=["garbage", "cut-json-then-newline", "zeros-then-newline", "crlf"],
)
@pytest.mark.parametrize("where", ["last", "middle"])
async def test_a_terminated_line_that_does_not_decode_is_corruption_wherever_it_stands(store, line, where):
    lines = good_lines().splitlines(keepends=True)
    data = good_lines() + line if where == "last" else lines[0] + line + lines[1] + lines[2]
    bad_line = 4 if where == "last" else 2
    store.directory.mkdir(parents=True)
    store.path("r").write_bytes(data)
    with pytest.raises(CorruptLogError) as info:
        await store.read_log("r")
    # The undecodable line itself, once: not one problem per later line.
    assert [p.line for p in info.value.problems] == [bad_line]
    assert parse_log(data).torn_line is None


async def test_every_undecodable_line_is_named_and_nothing_else(store):
    lines = good_lines().splitlines(keepends=True)
    data = lines[0] + b"{broken\n" + lines[1] + b"\x00\x00\n" + lines[2] + b'{"rec'
    parsed = parse_log(data)
    assert [p.line for p in parsed.problems] == [2, 4]
    assert "NUL" in parsed.problems[1].message
    assert parsed.torn_line == 6 and len(parsed.records) == 3


async def test_an_invalid_record_mid_file_is_corruption_not_a_torn_tail(store):
    store.directory.mkdir(parents=True)
    store.path("r").write_bytes(good_lines() + b'{"record":"intent","step":1}\n')
    with pytest.raises(CorruptLogError, match="line 4"):
        await store.read_log("r")


async def test_blank_lines_are_skipped(store):
    store.directory.mkdir(parents=True)
    lines = good_lines().splitlines(keepends=True)
    store.path("r").write_bytes(b"\n" + lines[0] + b"  \n\n" + lines[1] + lines[2] + b"\n")
    assert len(await store.read_log("r")) == 3


async def test_an_unknown_major_version_is_refused(store):
    store.directory.mkdir(parents=True)
    store.path("r").write_bytes(good_lines().replace(b'"schema_version":"1.4"', b'"schema_version":"2.0"'))
    with pytest.raises(SchemaVersionError, match="2.0"):
        await store.read_log("r")


async def test_taking_the_lock_cuts_a_torn_tail_so_appends_start_clean(store):
    store.directory.mkdir(parents=True)
    store.path("r").write_bytes(good_lines() + b'{"record":"intent","kin')
    async with store.lock("r"):
        await store.write_intent("r", AI.__class__(kind="model_call", step=1, attempt=2, result_id="x"))
    data = store.path("r").read_bytes()
    assert parse_log(data).torn_line is None
    assert len(await store.read_log("r")) == 4


async def test_a_complete_last_line_without_newline_is_a_torn_tail(store):
    # Every record is written with its newline in one write: without it, the
    # write never returned, so the record was never acknowledged.
    store.directory.mkdir(parents=True)
    store.path("r").write_bytes(good_lines().rstrip(b"\n"))
    assert len(await store.read_log("r")) == 2
    async with store.lock("r"):
        await store.write_intent("r", Intent(kind="model_call", step=1, attempt=2, result_id="x"))
    assert len(await store.read_log("r")) == 3


async def test_the_lock_excludes_other_tasks_and_names_the_holder(store):
    async with store.lock("r"):
        with pytest.raises(RunActiveError, match=f"pid {os.getpid()}"):
            async with store.lock("r"):
                pass
        assert store.holder("r") == f"pid {os.getpid()} on {os.uname().nodename}"
    assert store.holder("r") is None
    async with store.lock("r"):
        pass


HOLD = textwrap.dedent(
    """
    import asyncio, sys
    from polyloop import JsonlStore
    async def main():
        async with JsonlStore(sys.argv[1]).lock("r"):
            print("held", flush=True)
            await asyncio.sleep(60)
    asyncio.run(main())
    """
)


async def test_a_live_process_holds_the_run_until_it_dies(store):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(store.directory)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"held\n"
        with pytest.raises(RunActiveError, match=f"pid {proc.pid}"):
            async with store.lock("r"):
                pass
        assert store.holder("r").startswith(f"pid {proc.pid}")
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    async with store.lock("r"):
        pass


async def test_a_log_replaced_under_a_live_run_stops_it(store):
    async with store.lock("r"):
        await store.write_run_started(started())
        await store.write_intent("r", MI)
        original = store.path("r").read_bytes()
        replacement = store.directory / "other"
        replacement.write_bytes(original)
        os.replace(replacement, store.path("r"))
        # The held log stays open: the next durable write (before any effect
        # it would precede) finds the path names another file, and stops.
        with pytest.raises(StoreError, match="replaced under the run"):
            await store.write_intent("r", MI.__class__(kind="model_call", step=1, attempt=2, result_id="s1-m2"))
    assert store.path("r").read_bytes() == original


async def test_creation_sweeps_leftovers_of_dead_creators_only(store):
    store.directory.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = store.directory / f".r.{dead.stdout.strip()}.abcd1234.tmp"
    live = store.directory / f".r.{os.getpid()}.abcd1234.tmp"
    other = store.directory / f".r.5.{dead.stdout.strip()}.abcd1234.tmp"  # run "r.5", its creator dead too
    foreign = store.directory / ".notes.tmp"  # not a creation's name: not ours to remove
    for p in (stale, live, other, foreign):
        p.write_bytes(b'{"record":"run_st')
    await store.write_run_started(started())
    assert not stale.exists() and not other.exists()
    assert live.exists() and foreign.exists()
