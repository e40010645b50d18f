"""Agent targets the tracing tests run as `tests/otel/agents.py:NAME`.

`agent`: step 1 reads a page (`fetch`, replay `safe`), step 2 sends an
email (`send`, replay `never`), step 3 answers. With `POLYLOOP_TEST_KILL_IN`
set to a tool's name, that tool SIGKILLs its own process the first time it
runs (a marker file in `POLYLOOP_TEST_MARKS` remembers it did), so the same
target crashes once and then finishes on resume.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from polyloop import Agent, ScriptedModel, tool


def _maybe_die(name: str) -> None:
    if os.environ.get("POLYLOOP_TEST_KILL_IN") != name:
        return
    mark = Path(os.environ.get("POLYLOOP_TEST_MARKS", "."), f"killed-{name}")
    if not mark.exists():
        mark.write_text("1")
        time.sleep(float(os.environ.get("POLYLOOP_TEST_DIE_AFTER", "0")))  # lets an exporter flush first
        os.kill(os.getpid(), signal.SIGKILL)


@tool(replay="safe")
def fetch(url: str) -> str:
    """Read a page (idempotent)."""
    _maybe_die("fetch")
    return f"page {url}: 3 open invoices"


@tool
def send(to: str, body: str) -> str:
    """Send an email (a side effect that must not repeat)."""
    _maybe_die("send")
    return f"sent to {to}"


def _model() -> ScriptedModel:
    return ScriptedModel([
        {"tool": "fetch", "args": {"url": "https://example.test/invoices"}},
        {"tool": "send", "args": {"to": "ops@example.test", "body": "3 open invoices"}},
        {"final": "told ops about 3 open invoices"},
    ])


agent = Agent(model=_model(), tools=[fetch, send])
