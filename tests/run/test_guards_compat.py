"""Logs written by format 1.0 keep reading, resuming and verifying unchanged under 1.1."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from polyloop import (
    Agent,
    JsonlStore,
    NeedsOperatorError,
    RunMismatchError,
    ScriptedModel,
    inspect_run,
    mark_resolved,
    tool,
    verify_file,
)

SCRIPT = [{"tool": "send", "args": {"text": "hi"}}, {"final": "sent"}]
AT = "2026-11-30T10:00:00.000000Z"
LOG_1_0 = [
    {"record": "run_started", "run_id": "old", "goal": "g", "target": None, "schema_version": "1.0", "at": AT,
     "config": {"max_steps": 5, "system": None, "tools": [{"name": "send", "replay": "never"}], "max_attempts": 6}},
    {"record": "intent", "kind": "model_call", "step": 1, "attempt": 1, "result_id": "s1-m1", "tool": None,
     "args": None, "replay": None, "idempotency_key": None, "at": AT},
    {"record": "model_call_result", "result_id": "s1-m1", "usage": None, "error": None, "at": AT,
     "output": {"text": None, "tool_call": {"name": "send", "args": {"text": "hi"}}}},
    {"record": "intent", "kind": "action", "step": 1, "attempt": 1, "result_id": "s1-a1", "tool": "send",
     "args": {"text": "hi"}, "replay": "never", "idempotency_key": "pl-27b418a05740059380cefd0c911d998e", "at": AT},
    # 1.0 resolutions have no `source`
    {"record": "resolution", "result_id": "s1-a1", "outcome": "executed", "observation": "sent", "by": "op",
     "reason": "seen", "at": AT},
]


@pytest.fixture
def store(tmp_path: Path) -> JsonlStore:
    (tmp_path / "old.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in LOG_1_0[:-1]))
    return JsonlStore(tmp_path)


@tool
def send(text: str) -> str:
    return f"sent {text}"


async def test_a_1_0_log_stops_settles_resumes_and_verifies_as_before(store: JsonlStore, tmp_path: Path) -> None:
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[send])
    with pytest.raises(NeedsOperatorError):
        await agent.run(run_id="old", store=store)
    report = await inspect_run(store, "old")
    assert report.status == "needs_operator" and report.waiting[0]["kind"] == "unknown"
    await mark_resolved(store, "old", "s1-a1", executed=True, observation="sent", reason="seen")
    result = await agent.run(run_id="old", store=store)
    assert result.reason == "final_answer"
    written = [orjson.loads(line) for line in (tmp_path / "old.jsonl").read_bytes().splitlines()]
    assert written[0]["schema_version"] == "1.0"
    assert {r["record"] for r in written} <= {"run_started", "intent", "model_call_result", "step_completed",
                                              "run_finished", "resolution"}
    assert verify_file(tmp_path / "old.jsonl").problems == ()


async def test_a_1_0_resolution_without_source_reads_as_an_operators(tmp_path: Path) -> None:
    (tmp_path / "old.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in LOG_1_0))
    report = await inspect_run(JsonlStore(tmp_path), "old")
    assert report.recovery.resolutions[0].source == "operator"
    assert report.to_json()["resolutions"][0]["source"] == "operator"


async def test_a_1_0_run_is_not_resumed_by_an_agent_that_now_declares_guards(store: JsonlStore) -> None:
    @tool(name="send")
    def guarded(text: str) -> str:
        return text

    guarded.precondition(lambda args, ctx: True)
    with pytest.raises(RunMismatchError, match="guards"):
        await Agent(model=ScriptedModel(SCRIPT), tools=[guarded]).run(run_id="old", store=store)
