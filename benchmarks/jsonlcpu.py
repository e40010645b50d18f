"""Where a JSONL step's CPU goes: the store's parts switched off one at a time, the disk taken away.

    python benchmarks/jsonlcpu.py              # one run of 2,000 steps per variant, 4 alternating rounds
    python benchmarks/jsonlcpu.py --quick      # 200 steps, 2 rounds: checks that it runs
    python benchmarks/jsonlcpu.py --dir /tmp   # on the disk itself (default: /dev/shm, a RAM file system)

A measuring tool, not a way to run: on a RAM file system an fsync costs
almost nothing, so what a JSONL step costs beyond an in-memory one is the
event loop's own CPU (`time.thread_time()` of the loop's thread) spent on
the store's work, not the disk. One run of the benchmarks' workload
(benchmarks/_common.py) per variant, the variants alternated round by round:

* in memory, and the JSONL store as shipped;
* the JSONL store with one part replaced by a no-op, in this process only:
  the look for a request to stop (`cancel_request`), the check that a held
  log is still the file at its path before each durable append
  (`_check_same`), or the fsync itself (`_fsync_fd`); then all three.

Then the fsync's hand-off alone: a 300-byte `write(2)` and an fsync of it,
5,000 times, by the store's batch to the kernel (`Syncer`), by a thread of
the default executor, on the loop itself (never shipped: the loop never
waits on the disk, docs/explanation/design-choices.md; here for scale),
and a plain `asyncio.sleep(0)` instead of any fsync (the floor of a
suspension). Printed: the loop's CPU per step or per fsync, median of the
rounds, and the range.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._common import lookup_tool, scripted_outputs  # noqa: E402


async def _no_cancel(self: Any, run_id: str) -> None:
    return None


def _no_same(self: Any, path: str, run_id: str) -> None:
    return None


async def _no_fsync(self: Any, fd: int, *, same: str | None = None) -> None:
    return None


# name -> (the store: "memory" or "jsonl", the JsonlStore methods replaced)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "in memory": ("memory", {}),
    "JSONL as shipped": ("jsonl", {}),
    "JSONL, no look for a request to stop": ("jsonl", {"cancel_request": _no_cancel}),
    "JSONL, no check that the log is still its path": ("jsonl", {"_check_same": _no_same}),
    "JSONL, no fsync": ("jsonl", {"_fsync_fd": _no_fsync}),
    "JSONL, none of the three": ("jsonl", {"cancel_request": _no_cancel, "_check_same": _no_same,
                                           "_fsync_fd": _no_fsync}),
}


async def _one_run(store: object, steps: int, run_id: str) -> float:
    from polyloop import Agent, ScriptedModel

    agent = Agent(model=ScriptedModel(scripted_outputs(steps)), tools=[lookup_tool()], max_steps=steps + 1)
    start = time.thread_time()
    result = await agent.run("build every module", run_id=run_id, store=store)  # type: ignore[arg-type]
    assert result.reason == "final_answer", result
    return (time.thread_time() - start) / (steps + 1) * 1e6


def steps(workdir: str, n: int, rounds: int) -> dict[str, list[float]]:
    """The loop's CPU per step (µs) of each variant, one value per round."""
    from polyloop import JsonlStore
    from polyloop.testing import MemoryStore

    shipped = {name: JsonlStore.__dict__.get(name) for _, swap in VARIANTS.values() for name in swap}
    got: dict[str, list[float]] = {name: [] for name in VARIANTS}
    asyncio.run(_one_run(MemoryStore(), 20, "warm"))
    for r in range(rounds):
        for k, (name, (kind, swap)) in enumerate(VARIANTS.items()):
            for method, replacement in swap.items():
                setattr(JsonlStore, method, replacement)
            try:
                store = MemoryStore() if kind == "memory" else JsonlStore(os.path.join(workdir, f"r{r}-{k}"))
                got[name].append(asyncio.run(_one_run(store, n, "run")))
            finally:
                for method in swap:
                    if shipped[method] is None:
                        delattr(JsonlStore, method)  # inherited from its mixin: the class's own copy goes
                    else:
                        setattr(JsonlStore, method, shipped[method])
    return got


def _hand_offs() -> dict[str, Callable[[int, int], Awaitable[float]]]:
    from polyloop.stores._aio import open_syncer

    async def timed(fd: int, n: int, wait: Callable[[int], Awaitable[None] | None]) -> float:
        start = time.thread_time()
        for _ in range(n):
            os.write(fd, b"x" * 300)
            waited = wait(fd)
            if waited is not None:
                await waited
        return (time.thread_time() - start) / n * 1e6

    async def batch(fd: int, n: int) -> float:
        syncer = open_syncer(asyncio.get_running_loop())
        if syncer is None:
            return float("nan")  # no asynchronous fsync in this kernel
        try:
            return await timed(fd, n, syncer.fsync)
        finally:
            await syncer.aclose()

    async def thread(fd: int, n: int) -> float:
        loop = asyncio.get_running_loop()
        return await timed(fd, n, lambda fd: loop.run_in_executor(None, os.fsync, fd))

    async def on_the_loop(fd: int, n: int) -> float:
        return await timed(fd, n, os.fsync)  # type: ignore[arg-type]  # returns None: nothing awaited

    async def no_fsync(fd: int, n: int) -> float:
        return await timed(fd, n, lambda fd: asyncio.sleep(0))

    return {
        "the store's batch to the kernel (Syncer)": batch,
        "a thread of the default executor": thread,
        "on the event loop (forbidden: for scale)": on_the_loop,
        "no fsync, one asyncio.sleep(0)": no_fsync,
    }


def fsyncs(workdir: str, n: int, rounds: int) -> dict[str, list[float]]:
    """The loop's CPU per write + fsync (µs) of each way, one value per round."""
    ways = _hand_offs()
    got: dict[str, list[float]] = {name: [] for name in ways}
    for r in range(rounds):
        for k, (name, way) in enumerate(ways.items()):
            path = os.path.join(workdir, f"fsync-{r}-{k}")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            try:
                got[name].append(asyncio.run(way(fd, n)))
            finally:
                os.close(fd)
                os.unlink(path)
    return got


def _table(title: str, columns: tuple[str, str, str], got: dict[str, list[float]], base: str) -> None:
    """A Markdown table of each entry's median, range, and median over `base`'s median."""
    print(f"{title}\n")
    print(f"| {columns[0]} | {columns[1]} | range | / {columns[2]} |")
    print("|---|---:|---:|---:|")
    against = statistics.median(got[base])
    for name, values in got.items():
        median = statistics.median(values)
        print(f"| {name} | {median:,.1f} | {min(values):,.1f}–{max(values):,.1f} | {median / against:.2f}× |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--fsyncs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", default=None, help="where the logs go (default: /dev/shm when there is one)")
    args = parser.parse_args(argv)
    n, count, rounds = (200, 500, 2) if args.quick else (args.steps, args.fsyncs, args.rounds)
    where = args.dir or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    workdir = tempfile.mkdtemp(prefix="polyloop-jsonlcpu-", dir=where)
    try:
        per_step = steps(workdir, n, rounds)
        per_fsync = fsyncs(workdir, count, rounds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    _table(f"One run of {n + 1} steps per variant, logs in {where or tempfile.gettempdir()}, {rounds} alternating"
           " rounds: the event loop's CPU per step", ("variant", "µs a step (median)", "in memory"),
           per_step, "in memory")
    print()
    _table(f"A 300-byte write(2) and its fsync, {count:,} times, {rounds} alternating rounds: the event loop's"
           " CPU per fsync", ("the fsync", "µs each (median)", "sleep(0)"), per_fsync, "no fsync, one asyncio.sleep(0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
