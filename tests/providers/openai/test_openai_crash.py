"""A real crash (SIGKILL in a child process) of a run on OpenAIModel, and its recovery."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from polyloop import Intent, JsonlStore, ModelCallResult, inspect_run, mark_resolved
from polyloop.testing import FakeOpenAIServer, FakeResponse

AGENT = textwrap.dedent(
    '''
    import os, signal
    from polyloop import Agent, tool
    from polyloop.openai import OpenAIModel

    @tool
    def send(text: str) -> str:
        """Send a message (an unrepeatable side effect)."""
        with open(os.environ["SENT_LOG"], "a") as fh:
            fh.write(text + "\\n")
        if os.environ.get("CRASH_AFTER_SEND"):
            os.kill(os.getpid(), signal.SIGKILL)
        return "sent"

    def agent():
        return Agent(model=OpenAIModel(), tools=[send], retry_backoff=0.01)
    '''
)

RUN = (
    "import asyncio, sys; from polyloop import JsonlStore, run_target\n"
    "r = asyncio.run(run_target(sys.argv[1], goal='say hi', store=JsonlStore(sys.argv[2]), run_id='r'))\n"
    "print(r.reason, r.text)"
)
RESUME = (
    "import asyncio, sys; from polyloop import JsonlStore, resume_run\n"
    "r = asyncio.run(resume_run('r', store=JsonlStore(sys.argv[2])))\n"
    "print(r.reason, r.text)"
)


def _child(code: str, target: str, runs: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, target, str(runs)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.asyncio
async def test_sigkill_mid_action_then_resume_pays_for_no_model_call_twice(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    target = f"{tmp_path / 'agent.py'}:agent"
    runs, sent = tmp_path / "runs", tmp_path / "sent.txt"
    script = [
        FakeResponse.tool_call("send", {"text": "hi"}, usage=(30, 5)),
        FakeResponse.final("said hi", usage=(45, 3)),
    ]
    with FakeOpenAIServer(script, api_key="k") as server:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "k",
            "POLYLOOP_MODEL": "fake-model",
            "SENT_LOG": str(sent),
        }
        crashed = _child(RUN, target, runs, {**env, "CRASH_AFTER_SEND": "1"})
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        assert len(server.chat_requests) == 1

        store = JsonlStore(runs)
        report = await inspect_run(store, "r")
        assert report.status == "needs_operator"
        assert [e.result_id for e in report.recovery.blocking] == ["s1-a1"]
        assert sent.read_text() == "hi\n"  # the side effect happened; the log cannot know

        await mark_resolved(store, "r", "s1-a1", executed=True, observation="sent", reason="saw it in sent.txt")
        resumed = _child(RESUME, target, runs, env)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == "final_answer said hi"

    assert len(server.chat_requests) == 2  # step 1's model call was reused, not re-paid
    assert sent.read_text() == "hi\n"  # and the message was not sent twice
    records = list(await store.read_log("r"))
    assert [r.result_id for r in records if isinstance(r, Intent)] == ["s1-m1", "s1-a1", "s2-m1"]
    usage = [r.usage for r in records if isinstance(r, ModelCallResult)]
    assert usage == [{"input_tokens": 30, "output_tokens": 5}, {"input_tokens": 45, "output_tokens": 3}]
