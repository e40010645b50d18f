"""Real crashes (SIGKILL of a child process) of runs on AnthropicModel, recovered with `polyloop resume`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from polyloop import Intent, JsonlStore, ModelCallResult, StepCompleted
from polyloop.testing import FakeAnthropicServer, FakeResponse
from support import forking

AGENT = textwrap.dedent(
    '''
    import json, os, pathlib, signal
    from polyloop import Agent, tool
    from polyloop.anthropic import AnthropicModel

    OUTBOX = pathlib.Path(os.environ["OUTBOX"])

    @tool
    def post(channel: str, message: str) -> str:
        """Post a message to a channel: it cannot be taken back."""
        with OUTBOX.open("a") as out:
            out.write(json.dumps([channel, message]) + "\\n")
        if "DIE_AFTER_POST" in os.environ:
            os.kill(os.getpid(), signal.SIGKILL)  # after the effect, before its result is logged
        return f"posted to {channel}"

    def agent():
        return Agent(model=AnthropicModel(timeout=30), tools=[post], retry_backoff=0.01)
    '''
)


def _env(tmp_path: Path, server: FakeAnthropicServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "POLYLOOP_"))}
    return {
        **env,
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_API_KEY": "k",
        "POLYLOOP_MODEL": "fake-model",
        "OUTBOX": str(tmp_path / "outbox.jsonl"),
        "POLYLOOP_DIR": str(tmp_path / "runs"),
    }


def _polyloop(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return forking.run(
        [sys.executable, "-m", "polyloop", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


async def test_sigkill_in_a_never_tool_then_mark_resolved_and_polyloop_resume(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    script = [
        FakeResponse.tool_call("post", {"channel": "ops", "message": "hi"}, usage=(30, 5)),
        FakeResponse.final("said hi", usage=(45, 3)),
    ]
    with FakeAnthropicServer(script, api_key="k") as server:
        env = _env(tmp_path, server)
        crashed = _polyloop(
            "run", "agent.py:agent", "--run-id", "r", "--goal", "say hi", env={**env, "DIE_AFTER_POST": "1"}, cwd=tmp_path
        )
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        stopped = _polyloop("resume", "r", env=env, cwd=tmp_path)
        assert stopped.returncode == 3, stopped.stderr  # an unknown `never` action: a person decides
        assert "s1-a1" in stopped.stderr + stopped.stdout
        settled = _polyloop(
            "mark-resolved", "r", "s1-a1", "--executed", "--observation", "posted to ops", "--reason", "in the outbox", env=env, cwd=tmp_path
        )
        assert settled.returncode == 0, settled.stderr
        resumed = _polyloop("resume", "r", env=env, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
    assert len(server.message_requests) == 2  # step 1's model call was reused, not paid again
    assert (tmp_path / "outbox.jsonl").read_text() == '["ops", "hi"]\n'  # and the message was not posted twice
    records = list(await JsonlStore(tmp_path / "runs").read_log("r"))
    assert [r.result_id for r in records if isinstance(r, Intent)] == ["s1-m1", "s1-a1", "s2-m1"]
    outputs = [r.output for r in records if isinstance(r, ModelCallResult)]
    assert [o["stop_reason"] for o in outputs if o] == ["tool_use", "end_turn"]
    # the resumed request carried the recovered conversation, the operator's observation included
    last = server.message_requests[-1].body["messages"]
    assert last[-1] == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "s1-m1", "content": "posted to ops"}]}


async def test_sigkill_while_the_model_answers_then_polyloop_resume_asks_again(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    script = [FakeResponse.final("too late", delay=30), FakeResponse.final("asked again", usage=(9, 2))]
    with FakeAnthropicServer(script, api_key="k") as server:
        env = _env(tmp_path, server)
        child = subprocess.Popen(
            [sys.executable, "-m", "polyloop", "run", "agent.py:agent", "--run-id", "r", "--goal", "hi"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 30
            while not server.message_requests and time.monotonic() < deadline and child.poll() is None:
                time.sleep(0.02)
            assert server.message_requests, "the run never called the model"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            assert child.stderr is not None
            child.stderr.close()
        assert child.returncode == -signal.SIGKILL
        resumed = _polyloop("resume", "r", env=env, cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr
    records = list(await JsonlStore(tmp_path / "runs").read_log("r"))
    intents = [r.result_id for r in records if isinstance(r, Intent)]
    results = {r.result_id: r for r in records if isinstance(r, ModelCallResult)}
    assert intents == ["s1-m1", "s1-m2"]  # the paid-for, unanswered call stays visible
    assert "s1-m1" not in results and results["s1-m2"].output == {
        "text": "asked again",
        "tool_call": None,
        "stop_reason": "end_turn",
        "model": "fake-model",
    }
    assert [r.step for r in records if isinstance(r, StepCompleted)] == [1]
