"""A hosted model that answers badly, through the real `polyloop` process: a visible, retried attempt."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli

pytest.importorskip("openai")

from polyloop.testing import FakeOpenAIServer, FakeResponse  # noqa: E402

TARGET = str(Path(__file__).resolve().parent / "model_agents.py") + ":openai_agent"


def test_a_malformed_answer_is_retried_as_attempt_2_and_shown_by_inspect(cli: Cli) -> None:
    script = [
        # a proxy's error page labelled as JSON, with status 200
        FakeResponse.raw("<html><body>502 Bad Gateway</body></html>"),
        FakeResponse.tool_call("lookup", {"city": "Oslo"}, usage=(30, 4)),
        FakeResponse.final("Sunny in Oslo.", usage=(50, 3)),
    ]
    with FakeOpenAIServer(script, api_key="sk-test") as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test", "POLYLOOP_MODEL": "fake-model"}
        done = cli("run", TARGET, "--run-id", "llm", "--goal", "weather in Oslo?", env=env)
        assert len(server.chat_requests) == 3
    assert done.code == 0, done
    assert "Sunny in Oslo." in done.stdout and "Traceback" not in done.stderr

    doc = cli("inspect", "llm", "--json").json()
    assert doc["status"] == "finished"
    calls = [(e["id"], e["state"], e["error"]) for e in doc["executions"] if e["kind"] == "model_call"]
    assert [(i, s) for i, s, _ in calls] == [("s1-m1", "done"), ("s1-m2", "done"), ("s2-m1", "done")]
    assert calls[0][2].startswith("MalformedResponseError: the answer is not JSON")
    assert calls[1][2] is None and calls[2][2] is None
    human = cli("inspect", "llm")
    assert human.code == 0 and "MalformedResponseError" in human.stdout
