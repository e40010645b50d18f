"""The agent the console's browser tests run: its model does what the goal says, then repeats what it was told.

The goal is JSON, `{"tool": NAME, "args": {...}}` (or `{"calls": [...]}` of
those, several calls in one answer): the model calls that tool
with those arguments (`pay` waits for a person's approval; `ask_human` asks
a question), then answers `the tool said: OBSERVATION`, so what a person
decided (an approval's result, a denial's reason, an answer) is what the run
finishes with. A goal can carry any text, hostile included.
"""

from __future__ import annotations

import json
import os
import signal
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


@tool
def send(to: str, text: str) -> str:
    """Send a message (`never` replay: once its intent is durable, a crash leaves it unknown).

    Args:
        to: the recipient.
        text: the message.
    """
    with open(os.environ.get("CONSOLE_LEDGER", "ledger.txt"), "a", encoding="utf-8") as ledger:
        ledger.write(f"sent to {to}\n")
    if os.environ.get("CONSOLE_CRASH") == "1":  # the process dies right after the side effect
        os.kill(os.getpid(), signal.SIGKILL)
    return f"sent to {to}"


@tool(replay="safe")
def note(text: str, ctx) -> str:  # type: ignore[no-untyped-def]
    """Keep a note as an intermediate product (`ctx.artifacts`).

    Args:
        text: the note.
    """
    ref = ctx.artifacts.write("note.txt", text)
    return f"noted in {ref.name}"


class GoalModel:
    """Calls the goal's tool, then repeats the tool's observation as its final answer."""

    async def complete(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> ModelOutput:
        last = messages[-1]
        if last.get("role") == "tool":
            return ModelOutput(text=f"the tool said: {last['content']}")
        goal = json.loads(messages[0]["content"]) if messages[0].get("role") == "user" else json.loads(
            next(m["content"] for m in messages if m.get("role") == "user"))
        if "calls" in goal:  # several tool calls in one answer
            return ModelOutput(tool_calls=tuple(ToolCall(c["tool"], c["args"]) for c in goal["calls"]))
        return ModelOutput(tool_call=ToolCall(goal["tool"], goal["args"]))


def agent() -> Agent:
    return Agent(model=GoalModel(), tools=[pay, send, note, ask_human])
