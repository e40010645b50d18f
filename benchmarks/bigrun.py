"""The 100,000-step log: `resume`, `inspect` and `inspect --json` against one bare read + classify.

Every command runs as a real process (`polyloop ...`), as a person runs it,
and so does the baseline (a process that reads the log and classifies it
with the library, nothing else), so interpreter start-up is in both. Each
figure is the best of `--reps` runs, interleaved; peak memory is the
process's maximum resident set (`wait4`), shown against the log's size.

    python benchmarks/bigrun.py [--steps 100000] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AGENT = '''
from polyloop import Agent, ModelOutput, tool

@tool(replay="safe")
def lookup(query: str) -> str:
    return "x"

class Final:
    """Answers every call with the final answer (a script of 100,000 outputs costs seconds to build)."""

    async def complete(self, messages, tools):
        return ModelOutput(text="done")

agent = Agent(model=Final(), tools=[lookup], max_steps=200_001)
'''

BARE = (
    "import asyncio, sys; from polyloop import JsonlStore, classify; "
    "s = JsonlStore(sys.argv[1]); classify(asyncio.run(s.read_log(sys.argv[2])), run_id=sys.argv[2])"
)


def _timed(argv: list[str], cwd: str) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} exited {code}: {err}")
    return elapsed, usage.ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    opts = parser.parse_args()
    polyloop = str(Path(sys.executable).with_name("polyloop"))
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as work:
        runs = Path(work, "runs")
        runs.mkdir()
        Path(work, "agent.py").write_text(AGENT)
        template = Path(work, "template.jsonl")
        # Written by a child: Linux starts a process's peak RSS at its parent's
        # (exec keeps the high-water mark), so this process must stay small.
        root = str(Path(__file__).resolve().parent.parent)
        maker = f"import sys; sys.path.insert(0, {root!r}); from benchmarks.readside import write_log; write_log(sys.argv[1], 'big', {opts.steps})"
        subprocess.run([sys.executable, "-c", maker, str(template)], check=True)
        # Drop the final step and the end marker: resume has one step left to do.
        lines = template.read_bytes().splitlines(keepends=True)
        head = lines[0].replace(b'"target":null', f'"target":"{work}/agent.py:agent"'.encode())
        head = head.replace(f'"max_steps":{opts.steps + 1}'.encode(), f'"max_steps":{opts.steps + 1}'.encode())
        template.write_bytes(head + b"".join(lines[1:-4]))
        size = template.stat().st_size
        cases = {
            "bare read + classify": [sys.executable, "-c", BARE, str(runs), "big"],
            "polyloop resume": [polyloop, "resume", "big", "--dir", str(runs)],
            "polyloop inspect": [polyloop, "inspect", "big", "--dir", str(runs)],
            "polyloop inspect --json": [polyloop, "inspect", "big", "--dir", str(runs), "--json"],
        }
        best: dict[str, tuple[float, int]] = {}
        for _ in range(opts.reps):
            for name, argv in cases.items():
                shutil.copyfile(template, runs / "big.jsonl")
                elapsed, rss = _timed(argv, work)
                old = best.get(name)
                best[name] = (min(elapsed, old[0]) if old else elapsed, max(rss, old[1]) if old else rss)
        base = best["bare read + classify"][0]
        print(f"log: {opts.steps:,} steps, {size / 2**20:.1f} MiB; best of {opts.reps}, interleaved")
        print(f"{'command':<26} {'wall':>8} {'÷ bare':>8} {'peak RSS':>10} {'÷ log size':>11}")
        for name, (elapsed, rss) in best.items():
            print(f"{name:<26} {elapsed:>7.2f}s {elapsed / base:>7.2f}× {rss / 2**20:>8.0f} MiB {rss / size:>10.1f}×")


if __name__ == "__main__":
    main()
