"""`ToolSource`: where some of an agent's tools come from (an MCP server), listed on first need.

See `polyloop._run.sources` for what a run does with them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable

from .._log.errors import InvalidInputError
from .tools import Tool


class ToolSource:
    """Where some of an agent's tools come from (`polyloop.mcp.MCPServer` is one).

    Subclasses list their tools (`tools`, called on first need and again
    when `stale` says the list may have changed) and may hold something
    open while runs use them (`hold`/`release`, counted: nested and
    concurrent runs share it; the last release closes it).
    """

    def tools(self) -> list[Tool]:
        raise NotImplementedError

    def stale(self) -> bool:
        """True when the tools listed last may no longer be the source's (list them again)."""
        return False

    def hold(self) -> None:
        """A run begins to use the source."""

    async def release(self) -> None:
        """A run that used the source stopped."""


def expand(declared: Iterable[Tool | ToolSource]) -> list[Tool]:
    """Every tool: declared ones as they are, a source's in its listing order; names must differ."""
    out: list[Tool] = []
    for item in declared:
        out.extend(item.tools() if isinstance(item, ToolSource) else [item])
    names = [t.name for t in out]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        same = [t for t in out if t.name == duplicates[0]]
        if any(t.origin for t in same):  # a source's tool: its prefix keeps the names apart
            where = " and ".join(_where(t) for t in same)
            raise InvalidInputError(f"two tools share the name {duplicates[0]!r} ({where}): "
                                    "give a server a prefix= to keep them apart")
        raise InvalidInputError(f"two tools share the name {duplicates[0]!r}")
    return out


def _where(t: Tool) -> str:
    server = (t.origin or {}).get("server")
    return f"one from MCP server {server!r}" if server is not None else "one of the agent's own"


@contextlib.asynccontextmanager
async def using(sources: Iterable[ToolSource]) -> AsyncIterator[None]:
    """Hold every source while the body runs; release each when it stops, however it stops."""
    held = list(dict.fromkeys(sources))
    for s in held:
        s.hold()
    try:
        yield
    finally:
        for s in held:
            await s.release()
