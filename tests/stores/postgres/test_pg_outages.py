"""A queue worker and a model outage: the run stops resumable, stays queued, and a worker finishes it once back."""

from __future__ import annotations

import asyncio
import socket
import uuid
from pathlib import Path

import pytest

from polyloop import RunFinished, RunStopped
from polyloop.stores import Worker, WorkerEvent, submit

pytest.importorskip("openai")

from polyloop.testing import FakeOpenAIServer, FakeResponse  # noqa: E402

AGENT = str(Path(__file__).resolve().parents[2] / "cli" / "model_agents.py") + ":openai_agent"  # max_attempts=3


async def test_a_run_whose_model_is_down_stays_queued_and_is_finished_once_the_model_is_back(store, monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("POLYLOOP_MODEL", "fake-model")
    run_id = await submit(store, AGENT, goal="weather?", run_id=f"pgo-{uuid.uuid4().hex[:10]}")
    events: list[WorkerEvent] = []
    worker = Worker(store, concurrency=2, poll=0.05, on_event=events.append, until_idle=True)
    running = asyncio.create_task(worker.run())
    for _ in range(400):
        if any(e.event == "unavailable" for e in events):
            break
        await asyncio.sleep(0.05)
    assert [e.event for e in events if e.run_id == run_id][-1:] == ["unavailable"], events
    assert "stopped, resumable" in (events[-1].detail or "")
    with FakeOpenAIServer(responder=lambda body: FakeResponse.final("Sunny."), api_key="sk-test", port=port):
        await asyncio.wait_for(running, 30)  # the run is still queued: the worker claims it again and finishes it
    kinds = [e.event for e in events if e.run_id == run_id]
    assert kinds[:2] == ["claim", "unavailable"] and kinds[-1] == "finish", kinds
    records = list(await store.read_log(run_id))
    assert sum(isinstance(r, RunStopped) for r in records) >= 1
    assert isinstance(records[-1], RunFinished) and records[-1].result == "Sunny."
