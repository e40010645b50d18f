"""What durability costs under load: the same concurrent runs on the JSONL store and in memory.

    python benchmarks/durability.py              # 256 runs of 20 steps at once, 5 alternating rounds
    python benchmarks/durability.py --quick      # 32 runs of 5 steps, 2 rounds: checks that it runs
    python benchmarks/durability.py --runs 64 --dir /mnt/other-fs

One process, one event loop, every run started at once (`asyncio.gather`),
an instant agent (a scripted model and a trivial `safe` tool, so the log and
the loop are all there is). The in-memory store is the ceiling set by the
loop's own CPU; the JSONL store pays for the durable writes (two fsyncs a
step, off the loop), once with its default fsyncs (batched to the kernel)
and once with every fsync on a disk thread (`POLYLOOP_FSYNC=threads`, the
design before the batches). Printed: the median steps/s of each and the
ratios (issue 17's target: at least 0.5 at 256 runs). Alternated round by
round so the machine's noise falls on all alike.
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

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._common import lookup_tool, median, ratio, scripted_outputs  # noqa: E402


async def _round(store: object, runs: int, steps: int, tag: str) -> float:
    from polyloop import Agent, ScriptedModel

    tool = lookup_tool()

    async def one(i: int) -> None:
        agent = Agent(model=ScriptedModel(scripted_outputs(steps)), tools=[tool], max_steps=steps + 1)
        result = await agent.run("build every module", run_id=f"{tag}-{i}", store=store)  # type: ignore[arg-type]
        assert result.reason == "final_answer", result

    gc.collect()
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(runs)))
    return runs * (steps + 1) / (time.perf_counter() - start)


KINDS = ("memory", "jsonl", "jsonl-threads")


def measure(workdir: str, runs: int, steps: int, rounds: int) -> dict[str, float]:
    from polyloop import JsonlStore
    from polyloop.testing import MemoryStore

    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for r in range(rounds):
        for kind in KINDS if r % 2 == 0 else reversed(KINDS):
            if kind == "memory":
                rates[kind].append(asyncio.run(_round(MemoryStore(), runs, steps, f"m{r}")))
                continue
            where = tempfile.mkdtemp(prefix=f"round{r}-", dir=workdir)
            # The store reads POLYLOOP_FSYNC when it is made: "threads" hands
            # every fsync to its disk threads instead of the kernel's batches.
            saved = os.environ.pop("POLYLOOP_FSYNC", None)
            if kind == "jsonl-threads":
                os.environ["POLYLOOP_FSYNC"] = "threads"

            async def on_disk(where: str = where, r: int = r) -> float:
                async with JsonlStore(where) as store:
                    return await _round(store, runs, steps, f"j{r}")

            try:
                rates[kind].append(asyncio.run(on_disk()))
            finally:
                os.environ.pop("POLYLOOP_FSYNC", None)
                if saved is not None:
                    os.environ["POLYLOOP_FSYNC"] = saved
            shutil.rmtree(where)
    return {k: median(v) for k, v in rates.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", default=None, help="where the logs go (default: a temporary directory)")
    args = parser.parse_args(argv)
    runs, steps, rounds = (32, 5, 2) if args.quick else (args.runs, args.steps, args.rounds)
    workdir = tempfile.mkdtemp(prefix="polyloop-durability-", dir=args.dir)
    try:
        got = measure(workdir, runs, steps, rounds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{runs} concurrent runs of {steps + 1} steps, one process, {rounds} alternating rounds\n")
    print("| store | steps/s (median) |")
    print("|---|---:|")
    print(f"| in memory (the loop's own CPU) | {got['memory']:,.0f} |")
    print(f"| JSONL (two fsyncs a step, batched to the kernel) | {got['jsonl']:,.0f} |")
    print(f"| JSONL, every fsync on a disk thread (POLYLOOP_FSYNC=threads) | {got['jsonl-threads']:,.0f} |")
    print(f"\nJSONL / in memory: {ratio(got['jsonl'] / got['memory'])}")
    print(f"JSONL with disk threads / in memory: {ratio(got['jsonl-threads'] / got['memory'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
