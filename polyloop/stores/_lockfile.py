"""The run lock of the JSONL store: an exclusive `flock` on `<directory>/.<run_id>.lock`.

The kernel releases a `flock` when its holder dies, so a crashed run is free
again at once. The holder writes its name (`pid 41 on host`) into the lock
file so that a refused contender can say who holds the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import re
import socket
import stat

from .._log.errors import RunActiveError, StoreError
from .._files import open_regular
from ._disk import Disk, kind_of, why

# Never follow a link (a lock file linked elsewhere would be truncated and
# written), never block on a FIFO.
SAFE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_lock(disk: Disk, directory: str, path: str, run_id: str) -> int:
    """Create (if needed) and open the lock file; it must be a regular file."""
    try:
        disk.mkdir(directory)
        fd = disk.open(path, os.O_RDWR | os.O_CREAT | SAFE, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot create the lock {path}: {why(path, exc)}", run_id=run_id) from exc
    try:
        mode = disk.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise StoreError(f"cannot use the lock {path}: it is {kind_of(mode)}, not a regular file", run_id=run_id)
    except OSError as exc:
        disk.close(fd)
        raise StoreError(f"cannot use the lock {path}: {exc.strerror}", run_id=run_id) from exc
    except BaseException:
        disk.close(fd)
        raise
    return fd


async def take(fd: int, run_id: str) -> None:
    """Take the run's flock, or raise `RunActiveError` naming the live holder."""
    # A holder writes its name just after taking the lock and clears it just
    # before letting go: while the lock is held but unnamed (a simultaneous
    # start, or a holder finishing), look again for a moment rather than
    # answer "another process" or refuse a run that is about to be free.
    name = None
    for _ in range(20):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            name = describe_holder(fd)
            if name:
                break
        await asyncio.sleep(0.005)
    raise RunActiveError(run_id, name)


def name_holder(disk: Disk, fd: int) -> None:
    """Write this process's name into the held lock file (best effort)."""
    with contextlib.suppress(OSError):
        disk.ftruncate(fd, 0)
        disk.write(fd, _name())


@functools.cache
def _host() -> str:
    return socket.gethostname()


def _name() -> bytes:
    return holder_name().encode()


def holder_name() -> str:
    """How this process names itself as a holder: `pid 41 on host`."""
    return f"pid {os.getpid()} on {_host()}"


def alive(pid: int) -> bool:
    """Whether a process of this pid exists here (a zombie counts: it may not have let go yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


_HOLDER = re.compile(r"pid ([0-9]+) on (.+)")


def dead_here(name: str) -> bool:
    """Whether `name` (`pid N on HOST`) is a process of this host that no longer exists.

    Another host's holder, a name of another form, or a pid that exists
    (perhaps reused) is never called dead: the caller then waits, as it
    would for a live holder.
    """
    match = _HOLDER.fullmatch(name)
    return bool(match) and match.group(2) == _host() and not alive(int(match.group(1)))


def clear_and_close(disk: Disk, fd: int) -> None:
    """Clear the holder's name while still holding, then let go."""
    with contextlib.suppress(OSError):
        disk.ftruncate(fd, 0)
    disk.close(fd)


def describe_holder(fd: int) -> str | None:
    """The name a holder wrote into the lock file, if any."""
    with contextlib.suppress(OSError):
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
        return text or None
    return None


def holder(path: str) -> str | None:
    """Who holds the lock at `path` right now, or None; probes without keeping it."""
    try:
        fd = open_regular(path, follow_symlinks=False)
    except OSError:  # none, or not a regular file: nobody holds the run through it
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return describe_holder(fd) or "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
