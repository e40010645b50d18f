"""Recording what a store asks of the file system, through the store's own disk seam.

`RecordingDisk` is a `polyloop.stores._disk.Disk` that performs every
operation for real and appends what it did to a `Trace`: the path an fd
stands for, the offset a write lands at (the end of the file for
`O_APPEND`), the bytes, the new names. Hand it to the store
(`JsonlStore(directory, _disk=RecordingDisk(root))`) and run anything.

Why the seam and not a syscall trace (`strace -f -e trace=%file,write,...`):
the seam sees exactly the operations the store asks for, already resolved
to paths and offsets, in the order the store issued them, with nothing of
the interpreter's own file activity mixed in; it needs no tool that is not
on every machine (strace is not, and is often forbidden in containers);
and it lets the test put *marks* (a tool's side effect, an acknowledged
write) between two operations at the exact point they happened. What it
cannot see is file-system work done around the seam — such an operation
is a gap in the trace; the recorder refuses to go on when it meets a file
it did not see created.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from polyloop.stores._disk import Disk

from .trace import Op, Trace


class RecordingDisk(Disk):
    """A disk that does the real work and records it, relative to `root`.

    Args:
        root: the directory whose contents the trace covers; what is in it
            now becomes the trace's starting state (all of it durable).
        label: the trace's label.
        world: marks that happened before this trace (see `Trace.world`).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        label: str = "trace",
        world: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__()
        self.root = os.path.realpath(root)
        self.trace = Trace(label=label, world=list(world or []))
        self._names: dict[str, int] = {}
        self._fds: dict[int, tuple[int, bool]] = {}  # fd -> (inode, opened with O_APPEND)
        self._next = 1
        # One op's real work and its record happen as one step, so threads
        # (the store fsyncs on its own threads) cannot record out of order.
        self._lock = threading.RLock()
        self._scan()

    def _scan(self) -> None:
        for top, dirs, files in os.walk(self.root):
            for d in dirs:
                self.trace.dirs.add(self._rel(os.path.join(top, d)))
            for f in files:
                path = os.path.join(top, f)
                with open(path, "rb") as fh:
                    self.trace.files[self._rel(path)] = fh.read()
        for n, path in enumerate(sorted(self.trace.files), start=1):
            self._names[path] = -n  # the numbering model.py gives a trace's first files

    def _rel(self, path: str | os.PathLike[str]) -> str:
        full = os.path.realpath(path)
        if full == self.root:
            return "."
        if not full.startswith(self.root + os.sep):
            raise ValueError(f"{path} is outside the recorded root {self.root}")
        return os.path.relpath(full, self.root)

    def _add(self, op: Op) -> None:
        self.trace.ops.append(op)

    def mark(self, kind: str, **info: Any) -> None:
        """Put a mark into the trace at this moment (what happened outside the disk)."""
        with self._lock:
            self._add(Op("mark", mark={"kind": kind, **info}))

    # -- the Disk operations ---------------------------------------------------------

    def open(self, path: Any, flags: int, mode: int = 0o644) -> int:
        with self._lock:
            rel = self._rel(path)
            existed = os.path.lexists(path)
            fd = super().open(path, flags, mode)
            if flags & getattr(os, "O_DIRECTORY", 0) or os.path.isdir(path):
                return fd
            if not existed:
                ino = self._next
                self._next += 1
                self._names[rel] = ino
                self._add(Op("create", rel, ino))
            elif rel not in self._names:
                os.close(fd)
                raise RuntimeError(f"{rel} exists but the trace never saw it created: a gap in the seam")
            ino = self._names[rel]
            if flags & os.O_TRUNC:
                self._add(Op("truncate", ino=ino, size=0))
            self._fds[fd] = (ino, bool(flags & os.O_APPEND))
            return fd

    def write(self, fd: int, data: bytes) -> None:
        with self._lock:
            ino, append = self._fds[fd]
            offset = os.fstat(fd).st_size if append else os.lseek(fd, 0, os.SEEK_CUR)
            super().write(fd, data)
            self._add(Op("write", ino=ino, offset=offset, data=bytes(data)))

    def fsync(self, fd: int) -> None:
        with self._lock:
            super().fsync(fd)
            if fd in self._fds:
                self._add(Op("fsync", ino=self._fds[fd][0]))

    def ftruncate(self, fd: int, size: int) -> None:
        with self._lock:
            super().ftruncate(fd, size)
            self._add(Op("truncate", ino=self._fds[fd][0], size=size))

    def close(self, fd: int) -> None:
        with self._lock:
            self._fds.pop(fd, None)
            super().close(fd)

    def link(self, src: Any, dst: Any) -> None:
        with self._lock:
            super().link(src, dst)
            ino = self._names[self._rel(src)]
            self._names[self._rel(dst)] = ino
            self._add(Op("link", self._rel(dst), ino))

    def rename(self, src: Any, dst: Any) -> None:
        with self._lock:
            super().rename(src, dst)
            ino = self._names.pop(self._rel(src))
            self._names[self._rel(dst)] = ino
            self._add(Op("rename", self._rel(src), ino, dst=self._rel(dst)))

    def unlink(self, path: Any) -> None:
        with self._lock:
            super().unlink(path)
            rel = self._rel(path)
            self._add(Op("unlink", rel, self._names.pop(rel)))

    def mkdir(self, path: Any) -> None:
        with self._lock:
            missing = []
            probe = os.path.realpath(path)
            while not os.path.isdir(probe):
                missing.append(probe)
                probe = os.path.dirname(probe)
            super().mkdir(path)
            for created in reversed(missing):
                self._add(Op("mkdir", self._rel(created)))

    def fsync_dir(self, path: Any) -> None:
        with self._lock:
            super().fsync_dir(path)
            self._add(Op("fsync_dir", self._rel(path)))
