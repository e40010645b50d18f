"""Random kill soak: runs of a seven-step agent SIGKILLed at random moments until they finish.

Each run starts with `polyloop run`, and every process (the run and each
`resume`) is killed from outside with SIGKILL after a random delay, up to
`MAX_KILLS` times per run; after that it is left to finish. Nine kills in
ten are drawn over the time an uninterrupted run spends in the agent loop,
counted from the moment the process has loaded the agent; one in ten over
the interpreter's start-up. Exit 3 is settled through `inspect`
and `mark-resolved` by the side-effect file, as an operator would. Every
finished run must pass the same audit as the kill-point matrix (without a
per-point prediction: whatever happened must be explained by the log).

The wall-clock budget is `--soak-seconds` (or `$POLYLOOP_SOAK_SECONDS`,
default 20 s); `$POLYLOOP_SOAK_SEED` fixes the random seed. A failure
names the seed of the run that failed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import pytest

import crashkit as ck

MAX_KILLS = 6
SLOW = "0.01"  # seconds each tool and model call dawdles, so kills land inside them


def _loaded(marker, proc: subprocess.Popen, timeout: float = 30) -> bool:
    """Wait until the process has loaded the agent (or exited); True if it loaded."""
    path = f"{marker}.{proc.pid}"
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.001)
    return False


def soak_run(golden: ck.Golden, root, seed: int, startup: float, work: float) -> dict:
    rng = random.Random(seed)
    w = ck.World(root / f"run-{seed}", "soak_agent", extra_env={"POLYLOOP_SLOW": SLOW})
    marker = w.root / "loaded"
    w.env["POLYLOOP_STARTED"] = str(marker)
    kills = mid_run = rounds = 0
    while True:
        rounds += 1
        assert rounds < 40, f"seed {seed}: no end after {rounds} rounds"
        fresh = not w.log_path.exists()
        if fresh:
            args = [*ck.CLI, "run", w.target, "--run-id", ck.RUN_ID, "--goal", ck.GOAL, "--dir", str(w.dir)]
        else:
            args = [*ck.CLI, "resume", ck.RUN_ID, "--dir", str(w.dir)]
        size = 0 if fresh else w.log_path.stat().st_size
        started = time.monotonic()
        proc = w.spawn(args)
        if kills < MAX_KILLS:
            # Mostly inside the agent's work; now and then while the process starts up.
            if rng.random() < 0.1:
                delay = rng.uniform(0, startup)
            else:
                delay = rng.uniform(0, work) if _loaded(marker, proc) else 0
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
        p = w.finish(proc, args, started)
        if p.killed:
            kills += 1
            if w.log_path.exists() and w.log_path.stat().st_size > size:
                mid_run += 1  # the kill interrupted a run that was writing its log
            continue
        if p.code == 0:
            break
        assert p.code == 3, f"seed {seed}: unexpected exit\n{p}"
        w.settle()
    verdict = ck.audit(golden, w)
    return {"seed": seed, "kills": kills, "mid_run": mid_run, "verdict": verdict, "world": w}


@pytest.mark.slow  # a wall-clock budget of random kills: CI's second command runs it
def test_random_kills_never_repeat_or_lose_anything(tmp_path, soak_seconds, reliability):
    golden = ck.golden_run(tmp_path / "golden", "soak_agent")
    # How long one uninterrupted run takes through the CLI: the window kills are drawn from.
    timing = ck.World(tmp_path / "timing", "soak_agent", extra_env={"POLYLOOP_SLOW": SLOW})
    timing.env["POLYLOOP_STARTED"] = str(timing.root / "loaded")
    args = [*ck.CLI, "run", timing.target, "--run-id", ck.RUN_ID, "--goal", ck.GOAL, "--dir", str(timing.dir)]
    t0 = time.monotonic()
    proc = timing.spawn(args)
    assert _loaded(timing.root / "loaded", proc)
    startup = time.monotonic() - t0
    assert timing.finish(proc, args, t0).code == 0
    work = timing.procs[-1].seconds - startup

    base = int(os.environ.get("POLYLOOP_SOAK_SEED") or random.SystemRandom().randrange(10**9))
    deadline = time.monotonic() + soak_seconds
    lock = threading.Lock()
    results: list[dict] = []
    failures: list[str] = []
    counter = iter(range(10**9))

    def worker() -> None:
        while time.monotonic() < deadline and not failures:
            with lock:
                seed = base + next(counter)
            try:
                result = soak_run(golden, tmp_path, seed, startup, work)
            except AssertionError:
                with lock:
                    failures.append(f"seed {seed} (POLYLOOP_SOAK_SEED={seed} reproduces it as the "
                                    f"first run):\n{traceback.format_exc()}")
                return
            with lock:
                results.append(result)

    workers = max(2, os.cpu_count() or 2)
    with ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(worker) for _ in range(workers)]:
            f.result()

    worlds = [r["world"] for r in results]
    tracebacks = sum(w.tracebacks() for w in worlds)
    kills = sum(r["kills"] for r in results)
    reliability.add("soak.runs", len(results))
    reliability.add("soak.kills", kills)
    reliability.add("soak.kills_mid_run", sum(r["mid_run"] for r in results))
    reliability.add("soak.seconds", round(soak_seconds))
    reliability.add("kills", kills)
    reliability.add("runs_recovered", sum(1 for r in results if r["kills"]))
    reliability.add("processes", sum(len(w.procs) for w in worlds))
    reliability.add("tracebacks", tracebacks)
    reliability.add("never_duplicates", sum(r["verdict"].duplicates for r in results))
    reliability.add("silently_lost", sum(r["verdict"].lost for r in results))
    assert not failures, failures[0]
    assert tracebacks == 0, [str(p) for w in worlds for p in w.procs if ck.TRACEBACK in p.err]
    # One `polyloop verify --strict` over every log the soak produced.
    doc = timing.verify_all(tmp_path)
    assert doc["summary"]["ok"] == len(results) + 2  # + golden + timing
    # The soak must have soaked: enough runs, most of them killed mid-run.
    assert len(results) >= max(4, soak_seconds // 5), len(results)
    assert kills >= len(results), (kills, len(results))
