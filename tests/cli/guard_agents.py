"""Agents with guarded tools for the CLI tests (targets `guard_agents.py:NAME`)."""

from __future__ import annotations

import os
from pathlib import Path

from polyloop import Agent, ScriptedModel, tool

SCRIPT = [{"tool": "publish", "args": {"page": "home"}}, {"final": "published"}]


@tool(irreversible=True)
def publish(page: str, ctx) -> str:
    """Publish a page (cannot be taken back)."""
    out = Path(os.environ["GUARD_TEST_DIR"])
    out.mkdir(exist_ok=True)
    (out / f"{page}.html").write_text("<h1>\\x1b[31mhello</h1>")
    return f"published {page}"


@publish.verify
def _(args, result, ctx):
    return "the CDN still serves the old \x1b[31mpage"  # a control character: shown escaped


@publish.rollback(kind="alert")
def _(args, result, ctx):
    raise AssertionError("a rollback of kind alert is never called")


def publisher() -> Agent:
    # This test is about alerts: opt out of approving the irreversible tool, on the record.
    return Agent(model=ScriptedModel(SCRIPT), tools=[publish], approve_irreversible=False)
