"""The agent the checkpoint-validity and retry-budget tests run in real processes (a `polyloop run` target).

Knobs, read from the environment when the target is loaded (so the killed
run and the `polyloop resume` that follows can differ on purpose):

* `DIE_AT=N` — the `step` tool SIGKILLs its own process when called with `n=N`
  (before it returns: the action's outcome is unknown, and it is `safe`).
* `AGENT_VERSION` — the agent's `logic_version` (default `1`).
* `AGENT_SCRIPT` — `steps` (two steps, then an answer) or `fail` (the
  `flaky` tool, which always fails, five times).
* `AGENT_SYSTEM` — the system prompt (default none).
"""

from __future__ import annotations

import os
import signal

from polyloop import Agent, ScriptedModel, tool


@tool(replay="safe")
def step(n: int) -> str:
    """Do step n."""
    if os.environ.get("DIE_AT") == str(n):
        os.kill(os.getpid(), signal.SIGKILL)
    return f"step {n} done"


@tool(replay="safe")
def flaky() -> str:
    """A service that is down."""
    raise RuntimeError("flaky is down")


@tool(replay="safe", max_failures=2)
def fragile() -> str:
    """A service that is down, with a smaller failure budget."""
    raise RuntimeError("fragile is down")


def agent() -> Agent:
    script = os.environ.get("AGENT_SCRIPT", "steps")
    if script == "steps":
        outputs = [{"tool": "step", "args": {"n": 1}}, {"tool": "step", "args": {"n": 2}}, {"final": "done"}]
    elif script == "fail":
        outputs = [{"tool": "flaky", "args": {}}] * 5 + [{"final": "gave up"}]
    else:
        outputs = [{"tool": "fragile", "args": {}}] * 5 + [{"final": "gave up"}]
    return Agent(
        model=ScriptedModel(outputs),
        tools=[step, flaky, fragile],
        system=os.environ.get("AGENT_SYSTEM") or None,
        logic_version=os.environ.get("AGENT_VERSION", "1"),
        max_resumes_without_progress=3,
    )
