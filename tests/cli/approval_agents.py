"""Agents whose tool calls wait for a person, for the CLI tests (targets `approval_agents.py:NAME`)."""

from __future__ import annotations

import os
import signal
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


@tool
def note(text: str, ctx: ToolContext) -> str:
    """Write a note (`never`: an effect that must not repeat); waits for nobody."""
    out = Path(os.environ["APPROVAL_TEST_EFFECTS"])
    out.mkdir(exist_ok=True)
    (out / f"{ctx.result_id}-note-{text}").write_text(ctx.idempotency_key)
    return f"noted {text}"


def _step_of(*calls: tuple[str, dict]) -> Agent:
    script = [{"calls": [{"tool": t, "args": a} for t, a in calls]}, {"final": "done"}]
    return Agent(model=ScriptedModel(script), tools=[note, pay, ask_human])


def note_and_pay() -> Agent:
    """One step of two calls: a note that waits for nobody, a payment that waits for approval."""
    return _step_of(("note", {"text": "hello"}), ("pay", {"amount": 500, "to": "bob"}))


def two_payments() -> Agent:
    """One step of three calls: two payments that wait for approval around a note."""
    return _step_of(("pay", {"amount": 500, "to": "bob"}), ("note", {"text": "hello"}),
                    ("pay", {"amount": 600, "to": "cy"}))


def ask_and_note() -> Agent:
    """One step of two calls: a question for a person, and a note."""
    return _step_of(("ask_human", {"question": "which colour?"}), ("note", {"text": "hello"}))


# Agents whose checkpoint a test can change under a waiting call: each first
# writes a product (`draft.txt`), then calls what waits; the logic version is
# $APPROVAL_TEST_VERSION (default "1"). `post` is `never` replay and, with
# $APPROVAL_TEST_KILL set, dies after its effect, before its result.


@tool(replay="safe")
def draft(ctx: ToolContext):
    """Write a draft: a product the run keeps."""
    return ctx.artifacts.write("draft.txt", "pay bob 500")


@tool
def post(text: str) -> str:
    """Post a message (a side effect that must not repeat)."""
    if os.environ.get("APPROVAL_TEST_KILL"):
        os.kill(os.getpid(), signal.SIGKILL)
    return "posted"


def _versioned(call: dict, tools: list) -> Agent:
    script = [{"tool": "draft", "args": {}}, call, {"final": "done"}]
    version = os.environ.get("APPROVAL_TEST_VERSION", "1")
    return Agent(model=ScriptedModel(script), tools=[draft, *tools], logic_version=version)


def drafting_payer() -> Agent:
    return _versioned({"tool": "pay", "args": {"amount": 500, "to": "bob"}}, [pay])


def drafting_asker() -> Agent:
    return _versioned({"tool": "ask_human", "args": {"question": "which colour?"}}, [ask_human])


def drafting_poster() -> Agent:
    return _versioned({"tool": "post", "args": {"text": "hello"}}, [post])
