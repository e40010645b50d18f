"""A child that archives runs with a disk that SIGKILLs its own process before one file-system change.

    python archive_child.py SOURCE ARCHIVE KILL_AT OPS_FILE [RUN...]

Every call of the move that changes the file system (mkdir, link, rename,
unlink, rmdir, an fsync of a file or a directory) is counted; the process
kills itself (SIGKILL, as a power cut or the OOM killer would) just before
call KILL_AT (0: never), after appending `N op path` for each call to
OPS_FILE. With no RUN it archives the finished runs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from polyloop._operate.archive import _from_directory
from polyloop._operate.archive_move import MoveDisk


class KillDisk(MoveDisk):
    def __init__(self, kill: int, ops: str) -> None:
        self.kill, self.n, self.ops = kill, 0, open(ops, "a")

    def _op(self, name: str, path: str) -> None:
        self.n += 1
        self.ops.write(f"{self.n} {name} {path}\n")
        self.ops.flush()
        if self.n == self.kill:
            os.kill(os.getpid(), signal.SIGKILL)

    def mkdir(self, path: str) -> None:
        self._op("mkdir", path)
        super().mkdir(path)

    def link(self, src: str, dst: str) -> None:
        self._op("link", dst)
        super().link(src, dst)

    def rename(self, src: str, dst: str) -> None:
        self._op("rename", f"{src} -> {dst}")
        super().rename(src, dst)

    def unlink(self, path: str) -> None:
        self._op("unlink", path)
        super().unlink(path)

    def rmdir(self, path: str) -> None:
        self._op("rmdir", path)
        super().rmdir(path)

    def fsync_dir(self, path: str) -> None:
        self._op("fsync_dir", path)
        super().fsync_dir(path)

    def fsync(self, fd: int) -> None:
        self._op("fsync", str(fd))
        super().fsync(fd)


def main() -> None:
    source, archive, kill, ops, *runs = sys.argv[1:]
    os.makedirs(archive, exist_ok=True)
    report = asyncio.run(_from_directory(source, archive, runs or None, None, KillDisk(int(kill), ops)))
    sys.exit(1 if report.failed else 0)


if __name__ == "__main__":
    main()
