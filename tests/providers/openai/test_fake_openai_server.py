"""The fake OpenAI-compatible server checks requests like a real one and stops by itself."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from polyloop.testing import FakeOpenAIServer, FakeResponse
from support import ROOT
from support import forking


def _post(server: FakeOpenAIServer, body: Any, key: str | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        server.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **({"authorization": f"Bearer {key}"} if key else {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


OK = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    "body, words",
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "'model' is required"),
        ({"model": "m", "messages": []}, "non-empty"),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "c1", "content": "r"}]},
            "preceding message with 'tool_calls'",
        ),
        ({**OK, "tools": [{"type": "function", "function": {}}]}, "tools[0]"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "unknown role"),
    ],
    ids=["no-model", "no-messages", "orphan-tool-message", "nameless-tool", "bad-role"],
)
def test_invalid_requests_get_400_like_a_real_server(body: dict[str, Any], words: str) -> None:
    with FakeOpenAIServer([FakeResponse.final("unused")]) as server:
        status, doc = _post(server, body)
        assert server.remaining == 1  # a refused request does not use up the script
    assert status == 400
    assert words in doc["error"]["message"]


def test_a_used_up_script_answers_400_unless_a_responder_takes_over() -> None:
    with FakeOpenAIServer([FakeResponse.final("one")]) as server:
        assert _post(server, OK)[0] == 200
        status, doc = _post(server, OK)
    assert status == 400 and doc["error"]["type"] == "fake_script_exhausted"
    with FakeOpenAIServer(responder=lambda body: FakeResponse.final(f"echo {len(body['messages'])}")) as server:
        status, doc = _post(server, OK)
    assert doc["choices"][0]["message"]["content"] == "echo 1"


def test_the_api_key_is_checked_when_set() -> None:
    with FakeOpenAIServer([FakeResponse.final("ok")], api_key="right") as server:
        assert _post(server, OK, key="wrong")[0] == 401
        assert _post(server, OK, key="right")[0] == 200
    assert [r.status for r in server.requests] == [401, 200]


def test_usage_is_deterministic_unless_scripted() -> None:
    with FakeOpenAIServer([FakeResponse.final("a"), FakeResponse.final("a"), FakeResponse.final("b", usage=(7, 3))]) as server:
        first, second, third = (_post(server, OK)[1]["usage"] for _ in range(3))
    assert first == second
    assert third == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def test_the_server_stops_by_itself_after_its_lifetime() -> None:
    server = FakeOpenAIServer(lifetime=0.2).start()
    try:
        deadline = time.monotonic() + 5
        while server._thread is not None and server._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server._thread is not None and not server._thread.is_alive()
    finally:
        server.stop()


def test_stop_cuts_a_scripted_delay_short() -> None:
    import threading

    server = FakeOpenAIServer([FakeResponse.final("slow", delay=60)]).start()
    answers: list[int] = []
    client = threading.Thread(target=lambda: answers.append(_post(server, OK)[0]))
    client.start()
    while not server.requests:
        time.sleep(0.01)
    started = time.monotonic()
    server.stop()
    client.join(10)
    assert time.monotonic() - started < 5
    assert answers == [200]


def test_script_lines_read_like_scripted_model_outputs() -> None:
    assert FakeResponse.from_json({"tool": "t", "args": {"a": 1}, "usage": {"input_tokens": 3, "output_tokens": 1}}) == (
        FakeResponse.tool_call("t", {"a": 1}, usage=(3, 1))
    )
    assert FakeResponse.from_json({"final": "x"}) == FakeResponse.final("x")
    assert FakeResponse.from_json({"error": 429}).status == 429
    with pytest.raises(ValueError):
        FakeResponse.from_json({"nothing": 1})


@pytest.mark.parametrize(("api", "variable"), [("openai", "OPENAI_BASE_URL"), ("anthropic", "ANTHROPIC_BASE_URL")])
def test_the_server_command_lives_outside_the_package_and_prints_its_environment(api: str, variable: str) -> None:
    import sys
    from pathlib import Path

    tool = ROOT / "tools" / "fake_model_server.py"
    done = forking.run(
        [sys.executable, str(tool), "--api", api, "--final", "hi", "--lifetime", "0.5"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{variable}=http://127.0.0.1:") and lines[1] == "POLYLOOP_MODEL=fake-model"
    import polyloop.testing

    assert not any(name.startswith("Fake") for name in polyloop.testing.__all__)
    assert not (Path(polyloop.testing.__file__).parent / "fake_openai.py").exists()
