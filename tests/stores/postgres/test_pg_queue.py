"""The queue through the Python API: submit, Worker, parked runs, failures, and the CLI twins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from polyloop import Intent, RunExistsError, RunNotFoundError, TargetError, classify, mark_resolved
from polyloop.stores import PostgresStore, Worker, WorkerEvent, submit

from pg_helpers import AGENTS, check_invariants


def fresh(label: str) -> str:
    return f"pgq-{label}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def effects_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PL_TEST_EFFECTS", str(tmp_path / "effects"))
    monkeypatch.setenv("PL_TEST_SLOW", "0")
    monkeypatch.setenv("PL_TEST_STEPS", "2")
    return tmp_path / "effects"


async def work(store: PostgresStore, run_ids: list[str]) -> list[WorkerEvent]:
    """Run a worker until the queue holds nothing it could claim; the events about `run_ids`."""
    events: list[WorkerEvent] = []
    await Worker(store, concurrency=2, poll=0.05, on_event=events.append, until_idle=True).run()
    return [e for e in events if e.run_id in run_ids]


async def test_submitted_runs_are_claimed_and_finished(store, pg_conn):
    run_ids = [await submit(store, f"{AGENTS}:mixed", goal="g", run_id=fresh("ok")) for _ in range(2)]
    events = await work(store, run_ids)
    assert sorted((e.event, e.run_id) for e in events) == sorted(
        [("claim", r) for r in run_ids] + [("finish", r) for r in run_ids]
    )
    for run_id in run_ids:
        check_invariants(pg_conn, run_id)
        assert (await store.read_log(run_id))[0].target.endswith("pg_agents.py:mixed")
    with pytest.raises(RunExistsError):
        await submit(store, f"{AGENTS}:mixed", goal="g", run_id=run_ids[0])


async def test_a_bad_target_fails_at_submit(store):
    with pytest.raises(TargetError):
        await submit(store, f"{AGENTS}:nothing_here", goal="g")


async def test_a_parked_run_waits_for_its_operator_then_is_claimable_again(store, pg_conn, effects_file):
    run_id = await submit(store, f"{AGENTS}:mixed", goal="g", run_id=fresh("park"))
    # A worker that died inside step 2's `charge`: its intent has no result.
    async with store.lock(run_id):
        await _started(store, run_id)
    await _die_inside_charge(store, run_id)
    events = await work(store, [run_id])
    assert [e.event for e in events] == ["claim", "parked"]
    assert (await store.queue_row(run_id))["status"] == "parked"
    assert [e.event for e in await work(store, [run_id])] == [], "a parked run must not be claimed"
    blocking = classify(await store.read_log(run_id), run_id=run_id).blocking
    await mark_resolved(store, run_id, blocking[0].result_id, executed=True, observation="charged 1", reason="test")
    events = await work(store, [run_id])
    assert [(e.event, e.detail) for e in events] == [("claim", None), ("finish", "final_answer")]
    check_invariants(pg_conn, run_id)


async def test_a_run_parked_for_approval_is_claimable_again_once_approved(store, pg_conn, effects_file):
    from polyloop import approve

    run_id = await submit(store, f"{AGENTS}:approving", goal="g", run_id=fresh("approve"))
    events = await work(store, [run_id])
    assert [e.event for e in events] == ["claim", "parked"]
    assert "waits for a person" in events[1].detail
    assert not effects_file.exists(), "nothing of the call may run before its approval"
    await approve(store, run_id, "s1-a1", reason="test", by="ann")
    assert (await store.queue_row(run_id))["status"] == "queued"
    events = await work(store, [run_id])
    assert [(e.event, e.detail) for e in events] == [("claim", None), ("finish", "final_answer")]
    assert len(effects_file.read_text().splitlines()) == 1
    check_invariants(pg_conn, run_id)


async def _started(store, run_id):
    from polyloop import RunStarted, load_target

    agent = load_target(f"{AGENTS}:mixed")
    started = RunStarted(run_id=run_id, goal="g", target=f"{AGENTS}:mixed", config=agent.config())
    await store.write_run_started(started)
    return started


async def _die_inside_charge(store, run_id):
    """Write, under a lease, what a worker writes up to the `charge` of step 2, then stop."""
    from polyloop import ModelCallResult, StepCompleted
    from polyloop._log.ids import idempotency_key

    async with store.lock(run_id):
        for step, tool in ((1, "look"), (2, "charge")):
            await store.write_intent(run_id, Intent(kind="model_call", step=step, attempt=1, result_id=f"s{step}-m1"))
            await store.write_model_call_result(run_id, ModelCallResult(
                result_id=f"s{step}-m1", output={"text": None, "tool_call": {"name": tool, "args": {"n": step - 1}}}))
            replay = "safe" if tool == "look" else "never"
            await store.write_intent(run_id, Intent(
                kind="action", step=step, attempt=1, result_id=f"s{step}-a1", tool=tool, args={"n": step - 1},
                replay=replay, idempotency_key=idempotency_key(run_id, step, tool, {"n": step - 1})))
            if tool == "look":
                await store.write_step_completed(run_id, StepCompleted(step=1, result_id="s1-a1", observation="looked 0"))


async def test_a_run_whose_agent_cannot_load_is_failed_not_retried(store, pg_conn, tmp_path):
    agent_file = tmp_path / "gone.py"
    agent_file.write_text(Path(AGENTS).read_text())
    run_id = await submit(store, f"{agent_file}:mixed", goal="g", run_id=fresh("gone"))
    agent_file.unlink()
    events = await work(store, [run_id])
    assert [e.event for e in events] == ["claim", "failed"]
    assert "no file" in (events[1].detail or "")
    row = await store.queue_row(run_id)
    assert row["status"] == "failed" and "no file" in row["note"]
    # The operator fixes the cause and puts the run back in the queue.
    agent_file.write_text(Path(AGENTS).read_text())
    await store.requeue(run_id)
    assert [e.event for e in await work(store, [run_id])] == ["claim", "finish"]
    with pytest.raises(RunNotFoundError):
        await store.requeue(run_id)  # finished: nothing to requeue


def test_the_cli_submits_and_works(pg_url, pg_conn, tmp_path):
    env = {**os.environ, "PL_TEST_EFFECTS": str(tmp_path / "effects"), "PL_TEST_SLOW": "0", "PL_TEST_STEPS": "1"}
    run_id = fresh("cli")
    polyloop = [sys.executable, "-m", "polyloop"]
    out = subprocess.run([*polyloop, "submit", f"{AGENTS}:reads", "--goal", "g", "--run-id", run_id,
                          "--store", pg_url], capture_output=True, text=True, env=env)
    assert (out.returncode, out.stdout) == (0, f"{run_id}\n"), out.stderr
    again = subprocess.run([*polyloop, "submit", f"{AGENTS}:reads", "--run-id", run_id, "--store", pg_url],
                           capture_output=True, text=True, env=env)
    assert again.returncode == 2 and "already in the queue (queued, not started)" in again.stderr
    # Queued, not started: no log yet, and every command that reads one says so, not just "no run".
    for command in ("inspect", "resume"):
        waiting = subprocess.run([*polyloop, command, run_id, "--store", pg_url], capture_output=True, text=True,
                                 env=env)
        assert waiting.returncode == 2 and "is queued and has not started yet" in waiting.stderr, waiting
        assert waiting.stderr.count("\n") == 1
    work = subprocess.run([*polyloop, "worker", "--until-idle", "--poll", "0.05"], capture_output=True, text=True,
                          env={**env, "POLYLOOP_STORE": pg_url})
    assert work.returncode == 0, work.stderr
    assert f"claim     {run_id}  epoch 1" in work.stdout
    # A worker-wide event's detail starts in the column of the run ids.
    [ready] = [line for line in work.stdout.splitlines() if line.startswith("ready")]
    assert ready.startswith("ready     pid "), ready
    assert f"finish    {run_id}  epoch 1  final_answer" in work.stdout
    check_invariants(pg_conn, run_id)
    bad = subprocess.run([*polyloop, "worker", "--store", "postgresql://postgres@127.0.0.1:1/x", "--json"],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "cannot connect" in bad.stderr
    # One line of the JSON-lines stream, like every event the worker prints.
    assert bad.stdout.count("\n") == 1 and json.loads(bad.stdout)["error"]["type"] == "StoreError"
    not_pg = subprocess.run([*polyloop, "worker", "--store", str(tmp_path)], capture_output=True, text=True, env=env)
    assert not_pg.returncode == 2 and "needs a PostgreSQL store" in not_pg.stderr


@pytest.mark.parametrize("started", [False, True], ids=["queued", "finished"])
def test_submit_of_a_known_run_id_gives_advice_that_works_when_followed(pg_url, tmp_path, started):
    env = {**os.environ, "PL_TEST_EFFECTS": str(tmp_path / "effects"), "PL_TEST_SLOW": "0", "PL_TEST_STEPS": "1"}
    polyloop = [sys.executable, "-m", "polyloop"]

    def submit_(run_id: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*polyloop, "submit", f"{AGENTS}:reads", "--goal", "g", "--run-id", run_id,
                               "--store", pg_url], capture_output=True, text=True, env=env)

    run_id = fresh("known")
    assert submit_(run_id).returncode == 0
    if started:
        work = subprocess.run([*polyloop, "worker", "--until-idle", "--poll", "0.05", "--store", pg_url],
                              capture_output=True, text=True, env=env)
        assert work.returncode == 0 and f"finish    {run_id}" in work.stdout, work
    again = submit_(run_id)
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again
    assert again.stderr.rstrip().endswith("give the new run another --run-id"), again.stderr
    assert "polyloop resume" not in again.stderr  # it would lack this --store, and submit queues new runs
    other = submit_(f"{run_id}-2")  # what the advice says: another --run-id
    assert (other.returncode, other.stdout) == (0, f"{run_id}-2\n"), other.stderr
