"""A 5xx burst across a batch of runs (40 by default, 200 with the `slow` tests), through the real
`polyloop batch`: the runs of a worker process wait together on their model, the live display says
so, and every run finishes once the server is back, with the model calls bounded."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from batch_helpers import env, polyloop

from support import forking

pytest.importorskip("openai")

from polyloop.testing import FakeOpenAIServer, FakeResponse  # noqa: E402

AGENT = f"{Path(__file__).resolve().parent / 'outage_agents.py'}:agent"
OUTAGE = 2.0  # seconds of HTTP 503 from the first request on (long enough for a progress line to land in it)


@pytest.mark.parametrize("runs", [40, pytest.param(200, marks=pytest.mark.slow)])
def test_a_5xx_burst_across_a_batch_waits_together_and_every_run_finishes(tmp_path: Path, runs: int) -> None:
    lock = threading.Lock()
    first: list[float] = []

    def responder(body: Any) -> FakeResponse:
        with lock:
            if not first:
                first.append(time.monotonic())
            down = time.monotonic() < first[0] + OUTAGE
        return FakeResponse.error(503, "upstream restarting") if down else FakeResponse.final("ok")

    goals = tmp_path / "goals.txt"
    goals.write_text("".join(f"goal {i}\n" for i in range(runs)))
    with FakeOpenAIServer(responder=responder, api_key="sk-test", lifetime=300) as server:
        done = forking.run(
            [*polyloop(), "batch", AGENT, str(goals), "--name", "burst", "--dir", str(tmp_path / "runs"),
             "--processes", "2", "--concurrency", str(runs // 2)],
            env=env(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="sk-test", POLYLOOP_MODEL="fake-model"),
            capture_output=True, text=True, timeout=240,
        )
        calls = len(server.chat_requests)
    assert done.returncode == 0, done.stderr[-3000:]  # 0: every run finished
    assert "done: every run finished" in done.stdout
    # Not a terminal: the progress comes as plain lines, one as soon as the runs wait on their model.
    waits = [line for line in done.stderr.splitlines() if "model unavailable, retrying" in line]
    assert waits and waits[0].startswith("batch: "), done.stderr[-2000:]
    assert "OpenAIModel http://127.0.0.1:" in waits[0]
    failed = calls - runs
    print(f"\n{runs} runs (2 processes x {runs // 2}) through a {OUTAGE:g} s 503 burst: {calls} model calls, {failed} failed")
    # The calls under way when the burst began (at most every run, in flight), then one probe at a
    # time per process until it ends: far from every run x its budget of 30.
    assert failed <= runs + 2 * 30
