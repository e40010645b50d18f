"""examples/openai_agent.py: an LLM agent on OpenAIModel, run through the CLI against the fake server."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from example_helpers import Runner

pytest.importorskip("openai")

from polyloop.testing import FakeOpenAIServer, FakeResponse  # noqa: E402

GOAL = "write meeting notes to notes.txt, then collect the TODO lines in todo.txt"


def test_python_examples_openai_agent_fake_runs_over_a_socket(python: Runner) -> None:
    done = python("openai_agent.py", "--fake", "--run-id", "llm", "--dir", "runs")
    assert done.returncode == 0, done.stderr
    assert "final_answer after 5 steps" in done.stdout
    assert "the fake server answered 5 chat-completions requests" in done.stdout
    assert "tokens: " in done.stdout


def test_a_crash_and_a_rate_limit_through_the_cli(
    polyloop: Runner, workdir: Path, load_example: Callable[[str], ModuleType]
) -> None:
    demo = load_example("demo")
    script = [FakeResponse.error(429, "slow down", retry_after=0)]
    script += [FakeResponse.from_json(out) for out in demo.SCRIPT]
    with FakeOpenAIServer(script, api_key="sk-test") as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test", "POLYLOOP_MODEL": "fake-model"}
        crashed = polyloop(
            "run", "examples/openai_agent.py:agent", "--run-id", "llm", "--goal", GOAL,
            env={**env, "POLYLOOP_DEMO_CRASH": "1"},
        )
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        assert len(server.chat_requests) == 3  # 429, step 1, step 2

        doc = json.loads(polyloop("inspect", "llm", "--json").stdout)
        assert doc["status"] == "needs_operator"
        calls = [(e["id"], e["state"], e["error"] is not None) for e in doc["executions"] if e["kind"] == "model_call"]
        assert calls == [("s1-m1", "done", True), ("s1-m2", "done", False), ("s2-m1", "done", False)]

        settled = polyloop("mark-resolved", "llm", "s2-a1", "--executed", "--reason", "checked", "--observation", "wrote 188 bytes to notes.txt")
        assert settled.returncode == 0, settled.stderr
        resumed = polyloop("resume", "llm", env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert "Wrote notes.txt and collected its 2 TODOs" in resumed.stdout

    # Resume asked only for steps 3-5: nothing already answered was paid for twice.
    assert len(server.chat_requests) == 6
    assert server.chat_requests[0].body == server.chat_requests[1].body  # the visible retry
    assert all(r.body["temperature"] == 0 for r in server.chat_requests)
    records = [json.loads(line) for line in (workdir / "runs" / "llm.jsonl").read_text().splitlines()]
    started = records[0]
    assert started["config"]["model"] == {
        "type": "OpenAIModel", "model": "fake-model", "base_url": server.base_url, "params": {"temperature": 0},
    }
    assert "sk-test" not in (workdir / "runs" / "llm.jsonl").read_text()
    results = [r for r in records if r["record"] == "model_call_result"]
    assert "rate limited (HTTP 429)" in results[0]["error"]
    assert all(r["usage"]["input_tokens"] > 0 for r in results[1:])
    # The history the resumed process sent shows the operator's observation for step 2.
    step3 = server.chat_requests[3].messages
    assert {"role": "tool", "tool_call_id": "s2-m1", "content": "wrote 188 bytes to notes.txt"} in step3


def test_missing_configuration_is_a_clear_target_error(polyloop: Runner) -> None:
    done = polyloop("run", "examples/openai_agent.py:agent", "--run-id", "x", "--goal", GOAL)
    assert done.returncode == 2
    assert "POLYLOOP_MODEL" in done.stderr
