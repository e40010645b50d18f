"""`cancel` and `archive` on a PostgreSQL store, with real `polyloop` processes and a schema per test.

A live run (a `polyloop run --store`) is asked through a row of `polyloop_cancel_requests` and ends
as cancelled between steps; a stopped one ends now. `archive` exports runs to JSONL files that
`verify`, `ls` and `inspect` read as any run directory, deletes them in one transaction per run,
and refuses a run a live lease holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from support import forking

CLI = Path(__file__).resolve().parents[2] / "cli"
WORKER = f"{CLI / 'cancel_agents.py'}:worker"
FINISHING = f"{CLI / 'agents.py'}:finishing"


def polyloop_argv() -> list[str]:
    script = Path(sys.executable).with_name("polyloop")
    return [str(script)] if script.exists() else [sys.executable, "-m", "polyloop"]


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "FORCE_COLOR", "PYTEST_"))}
    return base | extra


def pl(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return forking.run([*polyloop_argv(), *args], capture_output=True, text=True, timeout=120, env=env(**extra),
                          stdin=subprocess.DEVNULL)


def steps_done(url: str, run_id: str) -> int:
    with psycopg.connect(url) as conn:
        try:
            row = conn.execute("SELECT count(*) FROM polyloop_records WHERE run_id = %s AND kind = 'step_completed'",
                               (run_id,)).fetchone()
        except psycopg.errors.UndefinedTable:  # the run has not created the schema yet
            return 0
    return int(row[0]) if row else 0


def test_a_live_run_on_postgres_is_asked_and_ends_cancelled_between_steps(pg_url: str, tmp_path: Path) -> None:
    world = tmp_path / "world"
    proc = subprocess.Popen([*polyloop_argv(), "run", WORKER, "--run-id", "live", "--goal", "g", "--store", pg_url],
                            env=env(POLYLOOP_TEST_WORLD=str(world)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while steps_done(pg_url, "live") < 3:
            assert time.monotonic() < deadline and proc.poll() is None, proc.poll()
            time.sleep(0.05)
        done = pl("cancel", "live", "--reason", "enough", "--by", "ops", "--wait", "--timeout", "60",
                  "--store", pg_url, "--json")
        assert done.returncode == 0, done
        doc = json.loads(done.stdout)
        assert doc["outcome"] == "cancelled" and doc["by"] == "ops" and doc["steps"] >= 3
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 1 and "cancelled by ops: enough" in err, (out, err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = world.read_text().splitlines()
    assert len([x for x in lines if x.startswith("start")]) == len([x for x in lines if x.startswith("end")])
    shown = json.loads(pl("inspect", "live", "--store", pg_url, "--json").stdout)
    assert shown["status"] == "finished" and shown["cancelled"]["why"] == "enough"
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM polyloop_cancel_requests").fetchone() == (0,)
        assert conn.execute("SELECT status FROM polyloop_runs WHERE run_id = 'live'").fetchone() == ("finished",)
    assert pl("verify", "--store", pg_url).returncode == 0


def test_a_stopped_run_on_postgres_ends_now(pg_url: str) -> None:
    stopped = pl("run", f"{CLI / 'agents.py'}:model_down", "--run-id", "down", "--goal", "g", "--store", pg_url)
    assert stopped.returncode == 1, stopped
    done = pl("cancel", "down", "--reason", "provider gone", "--store", pg_url, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["outcome"] == "cancelled", done
    listed = json.loads(pl("ls", "--store", pg_url, "--json").stdout)
    assert [(r["run_id"], r["status"], r["cause"].split(":")[0]) for r in listed] == [
        ("down", "finished", "cancelled by " + json.loads(done.stdout)["by"].split(":")[0])
    ]


def test_archive_exports_to_jsonl_and_deletes_in_one_transaction_per_run(pg_url: str, tmp_path: Path) -> None:
    for run_id in ("a", "b"):
        assert pl("run", FINISHING, "--run-id", run_id, "--goal", "g", "--store", pg_url).returncode == 0
    assert pl("run", f"{CLI / 'agents.py'}:model_down", "--run-id", "c", "--goal", "g",
              "--store", pg_url).returncode == 1
    with psycopg.connect(pg_url) as conn:
        before = {r: [row[0] for row in conn.execute(
            "SELECT body::text FROM polyloop_records WHERE run_id = %s ORDER BY seq", (r,))] for r in ("a", "b")}
    archive = tmp_path / "archive"
    done = pl("archive", "--finished", "--to", str(archive), "--store", pg_url, "--json")
    assert done.returncode == 0, done
    assert json.loads(done.stdout)["summary"] == {"archived": 2, "refused": 0}
    for run_id in ("a", "b"):  # the bytes the JSONL store would hold
        assert (archive / f"{run_id}.jsonl").read_text().splitlines() == before[run_id]
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT run_id FROM polyloop_runs ORDER BY run_id").fetchall() == [("c",)]
        assert conn.execute("SELECT DISTINCT run_id FROM polyloop_records").fetchall() == [("c",)]
    assert pl("verify", str(archive)).returncode == 0
    assert sorted(r["run_id"] for r in json.loads(pl("ls", "--dir", str(archive), "--json").stdout)) == ["a", "b"]
    assert pl("inspect", "a", "--dir", str(archive)).returncode == 0
    # Exported before a crash that came ahead of the delete's commit: archiving again finishes.
    (archive / "c.jsonl").write_bytes(b"")
    again = pl("archive", "c", "--to", str(archive), "--store", pg_url, "--json")
    assert again.returncode == 1 and "already has a different c.jsonl" in json.loads(again.stdout)["runs"][0]["reason"]
    (archive / "c.jsonl").unlink()
    assert pl("archive", "c", "--to", str(archive), "--store", pg_url).returncode == 0
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM polyloop_runs").fetchone() == (0,)


def test_archive_refuses_a_run_a_live_lease_holds(pg_url: str, tmp_path: Path) -> None:
    proc = subprocess.Popen([*polyloop_argv(), "run", WORKER, "--run-id", "held", "--goal", "g", "--store", pg_url],
                            env=env(POLYLOOP_TEST_WORLD=str(tmp_path / "world"), POLYLOOP_TEST_NAP="60",
                                    POLYLOOP_TEST_STEPS="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "world").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        done = pl("archive", "held", "--to", str(tmp_path / "archive"), "--store", pg_url, "--json")
        assert done.returncode == 1, done
        entry = json.loads(done.stdout)["runs"][0]
        assert entry["outcome"] == "refused" and "a live process holds it" in entry["reason"]
        assert not (tmp_path / "archive" / "held.jsonl").exists()
    finally:
        proc.kill()
        proc.communicate()


def test_a_run_a_worker_holds_is_asked_and_the_worker_ends_it_cancelled(pg_url: str, tmp_path: Path) -> None:
    import asyncio

    from pg_helpers import AGENTS, WorkerProcess, submit_runs, wait_for

    asyncio.run(submit_runs(pg_url, f"{AGENTS}:reads", ["q"]))
    worker = WorkerProcess(pg_url, tmp_path / "effects", lease=5, slow=0.05, steps=400)
    try:
        wait_for(lambda: steps_done(pg_url, "q") >= 3, what="the worker's run to make progress")
        done = pl("cancel", "q", "--reason", "drained", "--by", "ops", "--wait", "--timeout", "60",
                  "--store", pg_url, "--json")
        assert done.returncode == 0 and json.loads(done.stdout)["outcome"] == "cancelled", done
        finished = wait_for(lambda: worker.seen("finish", "q"), what="the worker to say the run finished")
        assert "cancelled by ops: drained" in json.dumps(finished[0][1])
    finally:
        worker.stop()
    steps = steps_done(pg_url, "q")
    assert 3 <= steps < 400
    shown = json.loads(pl("inspect", "q", "--store", pg_url, "--json").stdout)
    assert shown["status"] == "finished" and shown["cancelled"]["by"] == "ops" and shown["steps"] == steps
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT status FROM polyloop_runs WHERE run_id = 'q'").fetchone() == ("finished",)
