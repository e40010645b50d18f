"""`polyloop worker` processes on a real server: SIGKILL, SIGSTOP, and a clean SIGTERM.

Leases are 1 s here, so a takeover takes about a second. After every
scenario: contiguous sequence numbers, epochs never decreasing, one terminal
record per run, no `never` action executed twice, and every execution backed
by a durable intent in the log.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

from pg_helpers import (
    AGENTS,
    WorkerProcess,
    check_effects,
    check_invariants,
    effects,
    fresh_ids,
    settle_parked,
    statuses,
    submit_runs,
    wait_for,
)

LEASE = 1.0


def finish_all(pg_url, pg_conn, run_ids, done, worker, timeout=90):
    """Wait until every run is finished, settling parked runs as an operator would."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        current = statuses(pg_conn, run_ids)
        if all(s == "finished" for s in current.values()):
            return
        assert not any(s == "failed" for s in current.values()), current
        if any(s == "parked" for s in current.values()):
            asyncio.run(settle_parked(pg_url, pg_conn, run_ids, done))
        assert worker.proc.poll() is None, worker.stderr()
        time.sleep(0.1)
    raise AssertionError(f"runs did not finish: {statuses(pg_conn, run_ids)}")


def test_a_killed_worker_is_taken_over_within_about_the_lease(pg_url, pg_conn, tmp_path):
    done = tmp_path / "effects"
    run_ids = fresh_ids("pgw-kill", 3)
    asyncio.run(submit_runs(pg_url, f"{AGENTS}:mixed", run_ids))
    first = WorkerProcess(pg_url, done, lease=LEASE, concurrency=3, slow=0.3)
    second = None
    try:
        wait_for(lambda: len(first.seen("claim")) == 3, what="three claims")
        second = WorkerProcess(pg_url, done, lease=LEASE, concurrency=3, slow=0.05)
        wait_for(lambda: len(effects(done)) >= 4, what="a few steps")
        first.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        first.proc.wait()
        wait_for(lambda: len({e["run_id"] for _, e in second.seen("takeover")}) == 3, timeout=30,
                 what="three takeovers")
        latency = max(min(t for t, e in second.seen("takeover") if e["run_id"] == r) for r in run_ids) - killed
        assert latency < 4 * LEASE, f"takeover took {latency:.2f}s with a {LEASE}s lease"
        finish_all(pg_url, pg_conn, run_ids, done, second)
    finally:
        first.kill()
        if second is not None:
            assert second.stop() == 0
    for run_id in run_ids:
        rows = check_invariants(pg_conn, run_id)
        assert len({epoch for _, epoch, _ in rows}) >= 2, f"{run_id} was never taken over"
    check_effects(pg_conn, run_ids, done)


def test_a_stopped_worker_woken_after_its_lease_is_fenced(pg_url, pg_conn, tmp_path):
    done = tmp_path / "effects"
    [run_id] = fresh_ids("pgw-stop", 1)
    asyncio.run(submit_runs(pg_url, f"{AGENTS}:reads", [run_id]))
    first = WorkerProcess(pg_url, done, lease=LEASE, slow=1.0)
    second = None
    try:
        wait_for(lambda: effects(done), what="the first tool call")
        os.kill(first.pid, signal.SIGSTOP)  # inside the tool call, lease held
        second = WorkerProcess(pg_url, done, lease=LEASE, slow=0.05)
        wait_for(lambda: statuses(pg_conn, [run_id])[run_id] == "finished", what="the takeover to finish")
        before = check_invariants(pg_conn, run_id)
        ran_before = [e for e in effects(done) if e[4] == first.pid]
        os.kill(first.pid, signal.SIGCONT)
        wait_for(lambda: first.seen("lost", run_id), timeout=20, what="the woken worker to see its lease lost")
        time.sleep(LEASE)
        assert check_invariants(pg_conn, run_id) == before, "the woken worker's write landed"
        assert [e for e in effects(done) if e[4] == first.pid] == ran_before, "the woken worker ran a tool"
        assert first.stop() == 0
    finally:
        first.kill()
        if second is not None:
            assert second.stop() == 0
    epochs = {epoch for _, epoch, _ in before}
    assert len(epochs) == 2
    check_effects(pg_conn, [run_id], done)


def test_sigterm_releases_held_runs_at_their_next_call(pg_url, pg_conn, tmp_path):
    done = tmp_path / "effects"
    run_ids = fresh_ids("pgw-term", 2)
    asyncio.run(submit_runs(pg_url, f"{AGENTS}:mixed", run_ids))
    first = WorkerProcess(pg_url, done, lease=5.0, concurrency=2, slow=0.3)
    try:
        wait_for(lambda: len(first.seen("claim")) == 2, what="two claims")
        # While model and tool calls run, no session of the worker sits inside a transaction.
        for _ in range(10):
            in_transaction = pg_conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'polyloop' "
                "AND state LIKE 'idle in transaction%'"
            ).fetchone()
            assert in_transaction == (0,)
            time.sleep(0.05)
        assert first.stop() == 0
        assert len(first.seen("released")) == 2
        # Released, not abandoned: claimable at once, nothing unknown in the logs.
        rows = pg_conn.execute(
            "SELECT holder, status FROM polyloop_runs WHERE run_id = ANY(%s)", (run_ids,)
        ).fetchall()
        assert rows == [(None, "queued")] * 2
    finally:
        first.kill()
    second = WorkerProcess(pg_url, done, lease=5.0, concurrency=2, slow=0.01)
    try:
        wait_for(lambda: len(second.seen("finish")) == 2, what="both runs to finish")
        assert not second.seen("takeover")
        assert second.stop() == 0
    finally:
        second.kill()
    for run_id in run_ids:
        check_invariants(pg_conn, run_id)
    check_effects(pg_conn, run_ids, done)
