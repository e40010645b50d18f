"""The agents the crash tests run in real child processes (a `polyloop run` target).

Every tool records its side effect by appending one fsync'd JSON line to the
file named by `$POLYLOOP_EFFECTS`; the model records every call it is paid
for in `$POLYLOOP_LEDGER` before it answers. Those two files are the ground
truth the tests compare the log against: they are written by the "world",
not by PolyLoop.

Knobs, all read at call time from the environment so the same module serves
the killed child and the `polyloop resume` that follows:

* `POLYLOOP_KILL_AT=before:effect:N` / `after:effect:N` — SIGKILL this
  process just before / after the N-th side effect of the process.
* `POLYLOOP_SLOW=SECONDS` — tools sleep before and after their effect, the
  model before it answers (gives random kills something to land in).
* `POLYLOOP_STARTED=PATH` — importing this module creates `PATH.<pid>`.
* `POLYLOOP_BARRIER=PATH` — importing this module waits until PATH exists
  (lines concurrent starters up); it first creates `PATH.<pid>.ready`.
* `POLYLOOP_BLOCK=PATH` — the `slow_read` tool waits until PATH exists,
  after creating `PATH.running`.
* `POLYLOOP_BIG=N` — every observation is padded with N dots.
* `POLYLOOP_AT_EFFECT=N:ACTION` — right after the N-th side effect, do
  ACTION to the world: `replace-log`, `swap-log-foreign`, `remove-log`,
  `chmod-ro`, `fill-disk`, `mount-ro` (needs a private mount namespace).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from polyloop import Agent, ScriptedModel, ToolContext, tool

_effects_done = 0
_effects_lock = threading.Lock()  # the calls of a step of several run in threads at once


def _env_path(name: str) -> Path:
    return Path(os.environ[name])


def _append_fsynced(path: Path, obj: Any) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, orjson.dumps(obj) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def _kill_if(point: str) -> None:
    if os.environ.get("POLYLOOP_KILL_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def _pause(times: float = 1) -> None:
    slow = float(os.environ.get("POLYLOOP_SLOW") or 0)
    if slow:
        time.sleep(slow * times)


def _side_effect(name: str, args: dict[str, Any], ctx: ToolContext, observation: str) -> str:
    global _effects_done
    observation += "." * int(os.environ.get("POLYLOOP_BIG") or 0)
    _pause()
    with _effects_lock:
        n = _effects_done + 1
        _kill_if(f"before:effect:{n}")
        _append_fsynced(
            _env_path("POLYLOOP_EFFECTS"),
            {
                "tool": name,
                "args": args,
                "result_id": ctx.result_id,
                "attempt": ctx.attempt,
                "key": ctx.idempotency_key,
                "observation": observation,
                "pid": os.getpid(),
            },
        )
        _effects_done = n
        _kill_if(f"after:effect:{n}")
    _world_action(n)
    # Linger longest where a crash hurts most: the effect is done, its record not yet written.
    _pause(3)
    return observation


def _world_action(n: int) -> None:
    spec = os.environ.get("POLYLOOP_AT_EFFECT", "")
    at, _, action = spec.partition(":")
    if not at or int(at) != n:
        return
    log = Path(os.environ["POLYLOOP_LOG"])
    if action == "replace-log":
        # An outside tool rewrites the file (same bytes, new inode), as an
        # editor or a sync client would.
        copy = log.with_name(log.name + ".copy")
        copy.write_bytes(log.read_bytes())
        os.replace(copy, log)
    elif action == "swap-log-foreign":
        # Someone moves the log aside and puts another run's log in its place.
        os.rename(log, log.with_name(log.name + ".orig"))
        log.write_bytes(Path(os.environ["POLYLOOP_FOREIGN_LOG"]).read_bytes())
    elif action == "chmod-ro":
        log.chmod(0o444)
        log.parent.chmod(0o555)
    elif action == "remove-log":
        log.unlink()
    elif action == "fill-disk":
        # Fill the file system of the log to the last byte (a real ENOSPC).
        fd = os.open(log.parent / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for size in (1 << 16, 1 << 12, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * size)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
        finally:
            os.close(fd)
    elif action == "mount-ro":
        # Stack a read-only bind mount over the directory: files already open
        # stay writable (as the run's lock file does), every new open fails
        # with EROFS, as after the file system went read-only.
        done = subprocess.run(["mount", "--bind", "-o", "ro", str(log.parent), str(log.parent)],
                              capture_output=True, text=True)
        if done.returncode:
            _world_failed(f"mount-ro failed: {done.stderr.strip()}")
    else:
        _world_failed(f"unknown POLYLOOP_AT_EFFECT action {action!r}")


def _world_failed(why: str) -> None:
    # Not a tool failure (that would become an observation and the run go
    # on): the test's world is broken, so the process ends loudly.
    os.write(2, f"crash_agent: {why}\n".encode())
    os._exit(70)


@tool
def write(name: str, ctx: ToolContext) -> str:
    """Write a file: an unrepeatable side effect (replay `never`)."""
    return _side_effect("write", {"name": name}, ctx, f"wrote {name}")


@tool(replay="safe")
def read(name: str, ctx: ToolContext) -> str:
    """Read a file: idempotent (replay `safe`)."""
    return _side_effect("read", {"name": name}, ctx, f"read {name}")


@tool(replay="safe")
def slow_read(name: str, ctx: ToolContext) -> str:
    """A slow idempotent read; with `POLYLOOP_BLOCK` it waits for a go-ahead file."""
    block = os.environ.get("POLYLOOP_BLOCK")
    if block:
        Path(block + ".running").write_text(str(os.getpid()))
        while not os.path.exists(block):
            time.sleep(0.005)
    _pause()
    return _side_effect("slow_read", {"name": name}, ctx, f"read {name} slowly")


class LedgerModel(ScriptedModel):
    """A scripted model that writes every paid call to the ledger before answering."""

    async def complete(self, messages, tools):  # type: ignore[override]
        step = sum(1 for m in messages if m.get("role") == "assistant") + 1
        _append_fsynced(_env_path("POLYLOOP_LEDGER"), {"step": step, "pid": os.getpid()})
        _pause()
        return await super().complete(messages, tools)


GOAL = "prove the crash story"

SCRIPT = [
    {"tool": "read", "args": {"name": "r1"}, "usage": {"input_tokens": 10, "output_tokens": 2}},
    {"tool": "write", "args": {"name": "w2"}, "usage": {"input_tokens": 20, "output_tokens": 3}},
    {"tool": "read", "args": {"name": "r3"}, "usage": {"input_tokens": 30, "output_tokens": 4}},
    {"final": "done", "usage": {"input_tokens": 40, "output_tokens": 5}},
]

SOAK_SCRIPT = [
    {"tool": "read", "args": {"name": "r1"}},
    {"tool": "write", "args": {"name": "w2"}},
    {"tool": "slow_read", "args": {"name": "r3"}},
    {"tool": "write", "args": {"name": "w4"}},
    {"tool": "slow_read", "args": {"name": "r5"}},
    {"tool": "write", "args": {"name": "w6"}},
    {"final": "soaked"},
]


def agent() -> Agent:
    """Four steps: a safe read, a `never` write, a safe read, the final answer."""
    return Agent(model=LedgerModel(SCRIPT), tools=[read, write, slow_read], max_steps=10)


def soak_agent() -> Agent:
    """Seven steps mixing `never` writes, safe reads and slow safe reads."""
    return Agent(model=LedgerModel(SOAK_SCRIPT), tools=[read, write, slow_read], max_steps=10)


# Steps of several tool calls (run concurrently): `never` writes next to safe reads.
PARALLEL_SCRIPT = [
    {"calls": [{"tool": "write", "args": {"name": "w1"}}, {"tool": "read", "args": {"name": "r1"}},
               {"tool": "write", "args": {"name": "w2"}}]},
    {"calls": [{"tool": "read", "args": {"name": "r2"}}, {"tool": "write", "args": {"name": "w3"}}]},
    {"final": "all calls done"},
]


def parallel_agent() -> Agent:
    """Two steps of several tool calls each, then the final answer."""
    return Agent(model=LedgerModel(PARALLEL_SCRIPT), tools=[read, write, slow_read], max_steps=10)


def blocking_agent() -> Agent:
    """One slow (blocking) safe read, then the final answer."""
    script = [{"tool": "slow_read", "args": {"name": "b1"}}, {"final": "unblocked"}]
    return Agent(model=LedgerModel(script), tools=[slow_read], max_steps=5)


_started = os.environ.get("POLYLOOP_STARTED")
if _started:  # tell a watching parent that the agent is loaded and about to run
    Path(f"{_started}.{os.getpid()}").touch()

_barrier = os.environ.get("POLYLOOP_BARRIER")
if _barrier:
    Path(f"{_barrier}.{os.getpid()}.ready").touch()
    while not os.path.exists(_barrier):
        time.sleep(0.001)
