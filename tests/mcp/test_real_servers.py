"""Published MCP servers as real subprocesses: `mcp-server-time` (read-only tools) and `mcp-server-git`
on a scratch repository (writes: `git_add`, `git_commit`), with the PolyLoop process SIGKILLed after
a tool answered and before its result was recorded."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from polyloop import Agent, JsonlStore, ScriptedModel
from polyloop.mcp import MCPServer

from scenario import Scenario

TIME = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]


@pytest.mark.slow
def test_the_time_servers_read_only_tools_are_safe_only_when_it_is_trusted(tmp_path):
    trusted = MCPServer("time", command=TIME, trust=True)
    stranger = MCPServer("time2", command=TIME, prefix="untrusted_", only=["get_current_time"])
    script = [{"tool": "get_current_time", "args": {"timezone": "UTC"}},
              {"tool": "untrusted_get_current_time", "args": {"timezone": "Europe/Paris"}}, {"final": "ok"}]
    agent = Agent(model=ScriptedModel(script), tools=[trusted, stranger])
    result = asyncio.run(agent.run("time", run_id="r", store=JsonlStore(tmp_path)))
    assert result.reason == "final_answer"
    policies = {t.name: t.replay for t in agent.tools}
    assert policies["get_current_time"] == "safe" and policies["convert_time"] == "safe"
    assert policies["untrusted_get_current_time"] == "never" and "untrusted_convert_time" not in policies
    text = (tmp_path / "r.jsonl").read_text()
    assert "Europe/Paris" in text and '"readOnlyHint":true' in text


def _repo(path) -> str:
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "root"], check=True)
    (path / "a.txt").write_text("a\n")
    return str(path)


def _commits(repo: str) -> int:
    out = subprocess.run(["git", "-C", repo, "rev-list", "--count", "HEAD"], capture_output=True, text=True, check=True)
    return int(out.stdout)


def _git_script(repo: str) -> list:
    return [["git_add", {"repo_path": repo, "files": ["a.txt"]}],
            ["git_commit", {"repo_path": repo, "message": "add a"}]]


def test_a_git_commit_whose_answer_was_not_recorded_is_unknown_and_never_committed_twice(tmp_path):
    repo = _repo(tmp_path / "repo")
    s = Scenario(tmp_path)
    script = _git_script(repo)
    env = {"MCP_REAL": f"git:{repo}", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    s.env.update(env)
    done = s.child("r", script, kill_at="before:step_completed:2")  # git_commit answered, not recorded
    assert done.returncode == -9, done.stderr
    assert _commits(repo) == 2
    again = s.polyloop("resume", "r", script=script)
    assert again.returncode == 3, again.stderr
    assert "git_commit" in again.stderr and "s2-a1" in again.stderr
    doc = s.inspect("r")
    assert {e["id"]: e["state"] for e in doc["executions"]}["s2-a1"] == "unknown"
    assert _commits(repo) == 2
    settled = s.polyloop("mark-resolved", "r", "s2-a1", "--executed", "--reason", "git log shows it")
    assert settled.returncode == 0, settled.stderr
    finished = s.polyloop("resume", "r", script=script)
    assert finished.returncode == 0, finished.stderr
    assert _commits(repo) == 2


@pytest.mark.slow
def test_a_trusted_git_server_replays_its_idempotent_add_and_commits_once(tmp_path):
    repo = _repo(tmp_path / "repo")
    s = Scenario(tmp_path, trust=True)
    s.env.update({"MCP_REAL": f"git:{repo}", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                  "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"})
    script = _git_script(repo)
    done = s.child("r", script, kill_at="before:step_completed:1")  # git_add answered, not recorded
    assert done.returncode == -9, done.stderr
    resumed = s.polyloop("resume", "r", script=script)
    assert resumed.returncode == 0, resumed.stderr  # git_add is idempotent and not destructive: replayed
    assert _commits(repo) == 2


@pytest.mark.slow
@pytest.mark.parametrize("trust", [True, False], ids=["trusted", "untrusted"])
def test_a_time_call_cut_off_before_its_record_is_replayed_only_when_trusted(tmp_path, trust):
    s = Scenario(tmp_path, trust=trust)
    s.env["MCP_REAL"] = "time"
    script = [["get_current_time", {"timezone": "UTC"}]]
    done = s.child("r", script, kill_at="before:step_completed:1")
    assert done.returncode == -9, done.stderr
    resumed = s.polyloop("resume", "r", script=script)
    assert resumed.returncode == (0 if trust else 3), resumed.stderr
