"""Agents for the `polyloop watch` tests: runs that move only when the test lets them.

`POLYLOOP_TEST_GATE` names a directory; step N's tool waits until a file named
`N` exists there, so a test sees each step land while the run is still alive.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from polyloop import Agent, ScriptedModel, tool


@tool(replay="safe")
async def gated(step: int) -> str:
    """Wait until the test opens the gate of `step`."""
    gate = Path(os.environ["POLYLOOP_TEST_GATE"], str(step))
    while not gate.exists():
        await asyncio.sleep(0.02)
    return f"gate {step} opened"


def make_gated() -> Agent:
    """Three gated steps, then a final answer."""
    script = [{"tool": "gated", "args": {"step": i}, "usage": {"input_tokens": 10, "output_tokens": 2}}
              for i in (1, 2, 3)]
    return Agent(model=ScriptedModel([*script, {"final": "all gates passed"}]), tools=[gated])


gated_run = make_gated()
