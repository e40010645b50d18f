"""Agent targets the CLI tests run as `tests/cli/agents.py:NAME`.

Behaviour that must differ between a first run and its resume is switched by
environment variables, so the same target can crash once and then finish:

* `POLYLOOP_TEST_EFFECTS`: a directory where `send_email` leaves one file per
  side effect (so a test can count them).
* `POLYLOOP_TEST_KILL`: when set, `send_email` SIGKILLs its own process right
  after its side effect, before its result is recorded.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

from polyloop import Agent, ModelOutput, ScriptedModel, tool

NASTY = "\x1b[31mred\x1b[0m [red]x[/red] [/x] \u202eevil\u202c \x07bell\r\x9b2J"


@tool(replay="safe")
def read_note(name: str) -> str:
    """Read a note (idempotent)."""
    return f"note {name}: buy milk"


@tool
def send_email(to: str, body: str, ctx=None) -> str:
    """Send an email (a side effect that must not repeat)."""
    effects = os.environ.get("POLYLOOP_TEST_EFFECTS")
    if effects:
        Path(effects).mkdir(parents=True, exist_ok=True)
        Path(effects, f"sent-{uuid.uuid4().hex}").write_text(f"{to}: {body}")
    if os.environ.get("POLYLOOP_TEST_KILL"):
        os.kill(os.getpid(), signal.SIGKILL)
    return f"sent to {to}"


@tool
def explode(reason: str) -> str:
    """A tool that always fails."""
    raise RuntimeError(f"boom: {reason}")


@tool(replay="safe")
async def slow_lookup(key: str) -> str:
    """A read that takes a long time."""
    marker = os.environ.get("POLYLOOP_TEST_STARTED")
    if marker:
        Path(marker).write_text("started")
    await asyncio.sleep(60)
    return f"value of {key}"


@tool(replay="safe")
def echo_nasty(text: str) -> str:
    """Return text full of terminal escapes and rich markup."""
    return f"{NASTY} {text}"


def _usage(i: int = 100, o: int = 20) -> dict[str, int]:
    return {"input_tokens": i, "output_tokens": o}


# Reads a note, then answers.
finishing = Agent(
    model=ScriptedModel(
        [
            {"tool": "read_note", "args": {"name": "shopping"}, "usage": _usage()},
            {"final": "You need milk.", "usage": _usage(150, 10)},
        ]
    ),
    tools=[read_note],
)


# Sends an email (a `never` tool), then answers.
def make_mailer() -> Agent:
    return Agent(
        model=ScriptedModel(
            [
                {"tool": "send_email", "args": {"to": "ops@example.com", "body": "hi"}, "usage": _usage()},
                {"final": "Email sent.", "usage": _usage(120, 5)},
            ]
        ),
        tools=[send_email],
    )


mailer = make_mailer()

# A tool that raises: its failure is an observation, and the run still finishes.
failing_tool = Agent(
    model=ScriptedModel(
        [{"tool": "explode", "args": {"reason": "test"}}, {"final": "The tool failed; giving up."}]
    ),
    tools=[explode],
)


class BrokenModel:
    """A model whose every call fails."""

    async def complete(self, messages, tools) -> ModelOutput:
        raise ConnectionError("model server unreachable")


# The model call fails once; with max_attempts=1 the run ends with reason `error`.
model_error = Agent(model=BrokenModel(), max_attempts=1)

# The model call fails; with attempts left the run stops (ModelCallError) and stays resumable.
model_down = Agent(model=BrokenModel(), max_attempts=3)

# Keeps calling a tool; the step budget ends the run.
looping = Agent(
    model=ScriptedModel([{"tool": "read_note", "args": {"name": str(i)}} for i in range(10)]),
    tools=[read_note],
    max_steps=2,
)

# Its only tool sleeps for a minute (for interrupt tests).
slow = Agent(
    model=ScriptedModel([{"tool": "slow_lookup", "args": {"key": "k"}}, {"final": "done"}]),
    tools=[slow_lookup],
)

# Everything it says is hostile to terminals.
nasty = Agent(
    model=ScriptedModel(
        [
            {"tool": "echo_nasty", "args": {"text": NASTY}, "text": NASTY},
            {"final": f"final {NASTY}"},
        ]
    ),
    tools=[echo_nasty],
)


# Sends a hostile email with a `never` tool (for the needs-operator rendering).
nasty_mailer = Agent(
    model=ScriptedModel(
        [{"tool": "send_email", "args": {"to": NASTY, "body": NASTY}}, {"final": NASTY}]
    ),
    tools=[send_email],
)

not_an_agent = 42


def raising_factory() -> Agent:
    raise RuntimeError("cannot build the agent")


class KillableModel(ScriptedModel):
    """A scripted model whose process dies inside the call when `POLYLOOP_TEST_KILL_MODEL` is set."""

    async def complete(self, messages, tools) -> ModelOutput:
        if os.environ.get("POLYLOOP_TEST_KILL_MODEL"):
            os.kill(os.getpid(), signal.SIGKILL)
        return await super().complete(messages, tools)


# Dies during its first model call when asked: resume re-issues the call as attempt 2.
model_crash = Agent(
    model=KillableModel(
        [
            {"tool": "read_note", "args": {"name": "a"}, "usage": _usage()},
            {"final": "ok", "usage": _usage(10, 1)},
        ]
    ),
    tools=[read_note],
)
