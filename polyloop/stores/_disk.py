"""The file-system calls of the JSONL store, one method each: its fault-injection seam.

`JsonlStore` does every file-system operation on its logs through a `Disk`
(given as the private `_disk` constructor argument), so a test can subclass it
to make a write or an fsync fail halfway, and the power-loss explorer can
record each operation in order. Taking and probing the `flock`, reading the
lock file's holder name, `lstat` and listing the directory change nothing on
disk and do not go through it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from .._log.errors import Problem
from .._files import NotRegularFileError, kind_of, read_regular

# A log is read whole; this bounds what one read may take, so a file that
# grows without end (a symlink to /dev/zero is refused anyway) cannot eat
# the memory of the process. Far above any real log (100,000 steps ≈ 77 MB).
MAX_READ = 8 << 30

# O_NOFOLLOW: a log or product that is a symbolic link is refused, never
# followed. O_NONBLOCK: opening a FIFO never waits for its other end (no
# effect on regular files). Everything opened is checked to be a regular file.
SAFE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def not_regular_problem(path: str, exc: OSError) -> Problem | None:
    """The problem to report when `exc` came from a log path that is not a regular file; else None."""
    kind = what_is(path, exc)
    if kind is None:
        return None
    return Problem(
        f"{path} is {kind}, not a regular file: a log is never read through a link, from a FIFO or from a device"
    )


def what_is(path: str, exc: OSError) -> str | None:
    """What `path` is (`a FIFO`...), if `exc` came from it not being a regular file; else None."""
    if isinstance(exc, NotRegularFileError):
        return exc.kind
    if exc.errno not in (errno.ELOOP, errno.EINVAL, errno.ENXIO, errno.EISDIR):
        return None
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else kind_of(mode)


def why(path: str, exc: OSError) -> str:
    """The reason `exc` gives, in words: what the path, or its directory, is when it is not what it must be."""
    kind = what_is(path, exc)
    if kind:
        return f"it is {kind}, not a regular file"
    if exc.errno == errno.ENOTDIR:  # the run directory itself was replaced (by a FIFO, a file)
        folder = os.path.dirname(path)
        with contextlib.suppress(OSError):
            mode = os.stat(folder).st_mode
            if not stat.S_ISDIR(mode):
                return f"{folder} is {kind_of(mode)}, not a directory"
    return str(exc.strerror or exc)


class Disk:
    """Blocking file-system calls, each one a method a subclass can replace.

    Every method raises `OSError` as the system call does; the store turns
    those into `StoreError` or `CorruptLogError`. Methods run on the store's
    disk threads or inline on the event loop's thread (appends that need no
    fsync), so a subclass must be thread-safe.
    """

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        """`os.open`: a file descriptor for `path`."""
        return os.open(path, flags, mode)

    def write(self, fd: int, data: bytes) -> None:
        """Write every byte of `data` at the descriptor's position (looping over short writes)."""
        written = os.write(fd, data)
        if written < len(data):  # a short write: go on from where it stopped
            view = memoryview(data)[written:]
            while view:
                view = view[os.write(fd, view):]

    def fsync(self, fd: int) -> None:
        """`os.fsync`: the file's data and size are on the disk when it returns."""
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        """`os.ftruncate`: cut the file to `size` bytes."""
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        """`os.close`."""
        os.close(fd)

    def link(self, src: str, dst: str) -> None:
        """`os.link`: publish `src` as `dst`; fails with `FileExistsError` if `dst` exists."""
        os.link(src, dst)

    def rename(self, src: str, dst: str) -> None:
        """`os.rename`: replace `dst` by `src` atomically."""
        os.rename(src, dst)

    def unlink(self, path: str) -> None:
        """`os.unlink` (a symbolic link is removed, never followed)."""
        os.unlink(path)

    def mkdir(self, path: str) -> None:
        """Create the directory `path` and any missing parents; nothing if it exists."""
        os.makedirs(path, exist_ok=True)

    def fsync_dir(self, path: str) -> None:
        """Make the directory's entries (a new link, a removal) durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, path: str) -> bytes:
        """The whole content of the regular file `path`.

        Never follows a symbolic link, never blocks on a FIFO and refuses
        anything that is not a regular file (`NotRegularFileError`, naming
        what it is); reads at most `MAX_READ` bytes (`EFBIG` beyond).
        """
        return read_regular(path, follow_symlinks=False, limit=MAX_READ)

    def fstat(self, fd: int) -> os.stat_result:
        """`os.fstat`."""
        return os.fstat(fd)
