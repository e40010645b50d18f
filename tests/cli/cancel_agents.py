"""Agents the cancel and archive tests run as `tests/cli/cancel_agents.py:NAME`.

`work` leaves `start N` and then `end N` in the file named by
`POLYLOOP_TEST_WORLD` around a short sleep, so a test can tell whether any
call was cut between the two (a cancel must never do that). The agent calls
it `POLYLOOP_TEST_STEPS` times (default 200), then answers.
"""

from __future__ import annotations

import os
import time

from polyloop import Agent, ScriptedModel, ToolContext, tool


@tool(replay="never")
def work(n: int, ctx: ToolContext) -> str:
    """One unit of work with a side effect at each end."""
    world = os.environ["POLYLOOP_TEST_WORLD"]
    with open(world, "a") as f:
        f.write(f"start {ctx.run_id} {n}\n")
        f.flush()
        os.fsync(f.fileno())
    time.sleep(float(os.environ.get("POLYLOOP_TEST_NAP", "0.02")))
    with open(world, "a") as f:
        f.write(f"end {ctx.run_id} {n}\n")
        f.flush()
        os.fsync(f.fileno())
    return f"did {n}"


def worker() -> Agent:
    steps = int(os.environ.get("POLYLOOP_TEST_STEPS", "200"))
    script = [{"tool": "work", "args": {"n": i}} for i in range(steps)] + [{"final": "all done"}]
    return Agent(model=ScriptedModel(script), tools=[work], max_steps=steps + 5)
