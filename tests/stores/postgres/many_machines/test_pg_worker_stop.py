"""A real `polyloop worker` in a deployment: SIGTERM mid tool call, a second signal, liveness probes."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import time
import urllib.request

import psycopg

from pg_helpers import AGENTS, WorkerProcess, check_effects, check_invariants, effects, fresh_ids, log_rows, submit_runs, wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _closed_pairs(conn: psycopg.Connection, run_id: str) -> None:
    """Every action intent of the run is followed by its step's record: no tool call was cut."""
    kinds = [kind for _, _, kind in log_rows(conn, run_id)]
    rows = conn.execute(
        "SELECT seq, body->>'kind' FROM polyloop_records WHERE run_id = %s AND kind = 'intent' ORDER BY seq", (run_id,)
    ).fetchall()
    for seq, kind in rows:
        if kind == "action":
            assert "step_completed" in kinds[seq + 1 :], f"{run_id}: the action at seq {seq} has no step record"


def test_sigterm_twice_mid_tool_call_lets_the_call_finish_then_exits_0_with_the_lease_released(own_db, tmp_path):
    done = tmp_path / "effects"
    [run_id] = fresh_ids("pgs-term", 1)
    asyncio.run(submit_runs(own_db, f"{AGENTS}:mixed", [run_id]))
    worker = WorkerProcess(own_db, done, lease=30.0, slow=1.0, steps=2)
    try:
        wait_for(lambda: effects(done), what="the first tool call")
        worker.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        worker.proc.send_signal(signal.SIGTERM)  # sooner, but never inside the tool call's record pair
        assert worker.proc.wait(30) == 0, worker.stderr()
    finally:
        worker.kill()
    assert len(effects(done)) == 1 and worker.seen("released", run_id)
    with psycopg.connect(own_db) as conn:
        holder, status = conn.execute("SELECT holder, status FROM polyloop_runs WHERE run_id = %s", (run_id,)).fetchone()
        assert (holder, status) == (None, "queued"), "the lease was left to lapse"
        _closed_pairs(conn, run_id)
        check_invariants(conn, run_id, finished=False)
    # Another worker continues it at once, repeating nothing.
    again = WorkerProcess(own_db, done, lease=30.0, slow=0.01, steps=2, extra=("--until-idle",))
    try:
        assert again.proc.wait(60) == 0, again.stderr()
    finally:
        again.kill()
    with psycopg.connect(own_db) as conn:
        check_invariants(conn, run_id)
        check_effects(conn, [run_id], done)


def test_sigterm_lets_a_model_call_finish_until_grace_then_lets_the_run_go_and_exits_0(own_db, tmp_path):
    # The model call takes a minute: one SIGTERM waits for it, --grace seconds later the worker lets it go.
    done = tmp_path / "effects"
    [run_id] = fresh_ids("pgs-grace", 1)
    asyncio.run(submit_runs(own_db, f"{AGENTS}:thinking", [run_id]))
    worker = WorkerProcess(own_db, done, lease=30.0, slow=60.0, extra=("--grace", "3"))
    try:
        wait_for(lambda: worker.seen("claim", run_id), what="the claim")
        time.sleep(0.5)  # the model call is under way
        signalled = time.monotonic()
        worker.proc.send_signal(signal.SIGTERM)
        time.sleep(1.5)
        assert worker.proc.poll() is None, "one SIGTERM cut the model call in hand before --grace"
        assert worker.proc.wait(30) == 0, worker.stderr()
        took = time.monotonic() - signalled
    finally:
        worker.kill()
    assert 3 <= took < 30, took  # after the grace, not after the minute-long call
    assert worker.seen("released", run_id)
    with psycopg.connect(own_db) as conn:
        holder, status = conn.execute("SELECT holder, status FROM polyloop_runs WHERE run_id = %s", (run_id,)).fetchone()
    assert (holder, status) == (None, "queued"), "the lease was left to lapse"


def test_the_health_file_and_port_answer_while_the_worker_lives(own_db, tmp_path):
    done = tmp_path / "effects"
    health = tmp_path / "health.json"
    port = _free_port()
    [run_id] = fresh_ids("pgs-health", 1)
    asyncio.run(submit_runs(own_db, f"{AGENTS}:reads", [run_id]))
    worker = WorkerProcess(own_db, done, lease=30.0, slow=0.2, steps=3,
                           extra=("--health", str(health), "--port", str(port)))
    try:
        wait_for(lambda: worker.seen("finish", run_id), what="the run to finish")
        wait_for(health.exists, what="the health file")
        state = json.loads(health.read_text())
        assert state["status"] == "ok" and state["pid"] == worker.pid
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            assert answer.status == 200
            doc = json.loads(answer.read())
        assert doc["claims"] == 1 and doc["finished"] == 1 and doc["running"] == 0
        assert doc["claim_p50_ms"] is not None
        assert worker.stop() == 0
    finally:
        worker.kill()
    assert not health.exists(), "the health file outlived the worker"
