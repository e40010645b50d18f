"""Faults between the worker and the server: a frozen client, a partition, cut connections, a restart.

The restart runs only against a throwaway server this test starts itself
(from the `pgserver` package), never against a shared one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pg_helpers import (
    AGENTS,
    private_dir,
    WorkerProcess,
    check_effects,
    check_invariants,
    effects,
    fresh_ids,
    statuses,
    submit_runs,
    wait_for,
)
from pg_proxy import Proxy
from polyloop.stores import PostgresStore
from test_pg_workers import finish_all

LEASE = 1.0

FROZEN = """
import asyncio, os, signal, sys
from polyloop.stores import PostgresStore

async def main(url, run_id, lease):
    store = PostgresStore(url, lease=float(lease))
    await store.list_runs()
    conn = await store._conns.connect()  # a session with the library's own limits
    await conn.set_autocommit(False)
    await conn.execute("SELECT 1 FROM polyloop_runs WHERE run_id = %s FOR UPDATE", (run_id,))
    print(conn.info.backend_pid, flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)

asyncio.run(main(*sys.argv[1:]))
"""


def test_a_client_frozen_in_a_transaction_is_reaped_and_others_proceed(pg_url, pg_conn, tmp_path):
    done = tmp_path / "effects"
    locked, free = fresh_ids("pgf-frozen", 2)
    asyncio.run(submit_runs(pg_url, f"{AGENTS}:reads", [locked, free]))
    frozen = subprocess.Popen([sys.executable, "-c", FROZEN, pg_url, locked, "3"], stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        backend = int(frozen.stdout.readline())
        worker = WorkerProcess(pg_url, done, lease=LEASE, slow=0.01, steps=2)
        wait_for(lambda: statuses(pg_conn, [locked, free]) == {locked: "finished", free: "finished"},
                 what="both runs to finish")
        [(free_done, _)] = worker.seen("finish", free)
        [(locked_claimed, _)] = worker.seen("claim", locked)
        assert free_done < locked_claimed, f"the free run waited for the frozen client: {worker.events}"
        assert worker.seen("error", locked), "the claim behind the frozen client should have timed out"
        alive = pg_conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (backend,)).fetchone()
        assert alive == (0,), "the server did not reap the frozen session"
        assert worker.stop() == 0
    finally:
        os.kill(frozen.pid, signal.SIGKILL)
        frozen.wait()
        frozen.stdout.close()
        if worker is not None:
            worker.kill()
    for run_id in (locked, free):
        check_invariants(pg_conn, run_id)


def _upstream(url: str):
    info = conninfo_to_dict(url)
    host, port = info.get("host") or "127.0.0.1", int(info.get("port") or 5432)
    if host.startswith("/"):  # a Unix socket directory (the pgserver fallback)

        def connect() -> socket.socket:
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(f"{host}/.s.PGSQL.{port}")
            return sock

        return connect, info
    return lambda: socket.create_connection((host, port)), info


@pytest.fixture
def proxy(pg_url):
    upstream, info = _upstream(pg_url)
    p = Proxy(upstream)
    user = f"{info['user']}@" if info.get("user") else ""
    options = f"?options={quote(info['options'])}" if info.get("options") else ""
    yield p, f"postgresql://{user}127.0.0.1:{p.port}/{info.get('dbname', '')}{options}"
    p.close()


def test_a_partitioned_worker_stops_and_its_late_writes_are_refused(pg_url, pg_conn, tmp_path, proxy):
    proxy, via_proxy = proxy
    done = tmp_path / "effects"
    [run_id] = fresh_ids("pgf-partition", 1)
    asyncio.run(submit_runs(pg_url, f"{AGENTS}:reads", [run_id]))
    first = WorkerProcess(via_proxy, done, lease=LEASE, slow=0.3)
    second = None
    try:
        wait_for(lambda: effects(done), what="the first tool call")
        proxy.blackhole()
        ran = len([e for e in effects(done) if e[4] == first.pid])
        second = WorkerProcess(pg_url, done, lease=LEASE, slow=0.01)
        wait_for(lambda: statuses(pg_conn, [run_id])[run_id] == "finished", what="the takeover to finish")
        before = check_invariants(pg_conn, run_id)
        proxy.restore()  # the held writes arrive now, late
        wait_for(lambda: first.seen("lost", run_id), timeout=20, what="the partitioned worker to stop")
        time.sleep(LEASE)
        assert check_invariants(pg_conn, run_id) == before, "a late write of the old holder landed"
        assert len([e for e in effects(done) if e[4] == first.pid]) == ran, "the partitioned worker ran a tool"
        assert second.stop() == 0
    finally:
        first.kill()
        if second is not None:
            second.kill()
    check_effects(pg_conn, [run_id], done)


async def test_a_claim_cancelled_while_its_answer_is_on_the_way_gives_the_lease_back(pg_url, proxy):
    # Ctrl-C of a batch cancels runs wherever they are, claims included: one
    # whose statement committed but whose answer had not arrived left its
    # lease held until it lapsed, and the re-run had to wait for it.
    proxy, via_proxy = proxy
    [run_id] = fresh_ids("pgf-cancelled-claim", 1)
    store, watcher = PostgresStore(via_proxy, lease=60), PostgresStore(pg_url)
    try:
        await store.holder(run_id)  # connected, schema checked: only the claim is left to send
        proxy.hold_replies()
        claim = asyncio.create_task(store.claim(run_id))
        deadline = time.monotonic() + 10
        while await watcher.holder(run_id) is None:  # the claim has committed on the server
            assert time.monotonic() < deadline and not claim.done(), "the claim never reached the server"
            await asyncio.sleep(0.01)
        claim.cancel()
        await asyncio.sleep(0.1)
        proxy.restore()
        with pytest.raises(asyncio.CancelledError):
            await claim
        assert await watcher.holder(run_id) is None, "a cancelled claim kept its lease"
    finally:
        proxy.restore()
        await store.aclose()
        await watcher.aclose()


def test_connections_cut_mid_run_lose_nothing(pg_url, pg_conn, tmp_path, proxy):
    proxy, via_proxy = proxy
    done = tmp_path / "effects"
    run_ids = fresh_ids("pgf-cut", 2)
    asyncio.run(submit_runs(pg_url, f"{AGENTS}:mixed", run_ids))
    worker = WorkerProcess(via_proxy, done, lease=LEASE, concurrency=2, slow=0.1, steps=8)
    try:
        # Two cuts while the runs are going (a third one waited for the 10th tool call, which
        # never comes when both runs are parked at a `never` action the cuts left unknown).
        for n in (2, 6):
            wait_for(lambda: len(effects(done)) >= n, timeout=60, what=f"{n} tool calls")
            proxy.cut()
        finish_all(pg_url, pg_conn, run_ids, done, worker)
        assert worker.seen("error"), "cutting the connections should have failed a write"
        assert worker.stop() == 0
    finally:
        worker.kill()
    for run_id in run_ids:
        check_invariants(pg_conn, run_id)
    check_effects(pg_conn, run_ids, done)


@pytest.fixture
def throwaway_server(monkeypatch):
    # pgserver asks platformdirs for a runtime directory, which warns without one.
    runtime = private_dir("runtime")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    try:
        import pgserver
        from pgserver._commands import POSTGRES_BIN_PATH
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("the pgserver package is needed for the restart test")
        pytest.skip("the pgserver package is not installed")
    server = pgserver.get_server(private_dir("throwaway"), cleanup_mode="delete")
    url = server.get_uri()
    sockets = conninfo_to_dict(url)["host"]

    def pg_ctl(*args: str) -> tuple[int, str]:
        with tempfile.TemporaryFile("w+") as out:  # a pipe would be held open by the server
            done = subprocess.run([str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(server.pgdata), *args],
                                  user=server.system_user, stdout=out, stderr=subprocess.STDOUT, timeout=60)
            out.seek(0)
            return done.returncode, out.read()

    def restart() -> None:
        # Two steps rather than `restart`: the start then has a log file and a clear error.
        code, text = pg_ctl("stop", "-m", "immediate", "-w")
        assert code == 0, text
        for _ in range(5):  # the old postmaster may still hold its lock for a moment
            code, text = pg_ctl("start", "-w", "-l", str(server.pgdata / "log"), "-o", f'-h "" -k {sockets}')
            if code == 0:
                return
            time.sleep(0.5)
        raise AssertionError(f"the throwaway server did not start again: {text}")

    try:
        yield url, restart
    finally:
        server.cleanup()
        shutil.rmtree(runtime, ignore_errors=True)


def test_an_immediate_server_restart_loses_no_acknowledged_record(throwaway_server, tmp_path):
    url, restart = throwaway_server
    done = tmp_path / "effects"
    run_ids = fresh_ids("pgf-restart", 2)
    asyncio.run(submit_runs(url, f"{AGENTS}:mixed", run_ids))
    worker = WorkerProcess(url, done, lease=2.0, concurrency=2, slow=0.1, steps=8)
    try:
        wait_for(lambda: len(effects(done)) >= 5, timeout=30, what="a few tool calls")
        restart()  # as after a power cut: only what was flushed survives
        with psycopg.connect(url, autocommit=True) as conn:
            finish_all(url, conn, run_ids, done, worker)
            assert worker.seen("error"), "the restart should have failed a write or a renewal"
            assert worker.stop() == 0
            for run_id in run_ids:
                check_invariants(conn, run_id)
            # Every tool call started after its intent was acknowledged: all those intents survived.
            check_effects(conn, run_ids, done)
    finally:
        worker.kill()
