"""What a step of four parallel tool calls costs against a step of one, on the JSONL store.

    python benchmarks/calls.py               # 200 steps per run, 7 interleaved repetitions
    python benchmarks/calls.py --quick       # 20 steps, 3 repetitions: checks that it runs
    python benchmarks/calls.py --dir /mnt/other-fs

Three agents run side by side, interleaved, in one process on the same disk:
one call per step; four calls per step as shipped (the four intents are one
durable write, `JsonlStore.write_intents`); and four calls per step on a
store without `write_intents` (each intent its own durable write, for
scale). The tools return at once, so a step's time is the loop's own work
and its durable writes. For each, the table gives the median time per step,
its ratio to the one-call step, and the fsyncs and appends per step counted
through the store's disk seam. The absolute times are for orientation only.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._common import median, ratio  # noqa: E402


def _script(steps: int, calls: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for s in range(steps):
        batch = [{"tool": "lookup", "args": {"key": f"k{s}-{c}"}} for c in range(calls)]
        out.append(batch[0] if calls == 1 else {"calls": batch})
    out.append({"final": "done"})
    return out


def _stores() -> tuple[type, type, type]:
    from polyloop import JsonlStore
    from polyloop.stores._disk import Disk

    class CountingDisk(Disk):
        def __init__(self) -> None:
            self.fsyncs = 0
            self.writes = 0

        def write(self, fd: int, data: bytes) -> None:
            self.writes += 1
            super().write(fd, data)

        def fsync(self, fd: int) -> None:
            self.fsyncs += 1
            super().fsync(fd)

    class OneByOne(JsonlStore):
        write_intents = None  # type: ignore[assignment]  # the loop then writes each intent on its own

    return CountingDisk, JsonlStore, OneByOne


async def _run(store_cls: type, disk: Any, where: str, steps: int, calls: int) -> float:
    from polyloop import Agent, ScriptedModel, tool

    @tool(replay="safe")
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    agent = Agent(model=ScriptedModel(_script(steps, calls)), tools=[lookup], max_steps=steps + 1)
    async with store_cls(where, _disk=disk) as store:
        start = time.perf_counter()
        result = await agent.run("look everything up", run_id="bench-calls", store=store)
        elapsed = time.perf_counter() - start
    assert result.reason == "final_answer", result
    return elapsed / (steps + 1)


def measure(workdir: str, steps: int, reps: int) -> list[dict[str, Any]]:
    CountingDisk, Shipped, OneByOne = _stores()
    variants = {
        "1 call per step": (Shipped, 1),
        "4 calls per step (intents in one durable write)": (Shipped, 4),
        "4 calls per step, one durable write per intent (for scale)": (OneByOne, 4),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    counts: dict[str, tuple[float, float]] = {}
    for rep in range(reps):
        order = list(variants) if rep % 2 == 0 else list(reversed(list(variants)))
        for name in order:
            store_cls, calls = variants[name]
            where = os.path.join(workdir, f"r{rep}-{calls}-{store_cls.__name__}")
            os.makedirs(where)
            disk = CountingDisk()
            gc.collect()
            times[name].append(asyncio.run(_run(store_cls, disk, where, steps, calls)))
            counts[name] = (disk.fsyncs / (steps + 1), disk.writes / (steps + 1))
            shutil.rmtree(where)
    base = median(times["1 call per step"])
    return [
        {"variant": name, "step_us": median(times[name]) * 1e6, "ratio": median(times[name]) / base,
         "fsyncs": counts[name][0], "appends": counts[name][1]}
        for name in variants
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", default=None, help="where to write the logs (default: a temporary directory)")
    args = parser.parse_args(argv)
    steps, reps = (20, 3) if args.quick else (args.steps, args.reps)
    workdir = tempfile.mkdtemp(prefix="polyloop-calls-", dir=args.dir)
    try:
        rows = measure(workdir, steps, reps)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{steps} steps per run, {reps} interleaved repetitions, in {workdir}\n")
    print("| step | median per step | vs one call | fsyncs per step | appends per step |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['variant']} | {r['step_us']:,.0f} µs | {ratio(r['ratio'])} | {r['fsyncs']:.2f} | {r['appends']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
