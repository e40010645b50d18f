"""Agent targets for the hardening tests (issue: ways a `never` action could run twice, hang or leak).

* `POLYLOOP_TEST_CHARGES`: a file `slow_charge` appends one line to per execution (fsync'd).
* `POLYLOOP_TEST_STARTED`: a file `slow_charge` creates when it starts.
* `POLYLOOP_TEST_SECONDS`: how long `slow_charge` takes (default 3); with
  `POLYLOOP_TEST_RELEASE`, it ends as soon as that file exists, at the latest then.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from polyloop import Agent, ScriptedModel, tool


@tool
def slow_charge(amount: int) -> str:
    """Charge a card; takes a few seconds (a synchronous `never` tool)."""
    marker = os.environ.get("POLYLOOP_TEST_STARTED")
    if marker:
        Path(marker).write_text("started")
    deadline = time.monotonic() + float(os.environ.get("POLYLOOP_TEST_SECONDS", "3"))
    release = os.environ.get("POLYLOOP_TEST_RELEASE")
    while time.monotonic() < deadline and not (release and os.path.exists(release)):
        time.sleep(0.02)
    charges = os.environ.get("POLYLOOP_TEST_CHARGES")
    if charges:
        with open(charges, "a") as f:
            f.write(f"charged {amount}\n")
            f.flush()
            os.fsync(f.fileno())
    return f"charged {amount}"


@tool
def quitter() -> str:
    """A tool that calls sys.exit(0)."""
    sys.exit(0)


@tool(replay="safe")
def list_names() -> list[str]:
    """Names as os.listdir returns them: one is not valid UTF-8."""
    return ["ok.txt", os.fsdecode(b"bad-\xff.txt")]


charger = Agent(
    model=ScriptedModel([{"tool": "slow_charge", "args": {"amount": 5}}, {"final": "paid"}]),
    tools=[slow_charge],
)

exiting = Agent(model=ScriptedModel([{"tool": "quitter", "args": {}}, {"final": "after exit"}]), tools=[quitter])

lister = Agent(
    model=ScriptedModel([{"tool": "list_names", "args": {}}, {"final": "listed"}]), tools=[list_names]
)


async def async_factory() -> Agent:
    return charger
