"""The agent the console's browser tests run: its model does what the goal says, then repeats what it was told.

The goal is JSON, `{"tool": NAME, "args": {...}}`: the model calls that tool
with those arguments (`pay` waits for a person's approval; `ask_human` asks
a question), then answers `the tool said: OBSERVATION`, so what a person
decided (an approval's result, a denial's reason, an answer) is what the run
finishes with. A goal can carry any text, hostile included.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from polyloop import Agent, ModelOutput, ToolCall, ask_human, tool


@tool(approval="required")
def pay(to: str, amount: int, memo: str = "") -> str:
    """Pay an amount to someone.

    Args:
        to: who is paid.
        amount: how much.
        memo: a note for the payee.
    """
    with open(os.environ.get("CONSOLE_LEDGER", "ledger.txt"), "a", encoding="utf-8") as ledger:
        ledger.write(f"paid {amount} to {to}\n")
    return f"paid {amount} to {to} ({memo})"


class GoalModel:
    """Calls the goal's tool, then repeats the tool's observation as its final answer."""

    async def complete(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> ModelOutput:
        last = messages[-1]
        if last.get("role") == "tool":
            return ModelOutput(text=f"the tool said: {last['content']}")
        goal = json.loads(messages[0]["content"]) if messages[0].get("role") == "user" else json.loads(
            next(m["content"] for m in messages if m.get("role") == "user"))
        return ModelOutput(tool_call=ToolCall(goal["tool"], goal["args"]))


def agent() -> Agent:
    return Agent(model=GoalModel(), tools=[pay, ask_human])
