"""Regressions found by the crash and concurrency tests (tests/crash, tests/property)."""

from __future__ import annotations

import asyncio
import fcntl
import os

import pytest

from polyloop import RunActiveError


async def test_a_contender_names_a_holder_that_took_the_lock_an_instant_earlier(store):
    # Two processes starting one run at once: the loser's flock fails before
    # the winner has written its name into the lock file. The refusal must
    # still name the live holder, not "another process".
    store.directory.mkdir(parents=True)
    fd = os.open(store.directory / ".r.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)

        async def name_it_late() -> None:
            await asyncio.sleep(0.02)
            os.pwrite(fd, b"pid 4242 on elsewhere", 0)

        task = asyncio.create_task(name_it_late())
        with pytest.raises(RunActiveError, match="pid 4242 on elsewhere"):
            async with store.lock("r"):
                pass
        await task
    finally:
        os.close(fd)


async def test_a_contender_takes_a_run_its_holder_lets_go_of_an_instant_later(store):
    # The other end of the same race: the holder has already cleared its
    # name and is about to close the lock. The run is free a moment later;
    # refusing it as held by "another process" would be wrong.
    store.directory.mkdir(parents=True)
    fd = os.open(store.directory / ".r.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)

    async def let_go_late() -> None:
        await asyncio.sleep(0.02)
        os.close(fd)

    task = asyncio.create_task(let_go_late())
    async with store.lock("r"):
        assert store.holder("r") == f"pid {os.getpid()} on {os.uname().nodename}"
    await task
