"""Agents whose tool calls wait for a person, for the CLI tests (targets `approval_agents.py:NAME`)."""

from __future__ import annotations

import os
from pathlib import Path

from polyloop import Agent, ScriptedModel, ToolContext, ask_human, tool


@tool(approval=lambda args: args["amount"] > 100)
def pay(amount: int, to: str, ctx: ToolContext) -> str:
    """Pay someone; calls above 100 wait for approval."""
    out = Path(os.environ["APPROVAL_TEST_EFFECTS"])
    out.mkdir(exist_ok=True)
    (out / f"{ctx.result_id}-{to}-{amount}").write_text(ctx.idempotency_key)
    return f"paid {amount} to {to}"


def payer() -> Agent:
    script = [{"tool": "pay", "args": {"amount": 500, "to": "bob"}}, {"final": "paid"}]
    return Agent(model=ScriptedModel(script), tools=[pay])


def asker() -> Agent:
    script = [{"tool": "ask_human", "args": {"question": "which \x1b[31mcolour?"}}, {"final": "asked"}]
    return Agent(model=ScriptedModel(script), tools=[ask_human])
