"""A trace: what a store asked of the file system, in order, plus what the world saw.

A trace is a list of `Op`s over paths relative to one root directory, and
the files and directories that existed before it started (all durable).
Files are named by an inode number the recorder assigns, so a `link` or a
`rename` keeps the identity of the file it names.

Besides file-system operations a trace holds *marks*: things the test
knows happened at that moment outside the disk — a tool's side effect in
the world, a paid model call, a store write that returned to its caller.
The crash-state checker compares each state against the marks before the
crash point.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# The file-system operations the model knows (see model.py) and `mark`.
NAME_OPS = frozenset({"create", "mkdir", "link", "rename", "unlink"})
DATA_OPS = frozenset({"write", "truncate"})
SYNC_OPS = frozenset({"fsync", "fsync_dir"})
KINDS = NAME_OPS | DATA_OPS | SYNC_OPS | {"mark"}


@dataclass(frozen=True, slots=True)
class Op:
    """One step of a trace.

    Attributes:
        kind: `create` (a new empty file `path` with inode `ino`), `mkdir`,
            `link` (new name `path` for `ino`), `rename` (`path` to `dst`,
            `ino` being the file moved), `unlink` (`path`, which named `ino`),
            `write` (`data` at `offset` of `ino`), `truncate` (`ino` to
            `size`), `fsync` (`ino`), `fsync_dir` (`path`), or `mark`.
        mark: for `mark`: a JSON-able dict, its `kind` key saying what it is.
    """

    kind: str
    path: str = ""
    ino: int = 0
    offset: int = 0
    data: bytes = b""
    size: int = 0
    dst: str = ""
    mark: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown op kind {self.kind!r}")

    @property
    def parent(self) -> str:
        """The directory whose entries a name operation changes."""
        return parent_of(self.path)

    def __str__(self) -> str:
        if self.kind == "mark":
            return f"mark {self.mark}"
        if self.kind == "write":
            return f"write ino {self.ino} @{self.offset} {len(self.data)} bytes {self.data[:40]!r}"
        detail = {"truncate": f" to {self.size}", "rename": f" -> {self.dst}"}.get(self.kind, "")
        target = self.path or f"ino {self.ino}"
        return f"{self.kind} {target}{detail}"


def parent_of(path: str) -> str:
    """The directory of a root-relative path; `.` is the root itself."""
    return posixpath.dirname(path) or "."


@dataclass
class Trace:
    """A recorded (or hand-written) sequence of operations from a known start.

    Attributes:
        ops: the operations in the order they happened.
        files: the files that existed before the first op (path -> bytes).
        dirs: the directories that existed before the first op (the root
            `.` always does and is not listed).
        world: marks that happened before the trace began (e.g. the side
            effects of an earlier session, for a trace recorded on top of a
            crash state).
        label: what the trace is, for reports.
    """

    ops: list[Op] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    world: list[dict[str, Any]] = field(default_factory=list)
    label: str = "trace"

    def initial_inode(self, path: str) -> int:
        """The inode number of a file that existed before the first op (they count down from -1)."""
        return -1 - sorted(self.files).index(path)

    def marks_before(self, point: int) -> list[dict[str, Any]]:
        """The world's marks, then every mark among the first `point` ops."""
        return [*self.world, *(op.mark for op in self.ops[:point] if op.kind == "mark" and op.mark)]

    def marks(self, kind: str) -> Iterator[tuple[int, dict[str, Any]]]:
        """(index, mark) for every mark of `kind` in the ops."""
        for index, op in enumerate(self.ops):
            if op.kind == "mark" and op.mark and op.mark.get("kind") == kind:
                yield index, op.mark

    def __str__(self) -> str:
        lines = [f"{self.label}: {len(self.files)} files, {len(self.dirs)} dirs before op 0"]
        lines += [f"{i:4}  {op}" for i, op in enumerate(self.ops)]
        return "\n".join(lines)
