"""examples/anthropic_agent.py: an LLM agent on AnthropicModel, run through the CLI against the fake server."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from example_helpers import Runner

pytest.importorskip("anthropic")

from polyloop.testing import FakeAnthropicServer, FakeResponse  # noqa: E402

GOAL = "write meeting notes to notes.txt, then collect the TODO lines in todo.txt"


def _records(workdir: Path, run_id: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in (workdir / "runs" / f"{run_id}.jsonl").read_text().splitlines()]


def test_python_examples_anthropic_agent_fake_runs_over_a_socket(python: Runner, workdir: Path) -> None:
    done = python("anthropic_agent.py", "--fake", "--run-id", "claude", "--dir", "runs")
    assert done.returncode == 0, done.stderr
    assert "final_answer after 5 steps" in done.stdout
    assert "the fake server answered 5 Messages API requests" in done.stdout
    outputs = [r["output"] for r in _records(workdir, "claude") if r["record"] == "model_call_result"]
    assert [o["stop_reason"] for o in outputs] == ["tool_use"] * 4 + ["end_turn"]  # type: ignore[index]
    assert [c["name"] for c in outputs[2]["tool_calls"]] == ["read_file", "list_files"]  # type: ignore[index]


def test_both_calls_of_the_parallel_step_run(python: Runner, workdir: Path) -> None:
    done = python("anthropic_agent.py", "--fake", "--run-id", "claude", "--dir", "runs")
    assert done.returncode == 0, done.stderr
    tools = [r["tool"] for r in _records(workdir, "claude") if r["record"] == "intent" and r["kind"] == "action"]
    assert tools == ["list_files", "write_file", "read_file", "list_files", "run_shell"]


def test_a_crash_and_an_overload_through_the_cli(
    polyloop: Runner, workdir: Path, load_example: Callable[[str], ModuleType]
) -> None:
    answers = [FakeResponse.from_json(out) for out in load_example("anthropic_agent").SCRIPT]
    with FakeAnthropicServer([FakeResponse.error(529, "Overloaded"), *answers], api_key="sk-ant-test") as server:
        env = dict(ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="sk-ant-test", POLYLOOP_MODEL="fake-model")
        run = ["run", "examples/anthropic_agent.py:agent", "--run-id", "claude", "--goal", GOAL]
        crashed = polyloop(*run, env=env | {"POLYLOOP_DEMO_CRASH": "write_file"})
        assert (crashed.returncode, len(server.message_requests)) == (-signal.SIGKILL, 3), crashed.stderr  # 529, 2 steps

        stopped = polyloop("resume", "claude", env=env)
        assert stopped.returncode == 3, stopped.stderr
        settled = polyloop("mark-resolved", "claude", "s2-a1", "--executed", "--reason", "checked", "--observation", "wrote 188 bytes to notes.txt")
        assert settled.returncode == 0, settled.stderr
        resumed = polyloop("resume", "claude", env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert "Wrote notes.txt and collected its 2 TODOs" in resumed.stdout

    assert len(server.message_requests) == 6  # resume asked only for steps 3-5
    assert all(r.body["temperature"] == 0 and r.body["max_tokens"] == 1024 for r in server.message_requests)
    text = (workdir / "runs" / "claude.jsonl").read_text()
    assert "sk-ant-test" not in text
    records = _records(workdir, "claude")
    assert records[0]["config"]["model"] == {  # type: ignore[index]
        "type": "AnthropicModel",
        "model": "fake-model",
        "base_url": server.base_url,
        "max_tokens": 1024,
        "params": {"temperature": 0},
    }
    results = [r for r in records if r["record"] == "model_call_result"]
    assert "overloaded (HTTP 529)" in results[0]["error"]  # type: ignore[operator]
    step3 = server.message_requests[3].body["messages"]
    assert step3[-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "s2-m1", "content": "wrote 188 bytes to notes.txt"}],
    }


def test_missing_configuration_is_a_clear_target_error(polyloop: Runner) -> None:
    done = polyloop("run", "examples/anthropic_agent.py:agent", "--run-id", "x", "--goal", GOAL)
    assert done.returncode == 2
    assert "POLYLOOP_MODEL" in done.stderr
