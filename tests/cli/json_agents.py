"""Agents for the `--json everywhere` tests (targets `json_agents.py:NAME`): a transfer whose
compensating refund dies mid-way, so the rollback itself is in doubt."""

from __future__ import annotations

import os
import signal

from polyloop import Agent, ScriptedModel, ToolContext, tool


@tool
def transfer(amount: int, to: str, ctx: ToolContext) -> str:
    """Move money (an effect that must not repeat)."""
    return f"sent {amount} to {to}"


@transfer.verify
def _(args, result, ctx):
    return "the bank reports no such transfer"  # a failed verification: the rollback runs


@transfer.rollback(kind="compensate")
def refund(args, result, ctx):
    os.kill(os.getpid(), signal.SIGKILL)  # dies inside the rollback: its outcome is unknown


def banker() -> Agent:
    script = [{"tool": "transfer", "args": {"amount": 5, "to": "acme"}}, {"final": "sent"}]
    return Agent(model=ScriptedModel(script), tools=[transfer])
