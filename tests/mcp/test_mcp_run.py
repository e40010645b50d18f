"""An agent using a real MCP server (the SDK, over stdio) in this process: results, failures, records, lifecycle."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polyloop import Agent, JsonlStore, ScriptedModel, tool
from polyloop.mcp import MCPServer, MCPServerError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for `support`
from support import forking  # noqa: E402
from support.cli import clean_env, console_script, polyloop_in_process  # noqa: E402

SERVER = str(Path(__file__).resolve().parent / "effect_server.py")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_run_calls_the_servers_tools_as_its_own_and_records_where_each_policy_came_from(tmp_path):
    env = {"EFFECT_FILE": str(tmp_path / "effects"), "EFFECT_PIDS": str(tmp_path / "pids")}
    server = MCPServer("fx", command=[sys.executable, SERVER], env=env, trust=True,
                       overrides={"refuse": {"replay": "safe"}})
    script = [
        {"tool": "write_effect", "args": {"key": 5}},  # does not fit the schema: never reaches the server
        {"tool": "put_value", "args": {"key": "k", "value": "v"}},
        {"tool": "refuse", "args": {"reason": "no"}},  # isError: a failure the model reads
        {"tool": "reject", "args": {"reason": "bad"}},  # a JSON-RPC error answer: a failure too
        {"tool": "read_effects", "args": {}},
        {"final": "done"},
    ]
    agent = Agent(model=ScriptedModel(script), tools=[server])
    assert server.starts == 0  # declared, not started: started on first need
    result = asyncio.run(agent.run("use mcp", run_id="r", store=JsonlStore(tmp_path)))
    assert result.reason == "final_answer"

    log = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    tools = {t["name"]: t for t in log[0]["config"]["tools"]}
    assert tools["write_effect"]["replay"] == "never" and tools["read_effects"]["replay"] == "safe"
    assert tools["put_value"]["mcp"]["policy"] == "annotations" and tools["put_value"]["replay"] == "safe"
    assert tools["refuse"]["mcp"]["policy"] == "override"
    assert tools["read_effects"]["mcp"]["annotations"] == {"readOnlyHint": True}
    done = [r for r in log if r["record"] == "step_completed"]
    assert done[0]["result_id"] is None and "invalid arguments for tool 'write_effect'" in done[0]["observation"]
    assert done[1]["is_error"] is False and "put_value done" in done[1]["observation"]
    assert done[2]["is_error"] is True and "refused: no" in done[2]["observation"]
    assert done[3]["is_error"] is True and "rejected: bad (JSON-RPC error -32602)" in done[3]["observation"]
    assert done[4]["observation"] == "1 effects"
    effects = [json.loads(line) for line in (tmp_path / "effects").read_text().splitlines()]
    key = next(r["idempotency_key"] for r in log if r["record"] == "intent" and r.get("tool") == "put_value")
    assert [e["tool"] for e in effects] == ["put_value"] and effects[0]["idempotency_key"] == key

    pid = int((tmp_path / "pids").read_text().split()[0])
    assert not _alive(pid)  # closed when the run stopped

    shown = polyloop_in_process("inspect", "r", "--dir", str(tmp_path))
    assert shown.code == 0, shown.stderr
    assert "put_value" in shown.stdout and "from annotations (trusted server, idempotentHint" in shown.stdout
    assert "from override" in shown.stdout


async def test_a_server_that_cannot_start_is_an_error_naming_its_command(tmp_path):
    server = MCPServer("ghost", command=[str(tmp_path / "no-such-server"), "--flag"])
    agent = Agent(model=ScriptedModel([{"final": "x"}]), tools=[server])
    with pytest.raises(MCPServerError, match=r"MCP server 'ghost' could not start: \S*no-such-server --flag"):
        await agent.run("x", run_id="r", store=JsonlStore(tmp_path))
    assert not (tmp_path / "r.jsonl").exists()


def test_the_command_line_says_so_in_one_line(tmp_path):
    target = tmp_path / "agent.py"
    target.write_text(
        "from polyloop import Agent, ScriptedModel\nfrom polyloop.mcp import MCPServer\n"
        "agent = Agent(model=ScriptedModel([{'final': 'x'}]),"
        " tools=[MCPServer('ghost', command='/no/such/mcp-server --stdio')])\n"
    )
    done = polyloop_in_process("run", f"{target}:agent", "--dir", str(tmp_path / "runs"))
    assert done.code == 1, done.stderr
    assert "MCP server 'ghost' could not start: /no/such/mcp-server --stdio" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_server_that_writes_what_is_not_json_rpc_is_said_in_lines_without_a_traceback(tmp_path):
    # A server that prints a banner on stdout: the SDK logs each bad line with its traceback,
    # which logging's last resort printed raw in the middle of the command's output.
    target = tmp_path / "agent.py"
    target.write_text(
        "from polyloop import Agent, ScriptedModel\nfrom polyloop.mcp import MCPServer\n"
        "agent = Agent(model=ScriptedModel([{'final': 'x'}]), tools=[MCPServer('chatty', command='echo hello')])\n"
    )
    done = forking.run([*console_script(), "run", f"{target}:agent", "--dir", str(tmp_path / "runs")],
                       env=clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "pydantic" not in done.stderr, done.stderr
    assert "MCP SDK: Failed to parse JSONRPC message from server (ValidationError)" in done.stderr, done.stderr
    assert "MCP server 'chatty' could not start: echo hello" in done.stderr


def test_two_servers_listing_the_same_tool_name_are_a_one_line_error_that_says_prefix(tmp_path):
    target = tmp_path / "agent.py"
    target.write_text(
        "import sys\nfrom polyloop import Agent, ScriptedModel\nfrom polyloop.mcp import MCPServer\n"
        f"fx = [sys.executable, {SERVER!r}]\n"
        "agent = Agent(model=ScriptedModel([{'final': 'x'}]),"
        " tools=[MCPServer('a', command=fx), MCPServer('b', command=fx)])\n"
    )
    done = forking.run([*console_script(), "run", f"{target}:agent", "--dir", str(tmp_path / "runs")],
                       env=clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr  # bad input: nothing ran
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert ("two tools share the name 'put_value' (one from MCP server 'a' and one from MCP server 'b'): "
            "give a server a prefix= to keep them apart") in done.stderr


def test_a_stdio_server_starts_where_stderr_is_no_file(tmp_path):
    # A notebook's or a test's captured stderr has no file descriptor to give the server's stderr:
    # the SDK failed the start with a bare "fileno". A fresh interpreter: the SDK binds its default
    # stderr when first imported.
    code = (
        "import asyncio, contextlib, io, sys\n"
        "from polyloop import Agent, JsonlStore, ScriptedModel\nfrom polyloop.mcp import MCPServer\n"
        f"server = MCPServer('fx', command=[sys.executable, {SERVER!r}], env={{'EFFECT_FILE': 'effects'}})\n"
        "agent = Agent(model=ScriptedModel([{'tool': 'read_effects', 'args': {}}, {'final': 'done'}]), tools=[server])\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        "    print(asyncio.run(agent.run('x', run_id='r', store=JsonlStore('runs'))).reason)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "final_answer", done.stderr
    assert '"observation":"0 effects"' in (tmp_path / "runs" / "r.jsonl").read_text()


def test_a_server_restarted_mid_run_with_a_tool_upgraded_to_read_only_gets_no_replay_for_it(tmp_path):
    # Server a dies idle and comes back claiming its destructive write_effect is read-only: its calls are
    # refused (nothing sent) for the rest of the run. A lost answer of server b's safe read, replayed in the
    # same pass, took a's new listing without any check: write_effect ran with replay "safe" in its intent.
    upgrade = tmp_path / "upgrade"

    @tool(replay="safe")
    def restart_upgraded() -> str:
        """Make server a come back upgraded, once it has died."""
        upgrade.touch()
        time.sleep(1.5)
        return "ok"

    fx = [sys.executable, SERVER]
    a = MCPServer("a", command=fx, trust=True, env={"EFFECT_FILE": str(tmp_path / "fa"), "EFFECT_CUE": str(tmp_path / "cue_a"),
                                                    "EFFECT_UPGRADE": str(upgrade)})
    b = MCPServer("b", command=fx, trust=True, prefix="b_", only=["read_effects"],
                  env={"EFFECT_FILE": str(tmp_path / "fb"), "EFFECT_CUE": str(tmp_path / "cue_b")})
    (tmp_path / "cue_a").write_text("die-idle:read_effects")
    (tmp_path / "cue_b").write_text("die-after:read_effects")
    script = [{"tool": "read_effects", "args": {}}, {"tool": "restart_upgraded", "args": {}},
              {"tool": "write_effect", "args": {"key": "x"}}, {"tool": "b_read_effects", "args": {}},
              {"tool": "write_effect", "args": {"key": "y"}}, {"final": "done"}]
    agent = Agent(model=ScriptedModel(script), tools=[a, b, restart_upgraded])
    result = asyncio.run(agent.run("x", run_id="r", store=JsonlStore(tmp_path)))
    assert result.reason == "final_answer"
    log = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    intents = [r for r in log if r["record"] == "intent" and r.get("tool") == "write_effect"]
    assert len(intents) == 2 and {r["replay"] for r in intents} == {"never"}, intents
    assert [r["tool"] for r in log if r["record"] == "intent" and r["kind"] == "action"].count("b_read_effects") == 2
    assert not (tmp_path / "fa").exists()  # neither write reached the upgraded server
    done = [r for r in log if r["record"] == "step_completed"]
    assert [("its tool list changed" in d["observation"]) for d in done if d["is_error"]] == [True, True]
