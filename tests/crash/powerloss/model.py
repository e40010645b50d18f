"""The file-system model: what a power cut after any op of a trace may leave on disk.

The model is deliberately *weaker* than ext4's default (`data=ordered`):
a store correct under it is correct on any file system that keeps at
least these promises.

1. **fsync of a file** makes its content durable: everything written or
   truncated before the fsync survives.
2. **After the last fsync of a file**, its later data operations (writes,
   truncations) survive as an ordered prefix: the first *i* of them whole,
   and the next one, if it is a write, cut at any byte. Cuts are not at
   line or block boundaries.
3. **Unsynced bytes may read back as NUL**: of the surviving unsynced
   region, any suffix may read as zeros (the file's size reached the disk,
   its data did not, as delayed allocation can leave it).
4. **Files are independent**: between their fsyncs, the data operations
   of two files are not ordered with each other; each file's cut is
   chosen on its own.
5. **Names need their directory's fsync**: a create, mkdir, link, rename
   or unlink in a directory is durable once that directory was fsynced
   after it. Until then each of them may or may not have happened,
   independently of the others (a subset, applied in trace order). fsync
   of a *file* does not make its name durable.
6. **rename is atomic**: a surviving rename moved the name whole; there is
   no state with both names or neither.
7. A name whose directory did not survive does not survive.

Outside the model (none of it is explored): disks or controllers that
acknowledge a flush they did not do; corruption of bytes already synced;
holes of NUL *inside* unsynced data followed by real bytes (page write-back
out of order without ordered data, e.g. ext4 `data=writeback`); renames
across directories; operations other than those in `trace.KINDS`.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from .trace import DATA_OPS, NAME_OPS, Op, Trace, parent_of


@dataclass(frozen=True, slots=True)
class FileFuture:
    """One file at a crash point: its durable bytes and its unsynced data ops since."""

    durable: bytes
    pending: tuple[Op, ...] = ()

    def points(self) -> list[tuple[int, int]]:
        """Every (i, c): the first i pending ops whole, then c bytes of op i (a write)."""
        out: list[tuple[int, int]] = []
        for i, op in enumerate(self.pending):
            out.extend((i, c) for c in range(len(op.data) if op.kind == "write" else 1))
        out.append((len(self.pending), 0))
        return out

    def content(self, i: int, c: int) -> tuple[bytes, int]:
        """The bytes after (i, c), and the lowest offset not known durable (NUL may start there)."""
        data = bytearray(self.durable)
        low = len(data)
        for n, op in enumerate(self.pending[: i + 1]):
            if n == i and (op.kind != "write" or c == 0):
                break
            if op.kind == "truncate":
                del data[op.size :]
                data.extend(bytes(max(0, op.size - len(data))))
                low = min(low, op.size)
                continue
            chunk = op.data if n < i else op.data[:c]
            if len(data) < op.offset:
                data.extend(bytes(op.offset - len(data)))
            data[op.offset : op.offset + len(chunk)] = chunk
            low = min(low, op.offset)
        return bytes(data), min(low, len(data))

    def size_of_space(self) -> int:
        """How many (i, c, nul_from) choices there are in all."""
        if not self.pending:
            return 1
        return sum(len(r) - low + 1 for r, low in (self.content(i, c) for i, c in self.points()))

    def render(self, i: int, c: int, nul_from: int | None) -> bytes:
        """The file's bytes for one choice; `nul_from` None means no NUL."""
        data, low = self.content(i, c)
        if nul_from is None or nul_from >= len(data):
            return data
        start = max(nul_from, low)
        return data[:start] + bytes(len(data) - start)


@dataclass(frozen=True, slots=True)
class Frontier:
    """What is durable and what is still in flight after the first `point` ops of a trace."""

    point: int
    names: dict[str, int]
    dirs: frozenset[str]
    pending_names: tuple[Op, ...]
    files: dict[int, FileFuture]

    def state(self, name_subset: Sequence[bool], contents: dict[int, bytes]) -> CrashState:
        """The disk after the cut: surviving names (a subset of the pending ones) and contents."""
        names, dirs = dict(self.names), set(self.dirs)
        for op, keep in zip(self.pending_names, name_subset):
            if keep:
                apply_name(op, names, dirs)
        reachable = {d for d in dirs if _ancestors_exist(d, dirs)}
        files = {
            path: contents[ino] if ino in contents else self.files[ino].durable
            for path, ino in names.items()
            if _ancestors_exist(path, reachable)
        }
        return CrashState(self.point, files, frozenset(reachable))


@dataclass(frozen=True, slots=True)
class CrashState:
    """One directory tree a power cut after op `point` may leave (paths relative to the root)."""

    point: int
    files: dict[str, bytes]
    dirs: frozenset[str] = field(default_factory=frozenset)

    def digest(self) -> str:
        """A content hash of the tree: two states with the same digest are the same state."""
        h = hashlib.sha256()
        for d in sorted(self.dirs):
            h.update(b"d\0" + d.encode() + b"\0")
        for path in sorted(self.files):
            data = self.files[path]
            h.update(b"f\0" + path.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
        return h.hexdigest()

    def materialise(self, root: str) -> None:
        """Write the tree under `root` (an existing, empty directory)."""
        for d in sorted(self.dirs, key=len):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        for path, data in self.files.items():
            with open(os.path.join(root, path), "wb") as f:
                f.write(data)


def apply_name(op: Op, names: dict[str, int], dirs: set[str]) -> None:
    """Apply one name operation to a table of names (path -> inode) and directories."""
    if op.kind == "mkdir":
        dirs.add(op.path)
    elif op.kind in ("create", "link"):
        names[op.path] = op.ino
    elif op.kind == "rename":
        if names.get(op.path) == op.ino:
            del names[op.path]
        names[op.dst] = op.ino
    elif op.kind == "unlink":
        if names.get(op.path) == op.ino:
            del names[op.path]


def _ancestors_exist(path: str, dirs: set[str] | frozenset[str]) -> bool:
    parent = parent_of(path)
    while parent != ".":
        if parent not in dirs:
            return False
        parent = parent_of(parent)
    return True


class _Replay:
    """Walks a trace, keeping the durable picture and what is in flight."""

    def __init__(self, trace: Trace) -> None:
        self.names: dict[str, int] = {}  # durable names
        self.dirs: set[str] = set(trace.dirs)
        self.live: dict[str, int] = {}  # names as the running process sees them
        self.pending: dict[str, list[tuple[int, Op]]] = {}  # directory -> unsynced name ops
        self.durable: dict[int, bytes] = {}
        self.volatile: dict[int, bytes] = {}
        self.unsynced: dict[int, list[Op]] = {}
        for n, (path, data) in enumerate(sorted(trace.files.items()), start=1):
            ino = -n  # recorders number new files from 1
            self.names[path] = self.live[path] = ino
            self.durable[ino] = self.volatile[ino] = data

    def apply(self, index: int, op: Op) -> None:
        if op.kind in NAME_OPS:
            if op.kind == "rename" and parent_of(op.dst) != op.parent:
                raise NotImplementedError("a rename across directories is outside the model")
            apply_name(op, self.live, set())
            self.pending.setdefault(op.parent, []).append((index, op))
            if op.kind == "create":
                self.durable.setdefault(op.ino, b"")
                self.volatile.setdefault(op.ino, b"")
        elif op.kind == "fsync_dir":
            for _, done in self.pending.pop(op.path, []):
                apply_name(done, self.names, self.dirs)
        elif op.kind == "fsync":
            self.durable[op.ino] = self.volatile[op.ino]
            self.unsynced.pop(op.ino, None)
        elif op.kind in DATA_OPS:
            if op.ino not in self.volatile:
                raise ValueError(f"{op} names a file the trace never created")
            future = FileFuture(self.volatile[op.ino], (op,))
            self.volatile[op.ino] = future.content(1, 0)[0]
            self.unsynced.setdefault(op.ino, []).append(op)

    def frontier(self, point: int) -> Frontier:
        in_flight = sorted((x for ops in self.pending.values() for x in ops), key=lambda x: x[0])
        pending = tuple(op for _, op in in_flight)
        files = {
            ino: FileFuture(data, tuple(self.unsynced.get(ino, ())))
            for ino, data in self.durable.items()
        }
        return Frontier(point, dict(self.names), frozenset(self.dirs), pending, files)


def frontiers(trace: Trace) -> Iterator[Frontier]:
    """The frontier before the first op, then after every op of the trace."""
    replay = _Replay(trace)
    yield replay.frontier(0)
    for index, op in enumerate(trace.ops):
        replay.apply(index, op)
        yield replay.frontier(index + 1)


def name_subsets(count: int) -> Iterator[tuple[bool, ...]]:
    """Every subset of `count` pending name operations (which of them survive)."""
    return itertools.product((False, True), repeat=count)
