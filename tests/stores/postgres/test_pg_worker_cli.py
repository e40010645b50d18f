"""`polyloop worker`'s contracts as a real process: --until-idle, exit codes, an unreachable server.

Each test works on a database of its own (a fresh schema), so `--until-idle`
and the queue see only this test's runs.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import time

import psycopg
import pytest

from pg_helpers import (
    AGENTS,
    WorkerProcess,
    check_effects,
    check_invariants,
    effects,
    fresh_ids,
    statuses,
    submit_runs,
    wait_for,
    with_search_path,
)
from pg_clock import lapse
from pg_proxy import Proxy
from support import TESTS


def test_until_idle_waits_for_a_dead_workers_lease_and_takes_its_run_over(own_db, pg_conn, tmp_path):
    done = tmp_path / "effects"
    [run_id] = fresh_ids("pgc-idle", 1)
    asyncio.run(submit_runs(own_db, f"{AGENTS}:reads", [run_id]))
    dead = WorkerProcess(own_db, done, lease=120.0, slow=0.3)
    try:
        wait_for(lambda: effects(done), what="the first tool call")
        dead.proc.send_signal(signal.SIGKILL)
        dead.proc.wait()
    finally:
        dead.kill()
    # The run is `queued` and held by a lease nobody renews: not claimable until it lapses, which
    # the database's clock is moved to once the idle worker has looked (a 120 s lease otherwise).
    idle = WorkerProcess(own_db, done, lease=1.0, slow=0.01, extra=("--until-idle",))
    try:
        wait_for(lambda: idle.seen("ready"), what="the idle worker's first look")
        assert idle.proc.poll() is None, "the worker did not wait for the held run"
        with psycopg.connect(own_db, autocommit=True) as conn:
            lapse(conn, run_id)
        assert idle.proc.wait(30) == 0, idle.stderr()
    finally:
        idle.kill()
    assert [e["event"] for _, e in idle.events if e["run_id"] == run_id] == ["takeover", "finish"], idle.events
    with psycopg.connect(own_db) as conn:
        assert statuses(conn, [run_id]) == {run_id: "finished"}
        check_invariants(conn, run_id)
        check_effects(conn, [run_id], done)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 0)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_releases_every_lease_then_exits_130_for_sigint_and_0_for_sigterm(own_db, tmp_path, sig, code):
    done = tmp_path / "effects"
    run_ids = fresh_ids("pgc-sig", 2)
    asyncio.run(submit_runs(own_db, f"{AGENTS}:mixed", run_ids))
    worker = WorkerProcess(own_db, done, lease=30.0, concurrency=2, slow=0.3)
    try:
        wait_for(lambda: len(worker.seen("claim")) == 2, what="two claims")
        worker.proc.send_signal(sig)
        assert worker.proc.wait(30) == code, worker.stderr()
    finally:
        worker.kill()
    assert len(worker.seen("released")) == 2
    with psycopg.connect(own_db) as conn:
        rows = conn.execute("SELECT holder, status FROM polyloop_runs WHERE run_id = ANY(%s)", (run_ids,)).fetchall()
    assert rows == [(None, "queued")] * 2, "a lease was left to lapse"
    if sig == signal.SIGINT:
        assert worker.stderr() == "polyloop: interrupted; every lease this worker held was released\n"
    else:
        assert worker.stderr() == ""


class Switch:
    """The upstream of a proxy that can refuse every new connection (a server that is down)."""

    def __init__(self, host: str, port: int) -> None:
        self.address = (host, port)
        self.down = False

    def __call__(self) -> socket.socket:
        if self.down:
            raise OSError("the server is down")
        return socket.create_connection(self.address)


def test_an_unreachable_server_is_reported_once_backed_off_and_without_raw_driver_warnings(own_db, tmp_path):
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(own_db)
    if (info.get("host") or "127.0.0.1").startswith("/"):
        pytest.skip("the proxy forwards TCP only; this server listens on a Unix socket")
    switch = Switch(info.get("host") or "127.0.0.1", int(info.get("port") or 5432))
    proxy = Proxy(switch)
    schema = info["options"].partition("search_path=")[2]
    via = with_search_path(f"postgresql://{info.get('user', 'postgres')}@127.0.0.1:{proxy.port}/{info['dbname']}", schema)
    done = tmp_path / "effects"
    [run_id] = fresh_ids("pgc-away", 1)
    asyncio.run(submit_runs(own_db, f"{AGENTS}:reads", [run_id]))
    worker = WorkerProcess(via, done, lease=1.0, slow=0.5, steps=12)
    try:
        wait_for(lambda: effects(done), what="the first tool call")
        # The server goes away mid-run: statements in flight hang, then every connection is cut
        # and no new one gets through, for several seconds (dozens of polls at 0.1 s).
        switch.down = True
        proxy.blackhole()
        time.sleep(1.5)
        proxy.cut()
        proxy.restore()
        time.sleep(5)
        errors = [e for _, e in worker.events if e["event"] == "error" and e["run_id"] is None]
        assert len(errors) == 1, f"the outage was reported {len(errors)} times: {errors}"
        assert "backing off up to 1 s" in errors[0]["detail"]
        switch.down = False
        wait_for(lambda: worker.seen("recovered"), timeout=10, what="the worker to see the store again")
        wait_for(lambda: worker.seen("finish", run_id), timeout=60, what="the run to finish")
        assert worker.stop() == 0
    finally:
        worker.kill()
        proxy.close()
    # psycopg's own warnings (`query cancellation failed: ...`) came as events, if at all, never raw.
    assert worker.stderr() == ""
    assert all(e["detail"].startswith("psycopg: ") for _, e in worker.events if e["event"] == "warning")
    with psycopg.connect(own_db) as conn:
        check_invariants(conn, run_id)


def test_a_parked_run_says_how_to_reach_its_store_and_that_a_worker_continues_it(own_db, tmp_path):
    import os
    import subprocess
    import sys

    payer = str(TESTS / "cli" / "approval_agents.py") + ":payer"
    [run_id] = fresh_ids("pgc-parked", 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYLOOP_")}
    env["APPROVAL_TEST_EFFECTS"] = str(tmp_path / "paid")
    polyloop = [sys.executable, "-m", "polyloop"]
    submitted = subprocess.run([*polyloop, "submit", payer, "--goal", "pay", "--run-id", run_id, "--store", own_db],
                               capture_output=True, text=True, env=env, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    work = subprocess.run([*polyloop, "worker", "--store", own_db, "--until-idle", "--poll", "0.05"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert work.returncode == 0, work.stderr
    [parked] = [line for line in work.stdout.splitlines() if line.startswith("parked")]
    assert "needs approval" in parked and "run them with --store 'postgresql://" in parked, parked
    assert "once settled, a worker continues the run" in parked


def _refused_in_one_line(done, *words: str) -> None:
    assert done.code == 2, done
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "internal error" not in err, err
    for word in words:
        assert word in err, err


def test_a_probe_that_cannot_be_served_is_refused_in_one_line_before_any_claim(own_db, tmp_path):
    from support.cli import polyloop_in_process as polyloop

    [run_id] = fresh_ids("pgc-probe", 1)
    asyncio.run(submit_runs(own_db, f"{AGENTS}:reads", [run_id]))
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _refused_in_one_line(polyloop("worker", "--store", own_db, "--until-idle", "--port", str(port)),
                             f"--port {port}", "in use")
    missing = tmp_path / "no-such-dir" / "health.json"
    _refused_in_one_line(polyloop("worker", "--store", own_db, "--until-idle", "--health", str(missing)),
                         str(missing))
    _refused_in_one_line(polyloop("worker", "--store", own_db, "--until-idle", "--health", str(tmp_path)),
                         str(tmp_path))
    with psycopg.connect(own_db) as conn:
        assert statuses(conn, [run_id]) == {run_id: "queued"}  # nothing was claimed
