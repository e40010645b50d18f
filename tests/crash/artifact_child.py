"""A child that runs a two-product pipeline on a JSONL store which SIGKILLs itself before a disk call.

    python artifact_child.py DIR RUN_ID

`ARTIFACT_OPS=FILE` appends one line per disk call of the run (`N op path`);
`ARTIFACT_KILL=N` kills the process just before disk call N (`N:half`: if
call N is a write, half its bytes land first). It is also the agent target
`polyloop resume` re-imports (`artifact_child.py:agent`), without a kill.

The pipeline: step 1 `extract` writes product `doc.json` (v1, creating the
product folder), step 2 `summarize` reads it and writes `summary.txt`, step
3 `reextract` replaces `doc.json` (v2, superseding its reference), step 4
answers. Every tool is idempotent and declared `safe`, so every crash state
must resume to the same end. (A tool that reads a product and replaces it
under the same name is not idempotent: after a crash between its
replacement and its reference, its replay would read its own output.)
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from polyloop import Agent, ArtifactRef, JsonlStore, ScriptedModel, ToolContext, run_target, tool
from polyloop.stores._disk import Disk

V1 = b'{"parties": ["a", "b"], "pages": 12}' * 50
V2 = b'{"parties": ["a", "b"], "pages": 12, "refined": true}' * 50


@tool(replay="safe")
def extract(doc: str, ctx: ToolContext) -> ArtifactRef:
    """Extract a document."""
    return ctx.artifacts.write("doc.json", V1)


@tool(replay="safe")
def summarize(ctx: ToolContext) -> ArtifactRef:
    """Summarize the extraction."""
    return ctx.artifacts.write("summary.txt", SUMMARY(ctx.artifacts.read("doc.json")))


@tool(replay="safe")
def reextract(ctx: ToolContext) -> ArtifactRef:
    """Extract again, with the newer extractor."""
    return ctx.artifacts.write("doc.json", V2)


def SUMMARY(doc: bytes) -> bytes:
    return b"%d bytes" % len(doc)


def agent() -> Agent:
    script = [
        {"tool": "extract", "args": {"doc": "contract"}},
        {"tool": "summarize", "args": {}},
        {"tool": "reextract", "args": {}},
        {"final": "done"},
    ]
    return Agent(model=ScriptedModel(script), tools=[extract, summarize, reextract])


class KillDisk(Disk):
    def __init__(self, ops: str | None, kill: str) -> None:
        self.ops = open(ops, "a") if ops else None
        at, _, how = kill.partition(":")
        self.kill = int(at) if at else 0
        self.half = how == "half"
        self.n = 0

    def _op(self, name: str, path: str, data: bytes | None = None, fd: int | None = None) -> None:
        self.n += 1
        if self.ops is not None:
            self.ops.write(f"{self.n} {name} {path}\n")
            self.ops.flush()
        if self.n == self.kill:
            if self.half and data is not None and fd is not None:
                os.write(fd, data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)

    def open(self, path, flags, mode=0o644):
        self._op("open", path)
        return super().open(path, flags, mode)

    def write(self, fd, data):
        self._op("write", os.readlink(f"/proc/self/fd/{fd}"), data, fd)
        super().write(fd, data)

    def fsync(self, fd):
        self._op("fsync", os.readlink(f"/proc/self/fd/{fd}"))
        super().fsync(fd)

    def close(self, fd):
        self._op("close", os.readlink(f"/proc/self/fd/{fd}"))
        super().close(fd)

    def rename(self, src, dst):
        self._op("rename", f"{src}->{dst}")
        super().rename(src, dst)

    def link(self, src, dst):
        self._op("link", f"{src}->{dst}")
        super().link(src, dst)

    def unlink(self, path):
        self._op("unlink", path)
        super().unlink(path)

    def mkdir(self, path):
        self._op("mkdir", path)
        super().mkdir(path)

    def fsync_dir(self, path):
        self._op("fsync_dir", path)
        super().fsync_dir(path)

    def ftruncate(self, fd, size):
        self._op("ftruncate", os.readlink(f"/proc/self/fd/{fd}"))
        super().ftruncate(fd, size)


async def main(directory: str, run_id: str) -> None:
    disk = KillDisk(os.environ.get("ARTIFACT_OPS"), os.environ.get("ARTIFACT_KILL", ""))
    async with JsonlStore(directory, _disk=disk) as store:
        await run_target(f"{os.path.abspath(__file__)}:agent", goal="extract", store=store, run_id=run_id)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
