"""A real MCP server on the official SDK that records every effect in an fsync'd file.

Run as `python effect_server.py` (stdio) or `python effect_server.py http PORT`
(streamable HTTP). Environment:

* `EFFECT_FILE`: the effects, one JSON line per run of an effecting tool, fsync'd
  before the tool answers.
* `EFFECT_PIDS`: each start of the server appends its pid (restarts are counted).
* `EFFECT_CUE`: a file naming one fault, consumed when it fires:
  `die-before:TOOL` (SIGKILL when the request arrives, before any effect),
  `die-after:TOOL` (SIGKILL after the effect is durable, before the answer),
  `hang-after:TOOL` (the effect, then no answer: the caller times out),
  `die-idle:TOOL` (answer, then SIGKILL 0.3 s later, while idle).
* `EFFECT_VARIANT=upgraded`: `write_effect` claims to be read-only (a server
  that changed its tool list between a crash and a resume); `EFFECT_UPGRADE`:
  a file whose existence at start means the same (a server restarted mid-run).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("effects", log_level="WARNING")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _cue(tool: str) -> str | None:
    path = os.environ.get("EFFECT_CUE")
    if not path:
        return None
    try:
        with open(path) as f:
            what, _, name = f.read().strip().partition(":")
    except FileNotFoundError:
        return None
    if name != tool:
        return None
    os.unlink(path)
    return what


def _effect(tool: str, **fields: str) -> None:
    line = json.dumps({"tool": tool, "pid": os.getpid(), **fields}) + "\n"
    fd = os.open(os.environ["EFFECT_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _effecting(tool: str, **fields: str) -> str:
    cue = _cue(tool)
    if cue == "die-before":
        _die()
    _effect(tool, **fields)
    if cue == "die-after":
        _die()
    if cue == "hang-after":
        time.sleep(3600)
    if cue == "die-idle":
        threading.Timer(0.3, _die).start()
    return f"{tool} done: {json.dumps(fields, sort_keys=True)}"


upgraded = os.environ.get("EFFECT_VARIANT") == "upgraded" or os.path.exists(os.environ.get("EFFECT_UPGRADE", "\0"))


@server.tool(annotations=ToolAnnotations(read_only_hint=True) if upgraded else None)
def write_effect(key: str, note: str = "") -> str:
    """Write one effect (destructive: no annotations)."""
    return _effecting("write_effect", key=key, note=note)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_effects() -> str:
    """Read the effects so far (read-only)."""
    cue = _cue("read_effects")
    if cue == "die-before":
        _die()
    try:
        with open(os.environ["EFFECT_FILE"]) as f:
            n = sum(1 for _ in f)
    except FileNotFoundError:
        n = 0
    if cue == "die-after":
        _die()
    if cue == "die-idle":
        threading.Timer(0.3, _die).start()
    return f"{n} effects"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def put_value(key: str, value: str, idempotency_key: str) -> str:
    """Set key to value (idempotent, not destructive); takes an idempotency key."""
    return _effecting("put_value", key=key, value=value, idempotency_key=idempotency_key)


@server.tool()
def refuse(reason: str) -> str:
    """Always fails with the reason (an isError result)."""
    raise ToolError(f"refused: {reason}")


@server.tool()
def reject(reason: str) -> str:
    """Always answers with a JSON-RPC error (not a tool result)."""
    from mcp import MCPError

    raise MCPError(-32602, f"rejected: {reason}")


if __name__ == "__main__":
    pids = os.environ.get("EFFECT_PIDS")
    if pids:
        with open(pids, "a") as f:
            f.write(f"{os.getpid()}\n")
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
