"""Figure 5: many runs at once on one event loop.

Each level (1, 16, 64, 256 concurrent runs) runs in a fresh process, so its
peak memory is its own; the levels are interleaved across repetitions. Every
run does the same steps of the shared workload on one `JsonlStore`
directory (one log and one lock file per run).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from ._common import Probe, Section, Target, lookup_tool, median, ratio, scripted_outputs, size, us

LEVELS = (1, 16, 64, 256)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def _level(directory: str, runs: int, steps: int, rep: int, kind: str) -> tuple[float, list[float]]:
    from polyloop import Agent, JsonlStore, ScriptedModel
    from polyloop.testing import MemoryStore

    store = JsonlStore(directory) if kind == "jsonl" else MemoryStore()
    tool = lookup_tool()
    probes = [Probe(ScriptedModel(scripted_outputs(steps))) for _ in range(runs)]

    async def one(i: int) -> None:
        agent = Agent(model=probes[i], tools=[tool], max_steps=steps + 1)
        result = await agent.run("build every module", run_id=f"r{rep}-{i}", store=store)
        assert result.reason == "final_answer"

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(runs)))
    elapsed = time.perf_counter() - start
    return runs * steps / elapsed, [t for p in probes for t in p.step_times()]


def child(directory: str, runs: int, steps: int, reps: int, kind: str = "jsonl") -> dict[str, float]:
    """One level in this process: steps/s (median of reps), median step latency, memory."""
    import polyloop  # noqa: F401  (imports count in the baseline, not in the runs)
    from polyloop import Agent, ScriptedModel
    from polyloop.testing import MemoryStore

    # The imports a first run makes lazily (pydantic for the tool's schema, ~9 MiB) count in
    # the baseline too: one tiny run in memory before measuring.
    warm = Agent(model=ScriptedModel(scripted_outputs(1)), tools=[lookup_tool()], max_steps=2)
    asyncio.run(warm.run("warm up", run_id="warm", store=MemoryStore()))
    baseline = _rss()
    rates, latencies = [], []
    for rep in range(reps):
        rate, lat = asyncio.run(_level(directory, runs, steps, rep, kind))
        rates.append(rate)
        latencies += lat
    return {
        "rate": statistics.median(rates),
        "latency": statistics.median(latencies),
        "baseline": baseline,
        "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def measure(workdir: str, *, quick: bool) -> list[Section]:
    steps = 10 if quick else 100
    reps = 1 if quick else 3
    rounds = 1 if quick else 2
    results: dict[int, list[dict[str, float]]] = {n: [] for n in LEVELS}
    in_memory: list[dict[str, float]] = []  # the top level again on MemoryStore, next to its JSONL runs
    for r in range(rounds):
        for n in LEVELS if r % 2 == 0 else reversed(LEVELS):
            for kind in ("jsonl", "memory") if n == LEVELS[-1] else ("jsonl",):
                out = _run_level(workdir, n, steps, reps, kind)
                (results[n] if kind == "jsonl" else in_memory).append(out)

    section = Section(
        key="concurrency",
        title="5. Many runs at once on one event loop",
        columns=["concurrent runs", "steps/s", "× one run", "median step latency", "peak memory", "memory per run"],
    )
    one = median(r["rate"] for r in results[1])
    for n in LEVELS:
        rate = median(r["rate"] for r in results[n])
        peak = max(r["peak"] for r in results[n])
        per_run = median((r["peak"] - r["baseline"]) / n for r in results[n])
        section.rows.append(
            [f"{n:,}", f"{rate:,.0f}", ratio(rate / one), us(median(r["latency"] for r in results[n])), size(peak), size(per_run)]
        )
    top = LEVELS[-1]
    section.targets.append(
        Target(f"{top} concurrent runs, steps/s / one run's", median(r["rate"] for r in results[top]) / one, 2.0, True)
    )
    memory_rate = median(r["rate"] for r in in_memory)
    top_rate = median(r["rate"] for r in results[top])
    section.rows.append([f"{top:,}, `MemoryStore` (no disk)", f"{memory_rate:,.0f}", ratio(memory_rate / one),
                         us(median(r["latency"] for r in in_memory)), size(max(r["peak"] for r in in_memory)),
                         size(median((r["peak"] - r["baseline"]) / top for r in in_memory)) + " (its logs too)"])
    section.targets.append(Target(f"{top} concurrent runs, JSONL steps/s / in-memory steps/s", top_rate / memory_rate,
                                  0.6, True))
    section.notes.append(
        f"The last row runs the {top} runs on `MemoryStore` in a fresh process right after each of their JSONL "
        "levels: JSONL / in-memory throughput is how much of the loop's speed the disk leaves."
    )
    section.notes.append(
        f"Every run: {steps} steps of the shared workload, all on one `JsonlStore` directory; "
        f"steps/s is the median of {reps * rounds} repetitions per level, each level in a fresh "
        "process, levels interleaved. Latency is the median of every step of every run. Peak "
        "memory is the process's maximum resident set; memory per run is the peak minus the "
        "process's size before the first run, divided by the runs."
    )
    return [section]


def _run_level(workdir: str, n: int, steps: int, reps: int, kind: str) -> dict[str, float]:
    directory = tempfile.mkdtemp(prefix=f"many-{n}-{kind}-", dir=workdir)
    cmd = [sys.executable, "-m", "benchmarks.concurrency", directory, str(n), str(steps), str(reps), kind]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=root, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    directory, runs, steps, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(child(directory, runs, steps, reps, sys.argv[5] if len(sys.argv) > 5 else "jsonl")))
