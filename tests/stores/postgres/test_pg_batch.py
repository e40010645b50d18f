"""`polyloop batch --store postgresql://...`: runs in the database, re-run is resume, kills survived.

Mirrors tests/fleet/batch/test_batch_crash.py at a small size: the real `polyloop
batch` in subprocesses, the parent killed with SIGKILL at random points (its
worker processes die with it, their leases lapse), then re-run — settling
parked runs from the world's effects file, never from the log — until it
exits 0. The oracle: every line finished once in the summary; every `never`
action of every run left exactly one line in the effects file (none twice,
none lost); every run's rows are contiguous with epochs never decreasing and
one terminal record; `verify --store` finds nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pg_helpers import check_invariants
from polyloop import inspect_run, mark_resolved
from polyloop.stores import PostgresStore
from support.cli import Done, console_script
from support import TESTS
from support import forking

AGENTS = TESTS / "fleet" / "batch" / "agents.py"
LINES = 12
ROUNDS = int(os.environ.get("BATCH_CRASH_ROUNDS") or 2)  # kills in the default suite; 6 under `slow`
LEASE = "1"


@dataclass
class World:
    root: Path
    url: str

    @property
    def effects_path(self) -> Path:
        return self.root / "effects.ndjson"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "BATCH_", "PYTEST_", "FORCE_COLOR"))}
        env.pop("COLUMNS", None)
        env.update(BATCH_EFFECTS=str(self.effects_path), **extra)
        return env

    def goals(self, lines: list[str], name: str = "goals.txt") -> Path:
        path = self.root / name
        path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        return path

    def argv(self, agent: str, goals: Path, *args: str) -> list[str]:
        workers = () if "--processes" in args else ("--processes", "1")
        return [*console_script(), "batch", f"{AGENTS}:{agent}", str(goals), "--store", self.url, *workers, *args]

    def batch(self, agent: str, goals: Path, *args: str, timeout: float = 120, **extra: str) -> Done:
        proc = forking.run(self.argv(agent, goals, *args), cwd=self.root, env=self.env(**extra),
                           capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return Done(proc.returncode, proc.stdout, proc.stderr)

    def spawn(self, agent: str, goals: Path, *args: str, **extra: str) -> subprocess.Popen[str] | forking.Forked:
        argv = self.argv(agent, goals, *args)
        how: dict = dict(cwd=self.root, env=self.env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        return forking.popen(argv, **how)  # forked from the test zygote

    def effects(self) -> list[dict]:
        if not self.effects_path.exists():
            return []
        return [json.loads(line) for line in self.effects_path.read_text().splitlines() if line.strip()]

    def settle(self) -> int:
        """Settle every unknown `never` action by the effects file (the world's truth, not the log)."""
        happened = {(e["run_id"], e["result_id"]) for e in self.effects()}

        async def go() -> int:
            settled = 0
            async with PostgresStore(self.url) as store:
                for run_id in await store.list_runs():
                    report = await inspect_run(store, run_id)
                    if report.status != "needs_operator":
                        continue
                    assert report.recovery is not None
                    for e in report.recovery.blocking:
                        executed = (run_id, e.result_id) in happened
                        await mark_resolved(
                            store, run_id, e.result_id, executed=executed,
                            observation=f"stamped {e.args['label']}" if executed else None,
                            reason="checked the effects file", by="test",
                        )
                        settled += 1
            return settled

        return asyncio.run(go())


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _check_oracle(world: World, doc: dict, run_ids: list[str]) -> None:
    entries = doc["runs"]
    assert [e["run_id"] for e in entries] == run_ids, entries
    assert {e["status"] for e in entries} == {"finished"}, [e for e in entries if e["status"] != "finished"]
    assert doc["outcome"] == "finished" and doc["summary"]["finished"] == len(run_ids)
    per_action = Counter((e["run_id"], e["step"]) for e in world.effects())
    twice = {k: n for k, n in per_action.items() if n > 1}
    assert not twice, f"never actions executed twice: {twice}"
    expected = {(rid, step) for rid in run_ids for step in (2, 3)}
    assert set(per_action) == expected, f"lost: {sorted(expected - set(per_action))}"
    with psycopg.connect(world.url, autocommit=True) as conn:
        for run_id in run_ids:
            check_invariants(conn, run_id)
    verified = forking.run([*console_script(), "verify", "--store", world.url, "--json"], capture_output=True,
                              text=True, timeout=60, env=world.env())
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["summary"]["corrupt"] == 0


@pytest.mark.parametrize("rounds", [ROUNDS, pytest.param(6, marks=pytest.mark.slow)])
def test_a_batch_on_postgresql_killed_at_random_points_then_rerun_until_done(own_db, tmp_path, reliability, rounds):
    world = World(tmp_path, own_db)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    goals = world.goals([f"goal {n}" for n in range(1, LINES + 1)])
    run_ids = [f"goals-{n:05d}" for n in range(1, LINES + 1)]
    kills = 0
    for _ in range(rounds):
        before = len(world.effects())
        proc = world.spawn("stamper", goals, "--json", "--processes", "2", "--concurrency", "3",
                           "--lease", LEASE, BATCH_SLOW="0.1")
        try:
            # Kill once work is under way (startup on a busy machine takes a while), at a random point.
            deadline = time.monotonic() + 30
            while len(world.effects()) == before and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.4))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)  # the parent only: its workers must die with it
                kills += 1
            proc.communicate(timeout=60)
        finally:
            _kill_group(proc)
        if proc.returncode == 3:
            reliability.add("batch on PostgreSQL: settled from the effects file", world.settle())
    reliability.add("batch on PostgreSQL: parent SIGKILLs", kills)
    assert kills, f"seed {seed}: the batch always ended before the kill; nothing was tested"
    for _ in range(10):
        done = world.batch("stamper", goals, "--json", "--processes", "2", "--lease", LEASE, BATCH_SLOW="0")
        assert done.code in (0, 3), (seed, done)
        if done.code == 0:
            break
        reliability.add("batch on PostgreSQL: settled from the effects file", world.settle())
    assert done.code == 0, (seed, done)
    _check_oracle(world, done.json(), run_ids)


def _shape(doc: dict) -> list[tuple]:
    return [(e["run_id"], e["line"], e["status"], e["steps"], e["reason"], e["action"]) for e in doc["runs"]]


def test_rerun_is_resume_and_a_changed_goal_is_reported_as_on_a_directory(own_db, tmp_path):
    world = World(tmp_path, own_db)
    goals = world.goals(["goal 1", "goal 2", "goal 3"])
    on_db = world.batch("quick", goals, "--json")
    on_dir = forking.run(
        [*console_script(), "batch", f"{AGENTS}:quick", str(goals), "--dir", str(tmp_path / "runs"),
         "--processes", "1", "--json"],
        cwd=tmp_path, env=world.env(), capture_output=True, text=True, timeout=120,
    )
    assert on_db.code == on_dir.returncode == 0, (on_db, on_dir.stderr)
    assert _shape(on_db.json()) == _shape(json.loads(on_dir.stdout))
    assert {e["action"] for e in on_db.json()["runs"]} == {"started"}
    again = world.batch("quick", goals, "--json")
    assert again.code == 0 and {e["action"] for e in again.json()["runs"]} == {"skipped"}, again
    with psycopg.connect(own_db, autocommit=True) as conn:
        (runs,) = conn.execute("SELECT runs FROM polyloop_batches WHERE name = 'goals'").fetchone()
    assert sorted(runs) == ["goals-00001", "goals-00002", "goals-00003"]
    goals.write_text("goal 1\ngoal two, changed\n", encoding="utf-8")
    changed = world.batch("quick", goals, "--json")
    assert changed.code == 1, changed
    by_id = {e["run_id"]: e for e in changed.json()["runs"]}
    assert by_id["goals-00001"]["status"] == "finished"
    assert by_id["goals-00002"]["status"] == "changed" and "goals file changed" in by_id["goals-00002"]["reason"]
    assert by_id["goals-00003"]["status"] == "changed" and "is gone" in by_id["goals-00003"]["reason"]
    text = world.batch("quick", goals)
    assert f"--store {own_db!r}" in text.stdout.replace("\n", " ") or f"--store {own_db}" in text.stdout, text.stdout


def test_one_live_invocation_per_batch_and_a_killed_one_lets_go(own_db, tmp_path):
    world = World(tmp_path, own_db)
    goals = world.goals(["goal 1"])
    first = world.spawn("stamper", goals, "--json", "--lease", LEASE, BATCH_SLOW="3")
    try:
        deadline = time.monotonic() + 30
        with psycopg.connect(own_db, autocommit=True) as conn:
            def started() -> bool:
                if not conn.execute("SELECT to_regclass('polyloop_runs') IS NOT NULL").fetchone()[0]:
                    return False
                return bool(conn.execute("SELECT 1 FROM polyloop_runs WHERE next_seq > 0").fetchall())

            while not started():
                assert first.poll() is None and time.monotonic() < deadline, first.communicate()
                time.sleep(0.05)
        second = world.batch("stamper", goals, timeout=60)
        assert second.code == 2, second
        lines = second.stderr.splitlines()
        assert len(lines) == 1 and "batch goals is already running against" in lines[0], second.stderr
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    finally:
        _kill_group(first)
    # The server dropped the killed invocation's hold: the next one runs (and settles what it can).
    third = world.batch("stamper", goals, "--json", "--lease", LEASE)
    assert third.code in (0, 3), third


def test_a_bad_or_unreachable_store_gives_the_error_every_command_gives(tmp_path):
    world = World(tmp_path, "postgresql://nobody:secret@127.0.0.1:1/nothing")
    goals = world.goals(["goal 1"])
    done = world.batch("quick", goals, timeout=60)
    inspected = forking.run([*console_script(), "inspect", "x", "--store", world.url], capture_output=True,
                               text=True, timeout=60, env=world.env())
    assert done.code == inspected.returncode == 1, done
    assert done.stderr.splitlines() == inspected.stderr.splitlines() and len(done.stderr.splitlines()) == 1
    assert "secret" not in done.stderr
    bad = World(tmp_path, "postgresql://bad url").batch("quick", goals, "--json", timeout=60)
    assert bad.code == 1 and bad.json()["error"]["type"] == "StoreError", bad
    lease_on_dir = forking.run(
        [*console_script(), "batch", f"{AGENTS}:quick", str(goals), "--dir", str(tmp_path / "runs"), "--lease", "2"],
        capture_output=True, text=True, timeout=60, env=world.env(),
    )
    assert lease_on_dir.returncode == 2 and "--lease applies to a PostgreSQL store" in lease_on_dir.stderr


def test_ctrl_c_releases_every_lease_and_the_rerun_resumes_at_once(own_db, tmp_path):
    world = World(tmp_path, own_db)
    goals = world.goals(["goal 1", "goal 2", "goal 3"])
    # Each tool waits 1 s: no run can finish (look + 2 stamps take over 4 s) before the Ctrl-C, which the
    # runs under way answer by ending the call they are in (within 1 s).
    proc = world.spawn("stamper", goals, "--json", BATCH_SLOW="1")
    try:
        deadline = time.monotonic() + 30
        while not world.effects_path.exists() and not _held(own_db):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        _kill_group(proc)
    assert proc.returncode == 130, err
    assert json.loads(out)["summary"]["interrupted"] == 3
    assert _held(own_db) == []  # every lease given back, none left to lapse
    started = time.monotonic()
    again = world.batch("stamper", goals, "--json", BATCH_SLOW="0")
    assert again.code in (0, 3), again
    assert time.monotonic() - started < 15, "the re-run waited for leases a clean stop should have released"


def _held(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        if not conn.execute("SELECT to_regclass('polyloop_runs') IS NOT NULL").fetchone()[0]:
            return []
        rows = conn.execute(
            "SELECT run_id FROM polyloop_runs WHERE holder IS NOT NULL AND lease_until > clock_timestamp()"
        ).fetchall()
    return [r[0] for r in rows]


def test_another_target_starts_nothing_and_the_recorded_target_stays(own_db, tmp_path):
    world = World(tmp_path, own_db)
    goals = world.goals(["goal 1"])
    assert world.batch("quick", goals).code == 0
    world.goals(["goal 1", "goal 2"])
    done = world.batch("stamper", goals, "--json")
    assert done.code == 1, done
    runs = done.json()["runs"]
    assert [(r["status"], r["action"]) for r in runs] == [("changed", "none")] * 2
    assert all(f"{AGENTS}:quick" in r["reason"] and f"{AGENTS}:stamper" in r["reason"] for r in runs), runs
    assert world.effects() == []
    with psycopg.connect(own_db, autocommit=True) as conn:
        (recorded, names) = conn.execute(
            "SELECT target, ARRAY(SELECT jsonb_object_keys(runs)) FROM polyloop_batches WHERE name = 'goals'"
        ).fetchone()
    assert (recorded, names) == (f"{AGENTS}:quick", ["goals-00001"])
    assert world.batch("quick", goals).code == 0  # the recorded target carries on, with the new line
