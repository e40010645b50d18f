"""What `polyloop batch` costs and buys, measured side by side.

    python benchmarks/batch.py            # 400 runs of 10 steps, 3 alternating rounds
    python benchmarks/batch.py --quick    # a smoke run

Three ways to run the same runs of the same instant agent (a scripted model
and a trivial `safe` tool, so the log and the machinery are all there is to
measure), each in a fresh directory, alternated round by round so the
machine's noise falls on all of them alike:

* `in-process`: one event loop, `Agent.run` under a semaphore of
  `--concurrency` (what a user's own loop would do);
* `batch -P 1`: `run_batch(processes=1, concurrency=...)`;
* `batch -P 2`: `run_batch(processes=2, concurrency=...)`.

Printed: the median steps/s of each, and the ratios that matter —
`batch -P 1 / in-process` (the price of the worker machinery) and
`batch -P 2 / batch -P 1` (what a second process buys). Absolute figures are
for orientation only: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from polyloop import Agent, JsonlStore, ScriptedModel, run_batch, tool  # noqa: E402

STEPS = int(os.environ.get("BATCH_BENCH_STEPS") or 10)


@tool(replay="safe")
def lookup(query: str) -> str:
    """An instant tool."""
    return "ok"


# The target the batch workers import: STEPS tool calls, then an answer.
agent = Agent(
    model=ScriptedModel([{"tool": "lookup", "args": {"query": str(i)}} for i in range(STEPS - 1)] + [{"final": "done"}]),
    tools=[lookup],
    max_steps=STEPS + 1,
)
TARGET = f"{Path(__file__).resolve()}:agent"


async def _in_process(directory: str, goals: list[str], concurrency: int) -> float:
    store = JsonlStore(directory)
    gate = asyncio.Semaphore(concurrency)

    async def one(n: int, goal: str) -> None:
        async with gate:
            await agent.run(goal, run_id=f"b-{n:05d}", store=store)

    start = time.perf_counter()
    await asyncio.gather(*(one(n, g) for n, g in enumerate(goals, start=1)))
    return time.perf_counter() - start


def _batch(directory: str, goals: list[str], concurrency: int, processes: int) -> float:
    start = time.perf_counter()
    report = run_batch(TARGET, goals, name="b", directory=directory, concurrency=concurrency, processes=processes)
    seconds = time.perf_counter() - start
    assert report.outcome == "finished", report.counts
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="40 runs, 1 round: checks that it runs")
    parser.add_argument("--dir", default=None, help="where the scratch directories go (default: a temp dir)")
    args = parser.parse_args(argv)
    runs, rounds = (40, 1) if args.quick else (args.runs, args.rounds)
    goals = [f"goal {n}" for n in range(runs)]
    total_steps = runs * STEPS
    ways = {
        "in-process": lambda d: asyncio.run(_in_process(d, goals, args.concurrency)),
        "batch -P 1": lambda d: _batch(d, goals, args.concurrency, 1),
        "batch -P 2": lambda d: _batch(d, goals, args.concurrency, 2),
    }
    rates: dict[str, list[float]] = {name: [] for name in ways}
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        for r in range(rounds):
            for name, way in ways.items():
                directory = os.path.join(scratch, f"{r}-{name.replace(' ', '')}")
                rates[name].append(total_steps / way(directory))
    med = {name: statistics.median(values) for name, values in rates.items()}
    print(f"{runs} runs x {STEPS} steps, concurrency {args.concurrency}, {rounds} rounds, {os.cpu_count()} cores")
    print()
    print("| way | steps/s (median) | rounds |")
    print("|---|---:|---|")
    for name, values in rates.items():
        print(f"| {name} | {med[name]:,.0f} | {', '.join(f'{v:,.0f}' for v in values)} |")
    print()
    print(f"batch -P 1 / in-process: {med['batch -P 1'] / med['in-process']:.2f}x")
    print(f"batch -P 2 / batch -P 1: {med['batch -P 2'] / med['batch -P 1']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
