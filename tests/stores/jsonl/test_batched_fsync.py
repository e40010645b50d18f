"""The JSONL store's batched fsyncs (polyloop/stores/_aio.py): one submit per loop iteration, same answers as fsync(2)."""

from __future__ import annotations

import asyncio
import errno
import os

import pytest

from polyloop import JsonlStore, StoreError
from polyloop.stores import _aio
from polyloop.stores._aio import Syncer, open_syncer
from polyloop.stores._disk import Disk
from test_jsonl_store import MI, MR, started, write_all

pytestmark = pytest.mark.skipif(
    _aio._NUMBERS.get(os.uname().machine) is None or _aio._kernel() < (4, 18),
    reason="asynchronous fsync needs Linux 4.18 on x86-64, arm64 or riscv64",
)


@pytest.fixture
def submits(monkeypatch):
    """Counts the io_submit calls every syncer makes, and how many requests each carried."""
    calls: list[int] = []
    real = Syncer._flush

    def counting(self):
        calls.append(len(self._queued))
        real(self)

    monkeypatch.setattr(Syncer, "_flush", counting)
    return calls


def files(tmp_path, n):
    fds = []
    for i in range(n):
        fd = os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"x")
        fds.append(fd)
    return fds


async def test_fsyncs_asked_in_one_iteration_go_to_the_kernel_together(tmp_path, submits):
    syncer = open_syncer(asyncio.get_running_loop())
    assert syncer is not None
    fds = files(tmp_path, 300)
    try:
        assert await asyncio.gather(*(syncer.fsync(fd) for fd in fds)) == [None] * 300
        assert submits == [300]
        await syncer.fsync(fds[0])
        assert submits == [300, 1]
    finally:
        await syncer.aclose()
        for fd in fds:
            os.close(fd)


async def test_a_refused_fsync_fails_alone_with_the_errno_fsync_gives(tmp_path):
    syncer = open_syncer(asyncio.get_running_loop())
    (good,) = files(tmp_path, 1)
    r, w = os.pipe()
    try:
        with pytest.raises(OSError) as pipe:
            os.fsync(r)
        got = await asyncio.gather(syncer.fsync(good), syncer.fsync(r), syncer.fsync(good), return_exceptions=True)
        assert got[0] is None and got[2] is None
        assert isinstance(got[1], OSError) and got[1].errno == pipe.value.errno == errno.EINVAL
        os.close(w)
        closed = w
        with pytest.raises(OSError) as bad:
            await syncer.fsync(closed)
        assert bad.value.errno == errno.EBADF
    finally:
        await syncer.aclose()
        os.close(good)
        os.close(r)


@pytest.mark.parametrize("when", ["queued", "in flight"])
async def test_a_cancelled_wait_still_lets_the_fsync_land_first(tmp_path, when):
    syncer = open_syncer(asyncio.get_running_loop())
    (fd,) = files(tmp_path, 1)
    try:
        task = asyncio.ensure_future(syncer.fsync(fd))
        await asyncio.sleep(0)
        assert syncer._queued
        if when == "in flight":
            await asyncio.sleep(0)
            assert syncer._inflight and not syncer._queued
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not syncer._inflight and not syncer._queued  # the caller may now close the descriptor
    finally:
        await syncer.aclose()
        os.close(fd)


async def test_requests_for_one_name_share_the_fsync_not_yet_submitted(tmp_path, submits):
    syncer = open_syncer(asyncio.get_running_loop())
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        await asyncio.gather(*(syncer.fsync(fd, same="dir") for _ in range(50)))
        assert submits == [1]
        # Asked after that submit: a change made since needs a new fsync.
        await syncer.fsync(fd, same="dir")
        assert submits == [1, 1]
    finally:
        await syncer.aclose()
        os.close(fd)


async def test_closing_returns_the_eventfd(tmp_path):
    before = set(os.listdir("/proc/self/fd"))
    syncer = open_syncer(asyncio.get_running_loop())
    (fd,) = files(tmp_path, 1)
    await syncer.fsync(fd)
    os.close(fd)
    await syncer.aclose()
    assert set(os.listdir("/proc/self/fd")) - before == set()
    with pytest.raises(RuntimeError, match="closed"):
        await syncer.fsync(0)


# -- large batches: submitted by the helper, off the loop's CPU ----------------

several_cpus = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="the helper submits from another CPU: this process may use only one"
)


@several_cpus
async def test_a_large_batch_is_submitted_from_a_cpu_other_than_the_loops(tmp_path, monkeypatch):
    handed: list[int] = []
    real_hand = _aio._Submitter.hand

    def hand(self, *args):
        handed.append(args[3])  # (syncer, blocks, pointers, n, first)
        real_hand(self, *args)

    monkeypatch.setattr(_aio._Submitter, "hand", hand)
    syncer = open_syncer(asyncio.get_running_loop())
    fds = files(tmp_path, 64)
    try:
        small = _aio._STEER_FROM - 1
        assert await asyncio.gather(*(syncer.fsync(fd) for fd in fds[:small])) == [None] * small
        assert handed == []  # a small batch: the loop submits it itself
        assert await asyncio.gather(*(syncer.fsync(fd) for fd in fds)) == [None] * 64
        assert handed == [64]
        submitter = _aio._submitter()
        avoided = submitter._avoiding
        assert avoided in os.sched_getaffinity(0)
        assert os.sched_getaffinity(submitter.thread.native_id) == os.sched_getaffinity(0) - {avoided}
    finally:
        await syncer.aclose()
        for fd in fds:
            os.close(fd)


@several_cpus
async def test_a_refused_request_in_a_large_batch_fails_alone(tmp_path):
    syncer = open_syncer(asyncio.get_running_loop())
    fds = files(tmp_path, 12)
    r, w = os.pipe()
    try:
        got = await asyncio.gather(*(syncer.fsync(fd) for fd in [*fds[:6], r, *fds[6:]]), return_exceptions=True)
        assert got[:6] == [None] * 6 and got[7:] == [None] * 6
        assert isinstance(got[6], OSError) and got[6].errno == errno.EINVAL
        assert not syncer._inflight
    finally:
        await syncer.aclose()
        for fd in [*fds, r, w]:
            os.close(fd)


@several_cpus
async def test_a_batch_the_helper_has_not_submitted_when_the_context_closes_is_refused(tmp_path, monkeypatch):
    import threading

    go = threading.Event()
    real_submit = Syncer._submit

    def held_back(self, *args):
        if threading.current_thread() is not threading.main_thread():
            go.wait(10)
        real_submit(self, *args)

    monkeypatch.setattr(Syncer, "_submit", held_back)
    syncer = open_syncer(asyncio.get_running_loop())
    fds = files(tmp_path, 10)
    try:
        waits = asyncio.gather(*(syncer.fsync(fd) for fd in fds), return_exceptions=True)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(syncer._inflight) == 10  # with the helper, which waits
        syncer.close()  # the context is given back first
        go.set()
        got = await asyncio.wait_for(waits, 10)
        assert all(isinstance(e, OSError) and e.errno == errno.EBADF for e in got), got
        assert not syncer._inflight
    finally:
        go.set()
        for fd in fds:
            os.close(fd)


# -- the store -----------------------------------------------------------------


async def test_the_store_batches_the_fsyncs_of_concurrent_runs(tmp_path, submits):
    async with JsonlStore(tmp_path / "runs") as store:

        async def held(i):
            async with store.lock(f"r{i}"):
                await write_all(store, f"r{i}")

        await asyncio.gather(*(held(i) for i in range(40)))
        for i in range(40):
            assert [r.TAG for r in await store.read_log(f"r{i}")] == [
                "run_started", "intent", "model_call_result", "intent", "step_completed", "run_finished"]
    # 40 runs x (directory at creation, two intents, the end): far fewer submits than fsyncs.
    assert sum(submits) <= 40 * 4
    assert len(submits) < 40


async def test_each_durable_write_returns_after_its_fsync_landed_and_before_the_next_write(tmp_path, monkeypatch):
    events: list[tuple[str, int]] = []
    real_write, real_land = Disk.write, _aio._Request.land

    def write(self, fd, data):
        events.append(("write", fd))
        real_write(self, fd, data)

    def land(self, value, exc):
        events.append(("landed", self.fd))
        real_land(self, value, exc)

    monkeypatch.setattr(Disk, "write", write)
    monkeypatch.setattr(_aio._Request, "land", land)
    async with JsonlStore(tmp_path / "runs") as store:
        async with store.lock("r"):
            await write_all(store)
            log_fd = store._logs["r"].fd
            events.clear()
            await store.write_intent("r", MI)
            assert events == [("write", log_fd), ("landed", log_fd)]
            events.clear()
            await store.write_model_call_result("r", MR)  # no fsync for a model's answer
            assert events == [("write", log_fd)]


async def test_threads_when_asked_or_when_the_disk_is_a_test_seam(tmp_path, monkeypatch):
    class Seam(Disk):
        pass

    async with JsonlStore(tmp_path / "a", _disk=Seam()) as store:
        await write_all(store)
        assert store._syncers == {}
    monkeypatch.setenv("POLYLOOP_FSYNC", "threads")
    async with JsonlStore(tmp_path / "b") as store:
        await write_all(store)
        assert store._syncers == {}
    monkeypatch.delenv("POLYLOOP_FSYNC")
    async with JsonlStore(tmp_path / "c") as store:
        await write_all(store)
        assert list(store._syncers) == [asyncio.get_running_loop()]


@pytest.mark.parametrize("refusal", [errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.EAGAIN])
async def test_a_refused_request_is_decided_by_fsync_itself(tmp_path, monkeypatch, refusal):
    fsyncs = []

    async def refuse(self, fd, *, same=None):
        raise _aio.Refused(refusal, os.strerror(refusal))

    real = Disk.fsync

    def counted(self, fd):
        fsyncs.append(fd)
        real(self, fd)

    monkeypatch.setattr(Syncer, "fsync", refuse)
    monkeypatch.setattr(Disk, "fsync", counted)
    async with JsonlStore(tmp_path / "runs") as store:
        await write_all(store)  # every durable write still made durable, by fsync(2)
        assert len(await store.read_log("r")) == 6
        # Not here (no asynchronous fsync in this kernel or sandbox): threads from now on.
        # Not now (EAGAIN: no room): this fsync on a thread, the next ones batched again.
        assert store._aio is (refusal == errno.EAGAIN)
    # Each refused request went to fsync(2): the new log's own fsync (always on a thread), its
    # directory, two intents and the end; with EAGAIN the parent directory's too (with threads
    # from the start it goes through the disk's fsync_dir instead).
    assert len(fsyncs) == (6 if refusal == errno.EAGAIN else 5)


async def test_a_failed_fsync_takes_the_record_back(tmp_path, monkeypatch):
    async with JsonlStore(tmp_path / "runs") as store:
        async with store.lock("r"):
            await write_all(store)
            size = store.path("r").stat().st_size

            async def eio(self, fd, *, same=None):
                raise OSError(errno.EIO, os.strerror(errno.EIO))

            monkeypatch.setattr(Syncer, "fsync", eio)
            with pytest.raises(StoreError, match="Input/output error"):
                await store.write_intent("r", MI)
            assert store.path("r").stat().st_size == size
            monkeypatch.undo()
            await store.write_model_call_result("r", MR)  # the next record starts where the failed one did
        assert [r.TAG for r in await store.read_log("r")][-1] == "model_call_result"


async def test_closing_the_store_waits_for_fsyncs_in_flight_and_returns_the_kernel_context(tmp_path):
    before = set(os.listdir("/proc/self/fd"))
    store = JsonlStore(tmp_path / "runs")
    await store.write_run_started(started())
    (syncer,) = store._syncers.values()
    write = asyncio.ensure_future(store.write_intent("r", MI))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert syncer._inflight  # handed to the kernel, not landed yet
    await store.aclose()
    assert not syncer._inflight and syncer._closed
    await write
    assert set(os.listdir("/proc/self/fd")) - before == set()
    await store.write_intent("r", MI)  # a closed store opens what it needs again
    assert len(await store.read_log("r")) == 3
    await store.aclose()
    assert set(os.listdir("/proc/self/fd")) - before == set()


async def test_a_forgotten_store_returns_its_kernel_context_when_collected(tmp_path):
    import gc

    before = set(os.listdir("/proc/self/fd"))

    async def use_and_forget():
        store = JsonlStore(tmp_path / "runs")
        await store.write_run_started(started())
        return next(iter(store._syncers.values()))

    syncer = await use_and_forget()
    gc.collect()
    await asyncio.sleep(0)  # closed from its own loop
    assert syncer._closed
    assert set(os.listdir("/proc/self/fd")) - before == set()
