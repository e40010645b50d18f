"""`polyloop.durable`: a hand-written loop's calls on the log, replayed, refused when they diverge, stopped for people."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from polyloop import (
    ApprovalRequiredError,
    CheckpointError,
    DivergenceError,
    InvalidInputError,
    NeedsOperatorError,
    approve,
    deny,
    mark_resolved,
)
from polyloop import durable
from polyloop.durable import Reply, ToolPolicy
from polyloop.testing import MemoryStore


class Crash(BaseException):
    """Stands for the process dying at this point (the run keeps what is durable)."""


def loop(script: list[list[tuple[str, dict[str, Any]]]], ledger: dict[str, list[Any]], *,
         tools: dict[str, Any] | None = None, crash_in: tuple[str, Any] | None = None, fingerprint: Any = "v1"):
    """A hand-written loop over a scripted model; `ledger` counts model calls and tool runs."""

    def model(step: int) -> Reply:
        ledger["model"].append(step)
        calls = script[step - 1]
        return Reply(calls=tuple(calls), text=None if calls else "done", raw={"step": step})

    def tool(name: str):
        def run(args: dict[str, Any]) -> str:
            ledger[name].append(args)
            if crash_in == (name, args):
                raise Crash  # a BaseException: the tool is cut short, its outcome unknown
            return f"{name} ok {args}"
        return run

    async def main(run_id: str, store: Any, goal: str = "g") -> Any:
        async with durable.open_run(run_id, store=store, goal=goal, fingerprint=fingerprint,
                                    tools=tools or {"look": "safe", "pay": "never"}) as run:
            step = 0
            while True:
                step += 1
                reply = await run.model_call(lambda: model(step))
                if not reply.calls:
                    return await run.finish(reply.text)
                for name, args in reply.calls:
                    await run.tool_call(name, args, tool(name))

    return main


def fresh() -> dict[str, list[Any]]:
    return {"model": [], "look": [], "pay": []}


SCRIPT = [[("look", {"q": 1}), ("pay", {"n": 1})], [("pay", {"n": 2})], []]


async def _crashing(main, store, run_id="r"):
    with pytest.raises(Crash):
        await main(run_id, store)


def test_a_resumed_loop_gets_done_work_from_the_log_and_pays_nothing_twice():
    async def go():
        store, ledger = MemoryStore(), fresh()
        # `pay` n=2 raises mid-call as a crash would: its outcome is unknown
        await _crashing(loop(SCRIPT, ledger, crash_in=("pay", {"n": 2})), store)
        assert ledger == {"model": [1, 2], "look": [{"q": 1}], "pay": [{"n": 1}, {"n": 2}]}
        again = fresh()
        with pytest.raises(NeedsOperatorError):  # unknown `never`: an operator decides
            await loop(SCRIPT, again)("r", store)
        assert again == fresh()
        await mark_resolved(store, "r", "s2-a1", executed=True, observation="paid 2", reason="the bank says so")
        result = await loop(SCRIPT, again)("r", store)
        assert (result.reason, result.text, result.steps) == ("final_answer", "done", 3)
        assert again == {"model": [3], "look": [], "pay": []}
    asyncio.run(go())


def test_an_unknown_safe_call_runs_again():
    async def go():
        store, ledger = MemoryStore(), fresh()
        await _crashing(loop(SCRIPT, ledger, crash_in=("look", {"q": 1})), store)
        again = fresh()
        result = await loop(SCRIPT, again)("r", store)
        assert result.text == "done"
        assert again == {"model": [2, 3], "look": [{"q": 1}], "pay": [{"n": 1}, {"n": 2}]}
    asyncio.run(go())


def test_a_different_sequence_of_calls_is_refused_at_the_first_divergence():
    async def go():
        store = MemoryStore()
        await _crashing(loop(SCRIPT, fresh(), crash_in=("pay", {"n": 2})), store)
        await mark_resolved(store, "r", "s2-a1", executed=True, observation="paid 2", reason="known")
        paid: list[Any] = []

        async def changed(run_id: str, store: Any) -> None:  # the loop's logic now pays 7, not what the log holds
            async with durable.open_run(run_id, store=store, fingerprint="v1",
                                        tools={"look": "safe", "pay": "never"}) as run:
                reply = await run.model_call(lambda: pytest.fail("replayed, never called"))
                assert reply.replayed and reply.raw == {"step": 1}
                await run.tool_call("look", {"q": 1}, paid.append)
                await run.tool_call("pay", {"n": 7}, paid.append)

        with pytest.raises(DivergenceError) as caught:
            await changed("r", store)
        assert caught.value.step == 1 and "pay({'n': 7})" in caught.value.asked
        assert "pay({'n': 1})" in caught.value.recorded
        assert paid == [] and isinstance(caught.value, CheckpointError)  # exit code 4
    asyncio.run(go())


def test_a_loop_that_skips_a_recorded_call_diverges():
    async def go():
        store = MemoryStore()
        await _crashing(loop(SCRIPT, fresh(), crash_in=("pay", {"n": 2})), store)

        async def skipping(run_id: str, store: Any) -> None:
            async with durable.open_run(run_id, store=store, fingerprint="v1",
                                        tools={"look": "safe", "pay": "never"}) as run:
                await run.model_call(lambda: pytest.fail("replayed, never called"))
                await run.tool_call("look", {"q": 1}, lambda a: pytest.fail("recorded"))
                await run.model_call(lambda: pytest.fail("replayed, never called"))

        with pytest.raises(DivergenceError, match="step 1"):
            await skipping("r", store)
    asyncio.run(go())


def test_a_changed_fingerprint_refuses_the_resume():
    async def go():
        store = MemoryStore()
        await _crashing(loop(SCRIPT, fresh(), crash_in=("look", {"q": 1})), store)
        with pytest.raises(CheckpointError, match="model"):
            await loop(SCRIPT, fresh(), fingerprint="v2")("r", store)
    asyncio.run(go())


def test_an_approval_waits_and_an_approved_call_runs_with_the_approved_arguments():
    async def go():
        store, ledger = MemoryStore(), fresh()
        tools = {"look": "safe", "pay": ToolPolicy(approval="required")}
        with pytest.raises(ApprovalRequiredError) as caught:
            await loop(SCRIPT, ledger, tools=tools)("r", store)
        assert ledger["pay"] == []  # nothing of the step ran
        request = caught.value.requests[0]
        await approve(store, "r", request.result_id, reason="ok", by="al", args={"n": 10})
        with pytest.raises(ApprovalRequiredError):  # step 2's payment waits in its turn
            await loop(SCRIPT, ledger, tools=tools)("r", store)
        assert ledger["pay"] == [{"n": 10}] and ledger["look"] == [{"q": 1}]
        second = (await _requests(store))[-1]
        await deny(store, "r", second, reason="too much", by="al")
        result = await loop(SCRIPT, ledger, tools=tools)("r", store)
        assert result.text == "done" and ledger["pay"] == [{"n": 10}]
    asyncio.run(go())


async def _requests(store: Any) -> list[str]:
    return [r.result_id for r in await store.read_log("r") if r.TAG == "approval_request"]


def test_a_tool_not_declared_is_refused_before_anything_runs():
    async def go():
        with pytest.raises(InvalidInputError, match="not declared"):
            await loop([[("wire", {})], []], {**fresh(), "wire": []})("r", MemoryStore())
    asyncio.run(go())


def test_the_sync_face_runs_the_same_loop():
    store, ledger = MemoryStore(), fresh()
    with durable.open_run_sync("s", store=store, goal="g", tools={"look": "safe", "pay": "never"}) as run:
        step = 0
        while True:
            step += 1
            reply = run.model_call(lambda: Reply(calls=tuple(SCRIPT[step - 1]), text="done"))
            if not reply.calls:
                result = run.finish(reply.text)
                break
            for name, args in reply.calls:
                outcome = run.tool_call(name, args, lambda a: ledger["pay"].append(a) or "ok")
                assert outcome.text == "ok" and not outcome.replayed
    assert (result.reason, result.steps) == ("final_answer", 3)
    with durable.open_run_sync("s", store=store) as run:
        assert run.finished is not None and run.finished.text == "done"


def test_an_agent_run_is_not_opened_as_a_loop():
    from polyloop import Agent, ScriptedModel

    async def go():
        store = MemoryStore()
        await Agent(model=ScriptedModel([{"final": "x"}])).run("g", run_id="a", store=store)
        with pytest.raises(InvalidInputError, match="Agent"):
            async with durable.open_run("a", store=store):
                pass
    asyncio.run(go())


def test_a_loops_run_is_not_taken_over_by_an_agent_even_accepting_changes():
    from polyloop import Agent, ScriptedModel

    async def go():
        store = MemoryStore()
        with pytest.raises(Crash):
            await loop(SCRIPT, fresh(), crash_in=("pay", {"n": 1}))("r", store)
        before = [r.TAG for r in await store.read_log("r")]
        agent = Agent(model=ScriptedModel([{"final": "x"}]))
        with pytest.raises(InvalidInputError, match="user's loop"):
            await agent.run("g", run_id="r", store=store, accept_changes=True, reason="take it over")
        assert [r.TAG for r in await store.read_log("r")] == before  # nothing written
    asyncio.run(go())


def _crash_after_one_call(runs, target: str, tool: str, policy: str) -> None:
    """Run `r` of a loop with entry point `target`: one model call asking for `tool`, then a crash."""
    from polyloop.stores import JsonlStore

    async def crash() -> None:
        async with durable.open_run("r", store=JsonlStore(runs), goal="g", target=target,
                                    tools={tool: policy}) as run:
            await run.model_call(lambda: Reply(calls=((tool, {"n": 1}),)))
            raise Crash
    with pytest.raises(Crash):
        asyncio.run(crash())


def test_inspect_never_calls_a_loops_entry_point_to_check_its_validity(tmp_path):
    from support.cli import polyloop_in_process

    marker = tmp_path / "called"
    entry = tmp_path / "entry.py"
    entry.write_text(f"def main(run_id='r', store=None, goal='g'):\n    open({str(marker)!r}, 'w').close()\n")

    _crash_after_one_call(tmp_path / "runs", f"{entry}:main", "pay", "never")
    shown = polyloop_in_process("inspect", "r", "--json", "--dir", str(tmp_path / "runs"))
    assert shown.code == 0, shown.stderr
    assert "user's loop" in json.loads(shown.stdout)["validity"]["not_checked"]
    assert not marker.exists()  # inspecting a run never runs its loop


def test_resume_names_an_entry_point_that_cannot_take_run_id_store_and_goal(tmp_path):
    from support.cli import polyloop_in_process

    entry = tmp_path / "entry.py"
    entry.write_text("async def main(run_id, store):\n    raise AssertionError('never called')\n")

    _crash_after_one_call(tmp_path / "runs", f"{entry}:main", "look", "safe")
    refused = polyloop_in_process("resume", "r", "--dir", str(tmp_path / "runs"))
    assert refused.code == 2, refused.stderr  # a target error, not an internal one
    assert "main(run_id, store) cannot be called as main(run_id=..., store=..., goal=...)" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_resume_help_says_how_a_users_loop_is_resumed():
    from support.cli import polyloop_in_process

    shown = polyloop_in_process("resume", "--help", env={"COLUMNS": "200"})
    assert shown.code == 0
    text = " ".join(shown.stdout.split())
    assert "resumes by calling its entry point, `function(run_id=..., store=..., goal=...)`" in text
    assert "refused (exit 4)" in text


def test_a_reply_that_is_not_json_is_a_failed_model_call_not_a_store_failure():
    from polyloop import ModelCallError

    async def go():
        store = MemoryStore()
        with pytest.raises(ModelCallError, match="a loop's reply must be JSON"):
            async with durable.open_run("r", store=store, goal="g", tools={"pay": "never"}) as run:
                await run.model_call(lambda: Reply(calls=(("pay", {"when": object()}),)))
        results = [r for r in await store.read_log("r") if r.TAG == "model_call_result"]
        assert [(r.output, "must be JSON" in (r.error or "")) for r in results] == [(None, True)]  # recorded, resumable
    asyncio.run(go())
