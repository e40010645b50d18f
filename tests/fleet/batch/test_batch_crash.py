"""A batch killed with SIGKILL at random points — the parent, or one worker — and re-run until done.

Every run of `stamper` does two `never` actions, each leaving one fsync'd line in
the world's effects file. After the kills, the re-runs and the settlements (made
from the effects file, the world's truth, never from the log), the oracle holds:
every line finished and appears once in the summary; every `never` action of
every run left one line in the effects file — none twice, none lost; every log verifies.

Each test kills `ROUNDS` times in the default suite (`BATCH_CRASH_ROUNDS` sets
it) and more under the `slow` marker (CI's `pytest -m slow`); the
seed of each test is printed on failure.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import pytest
from batch_helpers import World, check_oracle, kill_group

LINES = 24
ROUNDS = int(os.environ.get("BATCH_CRASH_ROUNDS") or 2)


def _kills(slow_rounds: int) -> pytest.MarkDecorator:
    """A small sample of kills by default, more where CI runs the slow tests."""
    return pytest.mark.parametrize("rounds", [ROUNDS, pytest.param(slow_rounds, marks=pytest.mark.slow)])


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def _finish(world: World, goals: Path, run_ids: list[str], reliability) -> None:
    """Re-run (settling parked runs from the effects file) until the batch exits 0; check the oracle."""
    for _ in range(10):
        done = world.batch("stamper", goals, "--json", "--processes", "2", BATCH_SLOW="0")
        assert done.code in (0, 3), done
        if done.code == 0:
            break
        reliability.add("batch: settled from the effects file", world.settle())
    assert done.code == 0, done
    reliability.add("batch: completions checked")
    check_oracle(world, done.json(), run_ids)


def _started(world: World, runs: int, proc, limit: float = 60.0) -> None:
    """Wait until `runs` runs of the batch have a log (or the batch ended)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if world.runs.is_dir() and sum(1 for _ in world.runs.glob("*.jsonl")) >= runs:
            return
        time.sleep(0.005)


@_kills(8)
def test_the_parent_killed_at_random_points_then_rerun_until_done(world, reliability, rounds):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    goals = world.goals([f"goal {n}" for n in range(1, LINES + 1)])
    run_ids = [f"goals-{n:05d}" for n in range(1, LINES + 1)]
    kills = 0
    for _ in range(rounds):
        proc = world.spawn("stamper", goals, "--json", "--processes", "2", "--concurrency", "4",
                           BATCH_SLOW="0.02")
        try:
            # Kill once a random number of runs has started (not after a random time: on a fast
            # machine the whole batch can end before any fixed delay, and nothing is tested).
            _started(world, rng.randint(1, LINES), proc)
            time.sleep(rng.uniform(0, 0.05))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)  # the parent only: its workers must die with it
                kills += 1
            proc.communicate(timeout=60)
        finally:
            kill_group(proc)
        if proc.returncode == 3:
            reliability.add("batch: settled from the effects file", world.settle())
    reliability.add("batch: parent SIGKILLs", kills)
    assert kills, f"seed {seed}: the batch always ended before the kill; nothing was tested"
    _finish(world, goals, run_ids, reliability)


@_kills(4)  # more kills may end one run's worker 3 times: it is then failed (exit 1), by design
def test_one_worker_killed_at_random_points_is_replaced_and_its_runs_resumed(world, reliability, rounds):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    pids = world.root / "pids"
    goals = world.goals([f"goal {n}" for n in range(1, LINES + 1)])
    run_ids = [f"goals-{n:05d}" for n in range(1, LINES + 1)]
    proc = world.spawn("stamper", goals, "--json", "--processes", "2", "--concurrency", "3",
                       BATCH_SLOW="0.05", BATCH_PIDS=str(pids))
    killed: set[int] = set()
    try:
        for _ in range(rounds):
            live = _workers(pids, proc.pid, killed)
            deadline = time.monotonic() + 30
            while not live and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)  # the replacement of the last victim is still starting
                live = _workers(pids, proc.pid, killed)
            time.sleep(rng.uniform(0.05, 0.4))
            live = [pid for pid in live if _alive(pid)]
            if proc.poll() is not None or not live:
                break
            victim = rng.choice(live)
            os.kill(victim, signal.SIGKILL)
            killed.add(victim)
        out, err = proc.communicate(timeout=120)
    finally:
        kill_group(proc)
    assert killed, f"seed {seed}: no worker was killed"
    assert proc.returncode in (0, 3), f"seed {seed}: {err}{out[-3000:]}"
    reliability.add("batch: worker SIGKILLs", len(killed))
    doc = json.loads(out)
    assert doc["restarts"] >= 1 or doc["outcome"] == "finished", doc
    if proc.returncode == 3:
        reliability.add("batch: settled from the effects file", world.settle())
    _finish(world, goals, run_ids, reliability)


def _workers(pids: Path, parent: int, killed: set[int]) -> list[int]:
    found = (int(p.name) for p in pids.glob("*")) if pids.exists() else iter(())
    return sorted(pid for pid in found if pid != parent and pid not in killed and _alive(pid))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
