"""Kill `archive` before every file-system change it makes: each run stays whole in exactly one place.

A calibration archive of three runs (a finished one with two products, a finished one without,
an unfinished one with a product and a pending request to stop) lists every call of the move that
changes the file system. For each of them a real child process (`archive_child.py`) is SIGKILLed
just before that call. Then: every run's log is in exactly one of the two directories, its products
whole beside it (`verify` finds every log ok, products included), `ls` lists each run once across
both; and the next archive finishes the job, leaving nothing of the runs behind in the source.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import forking

from polyloop import list_runs, verify_file, verify_logs

HERE = Path(__file__).resolve().parent
CHILD = HERE / "archive_child.py"
AGENTS = HERE.parent / "cli"
RUNS = ("prod", "plain", "half")


def polyloop(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("polyloop")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "polyloop"]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "PYTEST_"))}
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=120, env=base | env,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("archive-world")
    runs = root / "runs"
    pipeline = f"{AGENTS / 'artifact_agents.py'}:pipeline"
    assert polyloop("run", pipeline, "--run-id", "prod", "--goal", "g", "--dir", str(runs)).returncode == 0
    assert polyloop("run", f"{AGENTS / 'agents.py'}:finishing", "--run-id", "plain", "--goal", "g",
                    "--dir", str(runs)).returncode == 0
    died = polyloop("run", pipeline, "--run-id", "half", "--goal", "g", "--dir", str(runs),
                    POLYLOOP_TEST_DIE_AT_CALL="2")
    assert died.returncode == -9, died
    (runs / ".half.cancel").write_text('{"by": "al", "why": "later", "at": "2026-12-03T00:00:00Z"}\n')
    assert sorted(p.name for p in (runs / "prod.artifacts").iterdir()) == ["extract.json", "summary.txt"]
    return root


def child(world: Path, kill: int) -> tuple[int, list[str]]:
    ops = world / f"ops-{kill}"
    proc = forking.run([sys.executable, str(CHILD), str(world / "runs"), str(world / "archive"), str(kill),
                           str(ops), *RUNS], capture_output=True, text=True, timeout=120)
    return proc.returncode, ops.read_text().splitlines() if ops.exists() else []


def fresh(world: Path, dest: Path) -> Path:
    shutil.copytree(world / "runs", dest / "runs")
    return dest


def whole_in_one_place(w: Path) -> dict[str, Path]:
    """Each run's log in exactly one directory, `verify` happy with it there (products included)."""
    where: dict[str, Path] = {}
    for run_id in RUNS:
        homes = [d for d in (w / "runs", w / "archive") if (d / f"{run_id}.jsonl").exists()]
        assert len(homes) == 1, (run_id, homes)
        where[run_id] = homes[0]
        verdict = verify_file(homes[0] / f"{run_id}.jsonl")
        assert verdict.status == "ok", (run_id, verdict)
        if run_id == "prod":
            assert {p.state for p in verdict.products} == {"ok"} and len(verdict.products) == 2
    for d in (w / "runs", w / "archive"):
        if d.exists():
            assert not verify_logs(d).failed()
    listed = [s.run_id for d in (w / "runs", w / "archive") if d.exists() for s in list_runs(d, workers=1)]
    assert sorted(listed) == sorted(RUNS)
    return where


def calibrated(world: Path, tmp_path: Path) -> list[str]:
    """The move's file-system changes, in order, from an archive that nothing kills."""
    calibration = fresh(world, tmp_path / "calibration")
    code, ops = child(calibration, 0)
    assert code == 0, ops
    assert {r: d.name for r, d in whole_in_one_place(calibration).items()} == {r: "archive" for r in RUNS}
    assert len(ops) >= 20, ops
    assert any(" rename " in op and op.endswith("prod.jsonl") for op in ops)
    return ops


def killed_before(world: Path, tmp_path: Path, ops: list[str], kill: int) -> None:
    """Kill the move before its change number `kill`: every run whole in one place, and the next
    archive finishes what the kill cut short, leaving nothing of the runs behind."""
    w = fresh(world, tmp_path / f"k{kill}")
    code, seen = child(w, kill)
    assert code == -9 and len(seen) == kill, (kill, code, seen[-3:])
    whole_in_one_place(w)
    code, _ = child(w, 0)
    assert code == 0, kill
    assert {r: d.name for r, d in whole_in_one_place(w).items()} == {r: "archive" for r in RUNS}, kill
    left = sorted(p.name for p in (w / "runs").iterdir())
    assert left == [], (kill, ops[kill - 1], left)
    assert not [p for p in (w / "archive").iterdir() if p.name.endswith(".staging")], kill
    assert (w / "archive" / ".half.cancel").exists(), kill  # the request moved with its run
    if kill in (1, len(ops) // 2, len(ops)):  # and the command line agrees, on both directories
        for d in ("runs", "archive"):
            assert polyloop("verify", str(w / d)).returncode == 0
            assert polyloop("ls", "--dir", str(w / d)).returncode == 0


def test_a_kill_before_a_sample_of_the_moves_changes_leaves_every_run_whole_in_one_place(
        world: Path, tmp_path: Path) -> None:
    """Seven kills spread over the move (its first, middle and last change among them); CI's slow
    tests kill before every one."""
    ops = calibrated(world, tmp_path)
    n = len(ops)
    for kill in sorted({1, 2, n // 4, n // 2, 3 * n // 4, n - 1, n}):
        killed_before(world, tmp_path, ops, kill)


@pytest.mark.slow
def test_a_kill_before_any_change_of_the_move_leaves_every_run_whole_in_one_place(world: Path, tmp_path: Path) -> None:
    ops = calibrated(world, tmp_path)
    for kill in range(1, len(ops) + 1):
        killed_before(world, tmp_path, ops, kill)


def test_a_held_run_is_refused_and_stays(world: Path, tmp_path: Path) -> None:
    w = fresh(world, tmp_path / "held")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)", str(w / "runs" / ".plain.lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        done = polyloop("archive", *RUNS, "--to", str(w / "archive"), "--dir", str(w / "runs"), "--json")
        assert done.returncode == 1, done
        outcome = {r["run_id"]: r["outcome"] for r in json.loads(done.stdout)["runs"]}
        assert outcome == {"prod": "archived", "plain": "refused", "half": "archived"}
        assert (w / "runs" / "plain.jsonl").exists() and not (w / "archive" / "plain.jsonl").exists()
    finally:
        holder.kill()
        holder.communicate()
