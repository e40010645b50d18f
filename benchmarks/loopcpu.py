"""Figure 6: the loop's own CPU, resume against verify, and a long run's memory.

* The in-memory step (`MemoryStore`: no disk, the same JSON encoding) with
  the shared async tool, with the same tool as a plain `def` (run in a
  worker thread, the default) and as a `def` declared `inline=True` (run on
  the event loop). The variants alternate, one fresh run each, and the CPU
  time of the whole process (every thread) is divided by the steps.
* `resume` of a 10,000-step log up to its first move (hold the run, read,
  walk, plan: what `resume_run` does before it imports the target) against
  `verify_file` of the same log, alternated.
* The resident memory of one 10,000-step run on `JsonlStore`, sampled every
  1,000 steps in a fresh process, against the size of its log.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from ._common import (
    OBSERVATION, TOOL_NAME, Probe, Section, Target, lookup_tool, median, ratio, scripted_outputs, size, us,
)


def _def_tool(*, inline: bool) -> Any:
    """The shared tool as a plain function; `inline` where this library version has it."""
    from polyloop import tool

    def lookup(query: str) -> str:
        """Look up the status of something."""
        return OBSERVATION

    kw = {"inline": True} if inline else {}
    return tool(name=TOOL_NAME, replay="safe", **kw)(lookup)


def _has_inline() -> bool:
    from polyloop import tool

    return "inline" in inspect.signature(tool).parameters


async def _memory_run(tool: Any, steps: int, run_id: str) -> tuple[float, float]:
    """(CPU seconds per step, wall seconds per step) of one in-memory run."""
    from polyloop import Agent, ScriptedModel
    from polyloop.testing import MemoryStore

    agent = Agent(model=ScriptedModel(scripted_outputs(steps)), tools=[tool], max_steps=steps + 1)
    wall, cpu = time.perf_counter(), time.process_time()
    result = await agent.run("build every module", run_id=run_id, store=MemoryStore())
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert result.reason == "final_answer" and result.steps == steps + 1, result
    return cpu / (steps + 1), wall / (steps + 1)


def _cpu_rows(steps: int, reps: int) -> tuple[dict[str, list[tuple[float, float]]], bool]:
    variants = {"async tool": lookup_tool(), "plain `def` tool, worker thread (the default)": _def_tool(inline=False)}
    inline = _has_inline()
    if inline:
        variants["plain `def` tool, `inline=True` (on the event loop)"] = _def_tool(inline=True)
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    for rep in range(reps):
        order = list(variants.items()) if rep % 2 == 0 else list(reversed(variants.items()))
        for label, tool in order:
            samples[label].append(asyncio.run(_memory_run(tool, steps, f"cpu-{rep}")))
    return samples, inline


def _write_unfinished(path: str, run_id: str, steps: int) -> None:
    """A 10,000-step log as the loop writes it, cut after the last tool step (resume goes on)."""
    from .readside import write_log

    write_log(path, run_id, steps)
    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    with open(path, "wb") as f:
        f.write(b"".join(lines[:-4]))  # the final step's three records and run_finished


async def _resume_to_plan(store: Any, run_id: str) -> Any:
    from polyloop._recovery.plan import plan
    from polyloop._run.hold import walked

    async with walked(store, run_id) as walker:
        return plan(walker)


def _resume_vs_verify(workdir: str, steps: int, reps: int) -> tuple[float, float, int]:
    from polyloop import JsonlStore, verify_file
    from polyloop._recovery.plan import CallModel

    directory = tempfile.mkdtemp(prefix="resume-", dir=workdir)
    run_id = "long"
    path = os.path.join(directory, f"{run_id}.jsonl")
    _write_unfinished(path, run_id, steps)
    store = JsonlStore(directory)
    resume, verify = [], []
    for rep in range(reps):
        for which in (("resume", "verify") if rep % 2 == 0 else ("verify", "resume")):
            gc.collect()
            start = time.perf_counter()
            if which == "resume":
                planned = asyncio.run(_resume_to_plan(store, run_id))
                assert isinstance(planned, CallModel) and planned.step == steps + 1, planned
                resume.append(time.perf_counter() - start)
            else:
                assert verify_file(path).status == "ok"
                verify.append(time.perf_counter() - start)
    return median(resume), median(verify), os.path.getsize(path)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Sampler(Probe):
    """A probe that samples the process's resident set every `every` model calls."""

    def __init__(self, model: Any, every: int) -> None:
        super().__init__(model)
        self.every = every
        self.rss: list[tuple[int, int]] = []

    async def complete(self, messages: Any, tools: Any) -> Any:
        call = len(self.leave) + 1
        if call % self.every == 1 and call > 1:
            self.rss.append((call - 1, _rss()))
        return await super().complete(messages, tools)


def memory_child(directory: str, steps: int) -> dict[str, Any]:
    """One long JSONL run in this (fresh) process: resident set every 1,000 steps, and the log's size."""
    from polyloop import Agent, JsonlStore, ScriptedModel
    from polyloop.testing import MemoryStore

    warm = Agent(model=ScriptedModel(scripted_outputs(1)), tools=[lookup_tool()], max_steps=2)
    asyncio.run(warm.run("warm up", run_id="warm", store=MemoryStore()))
    baseline = _rss()
    probe = _Sampler(ScriptedModel(scripted_outputs(steps)), max(1, steps // 10))
    agent = Agent(model=probe, tools=[lookup_tool()], max_steps=steps + 1)
    asyncio.run(agent.run("build every module", run_id="long", store=JsonlStore(directory)))
    return {"baseline": baseline, "rss": probe.rss, "end": _rss(),
            "log": os.path.getsize(os.path.join(directory, "long.jsonl"))}


def _memory(workdir: str, steps: int) -> dict[str, Any]:
    directory = tempfile.mkdtemp(prefix="memory-", dir=workdir)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = [sys.executable, "-m", "benchmarks.loopcpu", directory, str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=root, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(workdir: str, *, quick: bool) -> list[Section]:
    steps = 300 if quick else 3_000
    reps = 2 if quick else 6
    long = 400 if quick else 10_000
    section = Section(
        key="loopcpu",
        title="6. The loop's own CPU, resume against verify, and a long run's memory",
        columns=["figure", "measured", "against", "ratio"],
    )
    samples, inline = _cpu_rows(steps, reps)
    cpu = {label: median(c for c, _ in s) for label, s in samples.items()}
    wall = {label: median(w for _, w in s) for label, s in samples.items()}
    base = cpu["async tool"]
    for label in samples:
        spread = [c for c, _ in samples[label]]
        section.rows.append([f"in-memory step, {label}: CPU (wall); the runs' range",
                             f"{us(cpu[label])} ({us(wall[label])}); {us(min(spread))}–{us(max(spread))}",
                             "the async tool's", ratio(cpu[label] / base)])
    section.targets.append(Target("in-memory step, async tool (µs of CPU)", base * 1e6, 45))
    fastest_def = min(v for k, v in cpu.items() if k != "async tool")
    section.targets.append(Target("in-memory step, plain `def` tool, best way offered (µs of CPU)",
                                  fastest_def * 1e6, 60))

    resume, verify, log_bytes = _resume_vs_verify(workdir, long, 3 if quick else 7)
    section.rows.append([f"`resume` of a {long:,}-step log ({size(log_bytes)}) to its first move: hold, "
                         "read, walk, plan", us(resume), f"`verify_file` of it: {us(verify)}",
                         ratio(resume / verify)])
    section.targets.append(Target(f"resume of a {long:,}-step log / verify of it", resume / verify, 1.2))

    mem = _memory(workdir, long)
    grown = mem["end"] - mem["baseline"]
    section.rows.append([f"resident memory of one {long:,}-step JSONL run, grown over the process's start",
                         size(grown), f"its log: {size(mem['log'])}", ratio(grown / mem["log"])])
    samples_rss = mem["rss"]
    if len(samples_rss) >= 3:
        (s0, r0), (s1, r1) = samples_rss[1], samples_rss[-1]
        per_step = (r1 - r0) / (s1 - s0)
        per_log_step = mem["log"] / long
        section.rows.append([f"its growth per step from step {s0:,} to {s1:,}", f"{per_step:,.0f} B",
                             f"the log's bytes per step: {per_log_step:,.0f} B", ratio(per_step / per_log_step)])
    section.targets.append(Target(f"resident memory of a {long:,}-step run (grown) / its log", grown / mem["log"], 2))
    section.notes.append(
        f"CPU: {reps} alternating runs of {steps:,} steps per variant; the process's CPU time (every "
        "thread) per step, median of the runs, with the wall time in brackets (the two differ when "
        "the machine is busy or a worker thread waits), then the range of the runs' CPU: on a shared "
        "machine the same step moves by a third between runs of one process. The µs targets are "
        "absolute and judged on the median, so judge them on a quiet machine; every other figure here "
        "is a ratio of two things measured side by side. "
        + ("" if inline else "This library version has no `inline=True`. ")
        + "Resume and verify alternate, medians of their repetitions, the log in the page cache. "
        "Memory: one run in a fresh process after a one-step warm-up run; the resident set is "
        "sampled every tenth of the run (growth per step is the slope between the second sample "
        "and the last: 0 B means flat)."
    )
    return [section]


if __name__ == "__main__":
    print(json.dumps(memory_child(sys.argv[1], int(sys.argv[2]))))
