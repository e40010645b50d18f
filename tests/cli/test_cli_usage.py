"""Bad usage exits 2 with one clean line; help teaches the workflow; `python -m polyloop` works."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cli_helpers import clean_env, one_line_error
from support import forking

COMMANDS = ["run", "inspect", "mark-resolved", "resume", "verify"]


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["frobnicate"], id="unknown-command"),
        pytest.param(["run"], id="missing-target"),
        pytest.param(["run", "a.py:x", "--max-steps", "many"], id="not-a-number"),
        pytest.param(["inspect"], id="missing-id"),
        pytest.param(["inspect", "x", "--bogus"], id="unknown-option"),
        pytest.param(["resume", "a", "b"], id="extra-argument"),
        pytest.param(["verify", "no-such-dir"], id="missing-dir"),
        pytest.param(["verify", "a", "--dir", "b"], id="two-dirs"),
        pytest.param(["verify", ".", "--workers", "0"], id="zero-workers"),
        pytest.param(["mark-resolved", "x"], id="missing-result-id"),
        pytest.param(["--bogus"], id="unknown-global-option"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(cli, args):
    done = cli(*args, dir=False)
    assert done.code == 2, done
    line = one_line_error(done)
    assert "error:" in line
    assert done.stdout == ""


def test_bad_usage_in_json_mode_is_json_too(cli):
    done = cli("inspect", "--json", dir=False)
    assert done.code == 2
    assert done.json()["error"]["exit_code"] == 2
    one_line_error(done)


def test_top_level_help_teaches_the_workflow(cli):
    done = cli("--help", dir=False)
    assert done.code == 0
    text = done.stdout
    # The workflow starts with the demo that ships with PolyLoop (it works outside the repository).
    order = [text.index(f"polyloop {step}") for step in ("demo", "inspect", "mark-resolved", "resume")]
    assert order == sorted(order)
    assert "polyloop run " in text
    for word in ("kill -9", "POLYLOOP_DIR", "Exit codes", "130"):
        assert word in text
    listed = text[text.index("Commands:"):]
    assert [c for c in COMMANDS if c in listed] == COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_ending_with_an_example(cli, command):
    done = cli(command, "--help", dir=False)
    assert done.code == 0, done
    body = done.stdout[: done.stdout.index("Arguments:")]
    assert "Example:" in body
    assert f"polyloop {command}" in body[body.index("Example:"):]
    assert "Exit:" in body


def test_python_dash_m_polyloop_is_the_same_program(cli):
    proc = forking.run(
        [sys.executable, "-m", "polyloop", "--help"], capture_output=True, text=True, env=clean_env()
    )
    assert proc.returncode == 0
    assert proc.stdout.startswith("Usage: polyloop ")
    proc = forking.run(
        [sys.executable, "-m", "polyloop", "inspect", "nope", "--dir", str(cli.runs)],
        capture_output=True, text=True, env=clean_env(),
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


def test_no_command_shows_help(cli):
    done = cli(dir=False)
    assert done.code == 0
    assert "Usage: polyloop" in done.stdout


def test_version(cli):
    import polyloop

    done = cli("--version", dir=False)
    assert done.code == 0 and done.stdout.strip() == f"polyloop {polyloop.__version__}"


@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_a_reader_that_stops_early_ends_the_command_quietly(cli, json_mode):
    """`polyloop inspect RUN | head -1`: no error about the agent's code, no traceback."""
    import asyncio

    from polyloop import Agent, JsonlStore, ScriptedModel, tool

    @tool(replay="safe")
    async def look(query: str) -> str:
        """A tool with a long answer, so the report outgrows a pipe's buffer."""
        return "x" * 400

    steps = 400
    agent = Agent(model=ScriptedModel([{"tool": "look", "args": {"query": str(i)}} for i in range(steps)] + [{"final": "done"}]),
                  tools=[look], max_steps=steps + 1)
    asyncio.run(agent.run("a long run", run_id="long", store=JsonlStore(cli.runs)))
    from cli_helpers import console_script

    argv = [*console_script(), "inspect", "long", "--dir", str(cli.runs), *(["--json"] if json_mode else [])]
    proc = subprocess.Popen(argv, cwd=cli.cwd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away with most of the report unread
    err = proc.stderr.read().decode()
    proc.stderr.close()
    code = proc.wait(timeout=60)
    assert first.strip()
    assert err == "", err
    assert code in (0, 1)


@pytest.mark.parametrize("args", [["worker"], ["submit", "a.py:agent", "--goal", "g"]], ids=["worker", "submit"])
def test_the_queue_commands_say_why_a_directory_will_not_do(cli, args):
    done = cli(*args, "--dir", "runs", dir=False)
    assert done.code == 2, done
    line = one_line_error(done)
    assert "--dir runs names a directory" in line and "--store postgresql://" in line
