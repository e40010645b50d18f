"""The Disk seam sees every file-system change the JSONL store makes, in order.

The power-loss explorer and the fault-injection tests rely on this: a change
that bypassed the seam could not be recorded, failed or replayed.
"""

from __future__ import annotations

import errno
import os
import re

import pytest

from polyloop import (
    Intent,
    JsonlStore,
    ModelCallResult,
    Resolution,
    RunFinished,
    RunStarted,
    StepCompleted,
    StoreError,
    encode_record,
)
from polyloop.stores._disk import Disk

MI = Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1")
MR = ModelCallResult(result_id="s1-m1", output={"text": None, "tool_call": {"name": "t", "args": {}}})
AI = Intent(kind="action", step=1, attempt=1, result_id="s1-a1", tool="t", args={}, replay="never",
            idempotency_key="pl-k")
SC = StepCompleted(step=1, result_id="s1-a1", observation="ok")
RF = RunFinished(reason="max_steps", result=None, steps=1)


def _name(path: str) -> str:
    """The base name; a creation's private file `.r.<pid>.<random>.tmp` reads `.r.tmp`."""
    return re.sub(r"^\.r\.\d+\.[0-9a-f]{8}\.tmp$", ".r.tmp", os.path.basename(path))


class Recorder(Disk):
    """The real disk, recording each call's name and the base name of the path it touched."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.names: dict[int, str] = {}

    def _note(self, op: str, target: str) -> None:
        self.calls.append(f"{op} {target}")

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        self.names[fd] = _name(path)
        self._note("open", self.names[fd])
        return fd

    def write(self, fd, data):
        self._note("write", self.names[fd])
        super().write(fd, data)

    def fsync(self, fd):
        self._note("fsync", self.names[fd])
        super().fsync(fd)

    def ftruncate(self, fd, size):
        self._note("ftruncate", self.names[fd])
        super().ftruncate(fd, size)

    def close(self, fd):
        self._note("close", self.names.pop(fd))
        super().close(fd)

    def fstat(self, fd):
        self._note("fstat", self.names[fd])
        return super().fstat(fd)

    def link(self, src, dst):
        self._note("link", f"{_name(src)}->{_name(dst)}")
        super().link(src, dst)

    def unlink(self, path):
        self._note("unlink", _name(path))
        super().unlink(path)

    def mkdir(self, path):
        self._note("mkdir", _name(path))
        super().mkdir(path)

    def fsync_dir(self, path):
        self._note("fsync_dir", _name(path))
        super().fsync_dir(path)

    def read(self, path):
        self._note("read", _name(path))
        return super().read(path)

    def take(self) -> list[str]:
        calls, self.calls = self.calls, []
        return calls


async def test_each_write_is_exactly_these_disk_calls(tmp_path):
    disk = Recorder()
    store = JsonlStore(tmp_path / "runs", _disk=disk)
    await store.write_run_started(RunStarted(run_id="r", goal="g"))
    assert disk.take() == [
        "mkdir runs", "open .r.tmp", "write .r.tmp", "fsync .r.tmp", "fstat .r.tmp", "close .r.tmp",
        "link .r.tmp->r.jsonl", "unlink .r.tmp", "fsync_dir runs", f"fsync_dir {tmp_path.name}",
    ]
    durable = ["open r.jsonl", "fstat r.jsonl", "write r.jsonl", "fsync r.jsonl", "close r.jsonl"]
    inline = ["open r.jsonl", "fstat r.jsonl", "write r.jsonl", "close r.jsonl"]
    for write, expected in [
        (store.write_intent("r", MI), durable),
        (store.write_model_call_result("r", MR), inline),
        (store.write_intent("r", AI), durable),
        (store.write_resolution("r", Resolution(result_id="s1-a1", outcome="executed", observation="ok", by="op")),
         durable),
        (store.write_step_completed("r", SC), inline),
        (store.write_run_finished("r", RF), durable),
    ]:
        await write
        assert disk.take() == expected
    await store.aclose()


async def test_the_lock_reads_once_and_the_first_write_seals_a_torn_tail_through_the_disk(tmp_path):
    disk = Recorder()
    store = JsonlStore(tmp_path / "runs", _disk=disk)
    store.directory.mkdir()
    store.path("r").write_bytes(encode_record(RunStarted(run_id="r", goal="g")) + b'{"record":"int')
    async with store.lock("r") as parsed:
        assert len(parsed.records) == 1
        assert disk.take() == [
            "mkdir runs", "open .r.lock", "fstat .r.lock", "ftruncate .r.lock", "write .r.lock", "read r.jsonl",
        ]
        await store.write_intent("r", Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"))
        assert disk.take() == [
            "open r.jsonl", "fstat r.jsonl", "ftruncate r.jsonl", "fsync r.jsonl", "write r.jsonl", "fsync r.jsonl",
        ]
    # The log stays open while the run is held, and closes with the hold.
    assert disk.take() == ["close r.jsonl", "ftruncate .r.lock", "close .r.lock"]
    await store.aclose()


class DeadDisk(Disk):
    """A disk on which every call fails."""

    def __getattribute__(self, name):
        if name in {"open", "write", "fsync", "ftruncate", "close", "link", "rename", "unlink", "mkdir",
                    "fsync_dir", "read", "fstat"}:
            def fail(*args, **kwargs):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return fail
        return super().__getattribute__(name)


async def test_nothing_reaches_the_file_system_around_the_disk(tmp_path):
    store = JsonlStore(tmp_path / "runs", _disk=DeadDisk())
    with pytest.raises(StoreError, match="Input/output error"):
        await store.write_run_started(RunStarted(run_id="r", goal="g"))
    with pytest.raises(StoreError):
        await store.write_intent("r", MI)
    with pytest.raises(StoreError):
        await store.read_log("r")
    with pytest.raises(StoreError):
        async with store.lock("r"):
            pass
    assert list(tmp_path.iterdir()) == []  # not even the directory was made
    await store.aclose()


async def test_the_people_in_the_loop_records_are_fsynced_before_the_write_returns(tmp_path):
    from polyloop import ApprovalRequest, Decision

    disk = Recorder()
    store = JsonlStore(tmp_path / "runs", _disk=disk)
    await store.write_run_started(RunStarted(run_id="r", goal="g"))
    disk.take()
    durable = ["open r.jsonl", "fstat r.jsonl", "write r.jsonl", "fsync r.jsonl", "close r.jsonl"]
    request = ApprovalRequest(result_id="s1-a1", step=1, kind="approval", tool="t", args={}, args_sha256="0" * 64,
                              idempotency_key="pl-k")
    await store.write_approval_request("r", request)
    assert disk.take() == durable
    await store.write_decision("r", Decision(id="s1-a1", decision="denied", by="ann", request_sha256="0" * 64,
                                             args_sha256="0" * 64))
    assert disk.take() == durable
    await store.aclose()
