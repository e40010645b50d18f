"""Instructions per in-memory step, counted by valgrind: a measure that does not move with the machine.

    python benchmarks/instructions.py                     # this tree
    python benchmarks/instructions.py /tmp/perf-base .    # several trees, each against the first

The machines we run on are shared: the CPU time of the same step moves by ±20% from one
minute to the next, so a change of a few percent cannot be seen in time alone, however
the runs are alternated. The instructions a step executes do not move. Each tree runs the
benchmarks' workload (`ScriptedModel`, the trivial async tool, `MemoryStore`) under
callgrind twice, for N1 and N2 steps; the difference of the two counts divided by N2 - N1
is one step's instructions, without the start of the process. `PYTHONHASHSEED=0` keeps
the count the same from run to run.

Instructions are not time: a cache miss, a system call or a clock read costs more than
its count (under valgrind, reading the clock counts many more instructions than it takes),
so every change is also measured in time, alternated with the code before it
(benchmarks/README.md). Needs valgrind (`apt-get install valgrind`); ~1 minute per tree.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

WORKLOAD = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from benchmarks._common import lookup_tool, scripted_outputs
from polyloop import Agent, ScriptedModel
from polyloop.testing import MemoryStore

async def main(steps):
    agent = Agent(model=ScriptedModel(scripted_outputs(steps)), tools=[lookup_tool()], max_steps=steps + 1)
    await agent.run("build every module", run_id="r", store=MemoryStore())

asyncio.run(main(int(sys.argv[2])))
"""


def instructions(tree: Path, steps: int) -> int:
    """Every instruction callgrind counts in one process that runs `steps` steps with `tree`'s library."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
         sys.executable, "-c", WORKLOAD, str(tree), str(steps)],
        capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"instructions.py: the run with {tree} failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def per_step(tree: Path, n1: int, n2: int) -> float:
    return (instructions(tree, n2) - instructions(tree, n1)) / (n2 - n1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", type=Path, default=[Path(__file__).resolve().parent.parent],
                        help="repository roots to measure (default: this one); the first is the reference")
    parser.add_argument("--steps", type=int, nargs=2, default=(500, 2500), metavar=("N1", "N2"),
                        help="the two run lengths (default: 500 2500)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("instructions.py: valgrind is not installed (apt-get install valgrind)")
    n1, n2 = args.steps
    reference = None
    for tree in args.trees:
        count = per_step(tree.resolve(), n1, n2)
        reference = reference or count
        print(f"{count:>10,.0f} instructions a step  {count / reference:5.3f}x  {tree}")


if __name__ == "__main__":
    main()
