"""The agent the MCP kill-point tests run in real processes (a `polyloop run`/`resume` target).

Knobs, read from the environment when the target is loaded (so the killed run
and the `polyloop resume` that follows can differ on purpose):

* `MCP_URL`: talk to the effect server over streamable HTTP at this URL;
  otherwise start `effect_server.py` over stdio (its `EFFECT_*` knobs are
  passed on to it).
* `MCP_TRUST=1`: declare the server trusted (policies from annotations);
  `MCP_APPROVE=1`: and its destructive tools' calls wait for approval.
* `MCP_REAL`: use a real published server instead: `time` (`mcp-server-time`)
  or `git:REPO` (`mcp-server-git` on the repository REPO).
* `MCP_SCRIPT`: the model's calls, a JSON list of `[tool, args]` (then a final answer).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from polyloop import Agent, ScriptedModel, tool
from polyloop.mcp import MCPServer

HERE = Path(__file__).resolve().parent


@tool(replay="safe")
def pause(seconds: float) -> str:
    """Wait a moment (lets an idle server die between two calls)."""
    time.sleep(seconds)
    return "paused"


def server() -> MCPServer:
    trust = os.environ.get("MCP_TRUST") == "1"
    real = os.environ.get("MCP_REAL", "")
    if real == "time":
        return MCPServer("time", command=[sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"],
                         trust=trust)
    if real.startswith("git:"):
        return MCPServer("git", command=[sys.executable, "-m", "mcp_server_git", "--repository", real[4:]],
                         trust=trust)
    url = os.environ.get("MCP_URL")
    if url:
        return MCPServer("effects", url=url, trust=trust, timeout=float(os.environ.get("MCP_TIMEOUT", "30")))
    env = {k: v for k, v in os.environ.items() if k.startswith("EFFECT_")}
    return MCPServer("effects", command=[sys.executable, str(HERE / "effect_server.py")], env=env, trust=trust,
                     approve_destructive=os.environ.get("MCP_APPROVE") == "1",
                     timeout=float(os.environ.get("MCP_TIMEOUT", "30")))


def agent() -> Agent:
    calls = json.loads(os.environ.get("MCP_SCRIPT", '[["write_effect", {"key": "a"}]]'))
    outputs = [{"tool": name, "args": args} for name, args in calls] + [{"final": "done"}]
    return Agent(model=ScriptedModel(outputs), tools=[server(), pause], logic_version="1")
