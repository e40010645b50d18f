"""Checkpoint validity and retry budgets with real processes, real files and real SIGKILL.

The agent (`validity_agent.py`) kills its own process inside a tool, as an
out-of-memory kill or a segfault would; every command after that is the
`polyloop` command line, run as an operator runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import forking

AGENT = f"{Path(__file__).resolve().parent / 'validity_agent.py'}:agent"
TRACEBACK = "Traceback (most recent call last)"


class Operator:
    """Runs `polyloop` in its own process, in one scenario's directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs = root / "runs"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "AGENT_", "DIE_AT"))}
        self.env["POLYLOOP_DIR"] = str(self.runs)

    def __call__(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        proc = forking.run(
            [sys.executable, "-m", "polyloop", *args],
            cwd=self.root, env={**self.env, **env}, capture_output=True, text=True, timeout=120,
        )
        assert TRACEBACK not in proc.stderr, proc.stderr
        return proc

    def log(self, run_id: str) -> list[dict]:
        return [json.loads(line) for line in (self.runs / f"{run_id}.jsonl").read_text().splitlines() if line]

    def raw(self, run_id: str) -> bytes:
        return (self.runs / f"{run_id}.jsonl").read_bytes()

    def inspect(self, run_id: str) -> dict:
        proc = self("inspect", run_id, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture
def op(tmp_path: Path) -> Operator:
    return Operator(tmp_path)


def killed_in_step_2(op: Operator, run_id: str, *extra: str, **env: str) -> None:
    proc = op("run", AGENT, "--run-id", run_id, "--goal", "g", *extra, DIE_AT="2", **env)
    assert proc.returncode == -9, proc.stderr  # SIGKILL, inside the step tool of step 2


def test_a_changed_input_file_refuses_the_resume_then_an_accepted_change_continues(op):
    data = op.root / "data"
    data.mkdir()
    (data / "contract.txt").write_text("version 1")
    (data / "annex").mkdir()
    (data / "annex" / "a.txt").write_text("annex")
    for bad in ("contract=data/missing.txt", "contract", "=data/contract.txt"):
        proc = op("run", AGENT, "--run-id", "v", "--goal", "g", "--input", bad)
        assert proc.returncode == 2 and "--input" in proc.stderr, proc.stderr
        assert not op.runs.exists() or not list(op.runs.iterdir())  # refused before anything was written
    killed_in_step_2(op, "v", "--input", "contract=data/contract.txt", "--input", "annex=data/annex")
    started = op.log("v")[0]["config"]
    assert set(started["inputs"]) == {"contract", "annex"} and started["logic_version"] == "1"

    (data / "contract.txt").write_text("version 2")
    before = op.raw("v")
    proc = op("resume", "v")
    assert proc.returncode == 4, proc.stderr
    assert "input 'contract'" in proc.stderr and "annex" not in proc.stderr
    assert "--accept-changes" in proc.stderr and "new run id" in proc.stderr
    assert op.raw("v") == before  # refused before anything ran: not a byte written

    report = op.inspect("v")
    assert report["validity"]["valid"] is False
    assert [d["name"] for d in report["validity"]["differences"]] == ["contract"]
    assert report["next"].startswith("refuse (exit code 4)")

    assert op("resume", "v", "--accept-changes").returncode == 2  # a reason is required
    proc = op("resume", "v", "--accept-changes", "--reason", "v2 is the signed one", "--by", "alice")
    assert proc.returncode == 0, proc.stderr
    log = op.log("v")
    (acc,) = [r for r in log if r["record"] == "checkpoint_accepted"]
    assert (acc["by"], acc["reason"]) == ("alice", "v2 is the signed one")
    (diff,) = acc["differences"]
    assert (diff["what"], diff["name"]) == ("input", "contract") and diff["recorded"] != diff["now"]
    assert log[-1]["record"] == "run_finished" and log[-1]["reason"] == "final_answer"

    report = op.inspect("v")
    assert report["overrides"][0]["record"] == "checkpoint_accepted"
    text = op("inspect", "v").stdout
    assert "overrides" in text and "alice" in text and "v2 is the signed one" in text
    assert op("verify", str(op.runs)).returncode == 0


def test_a_bumped_logic_version_refuses_and_names_both_versions(op):
    killed_in_step_2(op, "lv")
    before = op.raw("lv")
    proc = op("resume", "lv", AGENT_VERSION="2")
    assert proc.returncode == 4, proc.stderr
    assert "logic version changed from '1' to '2'" in proc.stderr
    assert op.raw("lv") == before
    proc = op("resume", "lv", AGENT_SYSTEM="be brief")  # the configuration is compared too
    assert proc.returncode == 4 and "system prompt" in proc.stderr
    assert op("resume", "lv").returncode == 0  # the agent as it was: valid, and it finishes


def test_an_unloadable_target_is_not_checked_by_inspect(op):
    killed_in_step_2(op, "nt")
    report = op.inspect("nt")
    assert report["validity"] == {"valid": True, "differences": [], "not_checked": None}
    # The same run read where its target cannot be imported: said so, not guessed.
    log = op.runs / "nt.jsonl"
    first, rest = log.read_text().split("\n", 1)
    started = json.loads(first)
    started["target"] = str(op.root / "gone.py") + ":agent"
    log.write_text(json.dumps(started) + "\n" + rest)
    report = op.inspect("nt")
    assert report["validity"]["valid"] is None and "gone.py" in report["validity"]["not_checked"]
    assert "not checked" in op("inspect", "nt").stdout


def test_a_crash_loop_stops_at_its_budget_and_an_operator_lifts_it(op):
    killed_in_step_2(op, "cl")
    for n in range(1, 4):  # the budget is 3: three resumes die where the run died
        proc = op("resume", "cl", DIE_AT="2")
        assert proc.returncode == -9, proc.stderr
        assert sum(r["record"] == "resumed" for r in op.log("cl")) == n
    before = op.raw("cl")
    proc = op("resume", "cl", DIE_AT="2")
    assert proc.returncode == 3, proc.stderr
    assert "crash loop" in proc.stderr and "--accept-crash-loop" in proc.stderr
    assert op.raw("cl") == before

    report = op.inspect("cl")
    assert report["status"] == "needs_operator"
    (wait,) = report["waiting"]
    assert wait["kind"] == "crash_loop" and wait["id"] == "cl"
    assert (wait["tool"], wait["args"]) == ("step", {"n": 2})
    assert report["budgets"]["crash_loop"] == {"resumes": 3, "without_progress": 3, "limit": 3}
    ls = json.loads(op("ls", "--json").stdout)
    assert "crash_loop" in json.dumps(ls)

    proc = op("resume", "cl", "--accept-crash-loop", "--reason", "the OOM is fixed")
    assert proc.returncode == 0, proc.stderr
    log = op.log("cl")
    (lift,) = [r for r in log if r["record"] == "crash_loop_accepted"]
    assert lift["resumes"] == 3 and lift["reason"] == "the OOM is fixed" and "@" in lift["by"]
    assert log[-1]["reason"] == "final_answer"
    assert op.inspect("cl")["overrides"][0]["record"] == "crash_loop_accepted"
    assert op("verify", str(op.runs)).returncode == 0


def test_a_tool_failing_its_budget_in_a_row_ends_the_run(op):
    proc = op("run", AGENT, "--run-id", "tf", "--goal", "g", AGENT_SCRIPT="fail")
    assert proc.returncode == 1, proc.stderr
    assert "flaky" in proc.stderr and "3 times in a row" in proc.stderr
    log = op.log("tf")
    assert log[-1]["record"] == "run_finished" and log[-1]["reason"] == "tool_failures"
    assert sum(r["record"] == "step_completed" and r["is_error"] for r in log) == 3
    report = op.inspect("tf")
    assert report["status"] == "finished" and report["reason"] == "tool_failures"
    flaky = next(t for t in report["budgets"]["tool_failures"] if t["tool"] == "flaky")
    assert flaky == {"tool": "flaky", "in_a_row": 3, "limit": 3}

    proc = op("run", AGENT, "--run-id", "tf2", "--goal", "g", AGENT_SCRIPT="fragile")  # @tool(max_failures=2)
    assert proc.returncode == 1
    assert op.log("tf2")[-1]["steps"] == 2
