"""The PolyLoop demo: an agent whose tools do real work, and a crash switch.

It ships in the package, so it runs wherever PolyLoop is installed, with no
network and no API key: the model is a `ScriptedModel` (a fixed list of
decisions), and the tools really read, write and run shell commands in a
scratch directory, `$POLYLOOP_DEMO_DIR/<run id>/` (default
`./demo-workspace/<run id>/`, relative to the current directory: resume from
the same directory, or set `POLYLOOP_DEMO_DIR` to an absolute path).

    polyloop demo                                  # one run, start to finish
    polyloop run polyloop.examples.demo:agent --run-id notes-1 --goal "write up the notes"

The tools declare what a replay after a crash may do:

* `list_files` and `read_file` are `replay="safe"`: reading twice is harmless,
  so after a crash PolyLoop simply runs them again.
* `write_file` and `run_shell` use the default, `never`: if a crash leaves
  their outcome unknown, PolyLoop stops and asks an operator.

The crash switch: with `POLYLOOP_DEMO_CRASH=1` (or `=write_file`, or
`=run_shell`) that tool kills its own process with SIGKILL right after its
side effect and before PolyLoop can record the result — the worst moment
for a crash. It fires once per run. The README and the tutorial walk through
run, crash, `inspect`, `mark-resolved`, `resume`, `verify`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from polyloop import Agent, ScriptedModel, ToolContext, tool

SYSTEM = (
    "You work in a scratch directory with four tools. Look before you write, "
    "check what you wrote, and answer in one sentence when you are done."
)

NOTES = """\
Meeting notes, Tuesday
- decided: ship the resumable runner on Friday
- TODO: write the crash walkthrough
- TODO: add a SQLite store example
- decided: default replay policy stays `never`
"""

# The decisions the scripted model plays back, one per step. Output i answers
# the step whose history holds i earlier assistant turns, so a resumed run
# sees exactly the same decisions as an uninterrupted one.
SCRIPT = [
    {
        "text": "First, see what is already in the workspace.",
        "tool": "list_files",
        "args": {},
        "usage": {"input_tokens": 182, "output_tokens": 14},
    },
    {
        "text": "The workspace is empty. Write the meeting notes.",
        "tool": "write_file",
        "args": {"path": "notes.txt", "content": NOTES},
        "usage": {"input_tokens": 231, "output_tokens": 77},
    },
    {
        "text": "Read the notes back to check the write.",
        "tool": "read_file",
        "args": {"path": "notes.txt"},
        "usage": {"input_tokens": 329, "output_tokens": 19},
    },
    {
        "text": "Collect the TODO lines into todo.txt and count them.",
        "tool": "run_shell",
        "args": {"command": "grep TODO notes.txt > todo.txt && wc -l < todo.txt"},
        "usage": {"input_tokens": 451, "output_tokens": 31},
    },
    {
        "final": "Wrote notes.txt and collected its 2 TODOs in todo.txt.",
        "usage": {"input_tokens": 497, "output_tokens": 16},
    },
]

# What `polyloop demo` asks for when no --goal is given.
GOAL = "write up the notes"

CRASH_ENV = "POLYLOOP_DEMO_CRASH"
_CRASH_MARK = ".crash-switch-fired"


def workspace(run_id: str) -> Path:
    """The run's scratch directory, created on demand."""
    root = Path(os.environ.get("POLYLOOP_DEMO_DIR") or "demo-workspace")
    path = root / run_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def _inside(ctx: ToolContext, name: str) -> Path:
    base = workspace(ctx.run_id).resolve()
    path = (base / name).resolve()
    if path != base and base not in path.parents:
        raise ValueError(f"{name!r} is outside the workspace")
    return path


def _say(ctx: ToolContext, message: str) -> None:
    print(f"  step {ctx.step}: {message}", file=sys.stderr, flush=True)


def _crash_switch(ctx: ToolContext, tool_name: str, did: str) -> None:
    """Kill this process with SIGKILL if the crash switch names this tool (once per run)."""
    wanted = os.environ.get(CRASH_ENV, "")
    if ("write_file" if wanted == "1" else wanted) != tool_name:
        return
    mark = workspace(ctx.run_id) / _CRASH_MARK
    if mark.exists():
        return
    mark.write_text(f"{tool_name} step {ctx.step}\n")
    print(
        f"\n  {CRASH_ENV} is set: {tool_name} {did}, and now this process kills itself "
        "with SIGKILL\n  before PolyLoop can record the result. "
        f"Next: polyloop inspect {ctx.run_id}\n",
        file=sys.stderr,
        flush=True,
    )
    os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


@tool(replay="safe")
def list_files(ctx: ToolContext) -> str:
    """List the files in the workspace, one per line with its size in bytes."""
    base = workspace(ctx.run_id)
    names = sorted(p for p in base.iterdir() if p.is_file() and not p.name.startswith("."))
    _say(ctx, f"list_files -> {len(names)} file(s)")
    return "\n".join(f"{p.name} ({p.stat().st_size} bytes)" for p in names) or "(the workspace is empty)"


@tool(replay="safe")
def read_file(path: str, ctx: ToolContext) -> str:
    """Return the text of a file in the workspace."""
    text = _inside(ctx, path).read_text(encoding="utf-8")
    _say(ctx, f"read_file {path} -> {len(text)} characters")
    return text


@tool
def write_file(path: str, content: str, ctx: ToolContext) -> str:
    """Create or replace a file in the workspace with the given text."""
    target = _inside(ctx, path)
    target.write_text(content, encoding="utf-8")
    size = len(content.encode())
    _say(ctx, f"write_file {path} -> wrote {size} bytes")
    _crash_switch(ctx, "write_file", f"wrote {path}")
    return f"wrote {size} bytes to {path}"


@tool
def run_shell(command: str, ctx: ToolContext) -> str:
    """Run a shell command in the workspace; returns its exit code and output."""
    done = subprocess.run(
        command,
        shell=True,
        cwd=workspace(ctx.run_id),
        capture_output=True,
        text=True,
        timeout=30,
    )
    _say(ctx, f"run_shell {command!r} -> exit {done.returncode}")
    _crash_switch(ctx, "run_shell", f"ran {command!r}")
    out = (done.stdout + done.stderr).strip()
    return f"exit {done.returncode}\n{out}" if out else f"exit {done.returncode}"


TOOLS = [list_files, read_file, write_file, run_shell]

agent = Agent(model=ScriptedModel(SCRIPT), tools=TOOLS, system=SYSTEM, max_steps=10)
