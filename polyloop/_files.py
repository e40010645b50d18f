"""Reading a path a person named without ever waiting on it: regular files only.

Every read of a user's path (an input, a goals file, an observation file, an
agent target file, a run's log, a batch manifest) goes through
`open_regular` or `read_regular`. A plain open(2) of a FIFO waits for a
writer forever, a device can be endless (`/dev/zero`) and a socket cannot be
opened at all; each is refused with `NotRegularFileError`, which names what
the path is. The path is looked at first (so a FIFO is not even opened), then
opened with `O_NONBLOCK` and looked at again through the descriptor, so a
path swapped for a FIFO between the two cannot make the open wait either.

This module imports nothing of PolyLoop's, so any layer (stores included)
can use it.
"""

from __future__ import annotations

import errno
import os
import stat

_CHUNK = 1 << 16
# No controlling terminal, should a name lead to one; not inherited by children.
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def kind_of(mode: int) -> str:
    """What a file is, in words for an error message (`a FIFO`, `a directory`...)."""
    for test, name in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "a file of an unknown type"


class NotRegularFileError(OSError):
    """The path exists but is not a regular file: a FIFO, a device, a socket, a directory.

    An `OSError` (`EINVAL`): its `strerror` is `it is a FIFO, not a regular
    file`, its text `PATH is a FIFO, not a regular file`, and `kind` what
    the path is (`a FIFO`).
    """

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(errno.EINVAL, f"it is {kind}, not a regular file", os.fspath(path))
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.filename} is {self.kind}, not a regular file"


def check_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> os.stat_result:
    """`stat` (or `lstat`) of `path`, refused unless it is a regular file; never opens it.

    Raises:
        NotRegularFileError: it exists and is not a regular file (with
            `follow_symlinks=False`, a symbolic link is `a symbolic link`).
        OSError: it cannot be looked at (`FileNotFoundError` when it does not exist).
    """
    info = os.stat(path, follow_symlinks=follow_symlinks)
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFileError(path, kind_of(info.st_mode))
    return info


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> int:
    """A blocking read-only descriptor of the regular file `path`; the caller closes it.

    Never waits: a FIFO, device or socket is refused before it is opened,
    and the open itself is non-blocking (`O_NONBLOCK`, cleared once the
    descriptor is known to be a regular file's).

    Args:
        path: the file.
        follow_symlinks: False to refuse a symbolic link (`O_NOFOLLOW`) rather than read its target.

    Raises:
        NotRegularFileError: `path` is not a regular file.
        OSError: it cannot be opened (`FileNotFoundError` when it does not exist).
    """
    check_regular(path, follow_symlinks=follow_symlinks)
    try:
        fd = os.open(path, _FLAGS | (0 if follow_symlinks else os.O_NOFOLLOW))
    except OSError:
        # Replaced since the look (a symbolic link: ELOOP, a socket: ENXIO): say what it is now.
        check_regular(path, follow_symlinks=follow_symlinks)
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(path, kind_of(mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True, limit: int | None = None) -> bytes:
    """The whole content of the regular file `path` (see `open_regular`).

    Args:
        path: the file.
        follow_symlinks: False to refuse a symbolic link rather than read its target.
        limit: the most bytes to read; a longer file raises `OSError` (`EFBIG`).

    Raises:
        NotRegularFileError: `path` is not a regular file.
        OSError: it cannot be read, or is longer than `limit`.
    """
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    try:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
        chunks = [os.read(fd, size)] if size else []
        total = len(chunks[0]) if chunks else 0
        while chunk := os.read(fd, _CHUNK):  # it may have grown since fstat, or the first read came short
            total += len(chunk)
            if limit is not None and total > limit:
                raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
            chunks.append(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)
