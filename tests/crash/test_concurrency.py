"""Concurrent writers: real processes racing for one run id, and a live holder that gets killed.

* Processes that start the same run id at the same moment (lined up on a
  barrier file after importing everything): one runs, the others are
  refused with a clear error, and the world shows one run's side effects.
* The same race one level down, on the store's exclusive creation alone
  (no run lock): one `run_started` lands.
* A `resume` while the first process is alive is refused and names the
  live holder (a second `run` of the id is refused as well); after the holder is SIGKILLed
  the run resumes and ends as the uninterrupted run would.
"""

from __future__ import annotations

import os
import signal
import time

import orjson
from pathlib import Path

import pytest

import crashkit as ck
from polyloop.stores._jsonl import parse_log

ROUNDS = 3


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    return ck.golden_run(tmp_path_factory.mktemp("golden"))


def _line_up(w: ck.World, args_list: list[list[str]], barrier, variable: str = "POLYLOOP_BARRIER") -> list[ck.Proc]:
    """Start every process, wait until all are at the barrier, release them together."""
    env = {variable: str(barrier)}
    started = time.monotonic()
    procs = [w.spawn(args, env) for args in args_list]
    deadline = time.monotonic() + 30
    while sum(os.path.exists(f"{barrier}.{p.pid}.ready") for p in procs) < len(procs):
        assert time.monotonic() < deadline, "the contenders never reached the barrier"
        assert all(p.poll() is None for p in procs), [w.finish(p, a, started) for p, a in zip(procs, args_list)]
        time.sleep(0.002)
    barrier.touch()
    return [w.finish(p, args, started) for p, args in zip(procs, args_list)]


def test_processes_starting_the_same_run_at_once_one_runs_the_others_are_refused(tmp_path, golden, reliability):
    outcomes = []
    for r in range(ROUNDS):
        w = ck.World(tmp_path / f"round-{r}", in_process=False)
        args = [*ck.CLI, "run", w.target, "--run-id", ck.RUN_ID, "--goal", ck.GOAL, "--dir", str(w.dir)]
        procs = _line_up(w, [args] * 2, w.root / "go")
        winners = [p for p in procs if p.code == 0]
        losers = [p for p in procs if p.code != 0]
        assert len(winners) == 1, "\n".join(map(str, procs))
        for p in losers:
            assert p.code == 2, str(p)
            # Either it found the run held by the winner (named), or already created.
            assert ("is active" in p.err and "pid " in p.err) or "already exists" in p.err, str(p)
        outcomes += ["active" if "is active" in p.err else "exists" for p in losers]
        ck.audit(golden, w, ck.expect(golden, "after:run_finished:1"))  # one run's effects, no more
        assert w.tracebacks() == 0
        reliability.add("processes", len(w.procs))
        reliability.add("concurrency.contenders", len(procs))
    reliability.add("concurrency.same_id_rounds", ROUNDS)


def test_the_exclusive_creation_of_a_log_admits_one_writer(tmp_path, reliability):
    for r in range(ROUNDS):
        w = ck.World(tmp_path / f"round-{r}", in_process=False)
        args = [ck.PYTHON, str(ck.CHILD), "start-only", ck.RUN_ID, str(w.dir)]
        procs = _line_up(w, [args] * 4, w.root / "go")
        winners = [p for p in procs if p.code == 0]
        assert len(winners) == 1, "\n".join(map(str, procs))
        assert all(p.code == 2 and "already exists" in p.err for p in procs if p.code != 0)
        parsed = parse_log(w.log_path.read_bytes())
        assert not parsed.problems and parsed.torn_line is None
        (record,) = parsed.records
        winner_pid = orjson.loads(w.log_path.read_bytes())["goal"]
        assert record.goal == winner_pid
        assert sorted(os.listdir(w.dir)) == [f"{ck.RUN_ID}.jsonl"], "a loser left a temp file behind"
        reliability.add("processes", len(w.procs))
        reliability.add("concurrency.contenders", len(procs))
    reliability.add("concurrency.create_rounds", ROUNDS)


def test_a_live_holder_is_named_and_a_kill_releases_the_run(tmp_path, reliability):
    golden = ck.golden_run(tmp_path / "golden", "blocking_agent")
    w = ck.World(tmp_path / "w", "blocking_agent", in_process=False)
    block = w.root / "block"
    w.env["POLYLOOP_BLOCK"] = str(block)
    args = [*ck.CLI, "run", w.target, "--run-id", ck.RUN_ID, "--goal", ck.GOAL, "--dir", str(w.dir)]
    started = time.monotonic()
    holder = w.spawn(args)
    running = w.root / "block.running"
    while not running.exists():
        assert holder.poll() is None, w.finish(holder, args, started)
        assert time.monotonic() - started < 30
        time.sleep(0.005)
    try:
        for p in (w.resume(), w.resume()):
            assert p.code == 2, str(p)
            assert f"pid {holder.pid}" in p.err and "is active" in p.err, str(p)
        p = w.run()  # a second `run` of the id is refused too (it exists, whoever holds it)
        assert p.code == 2 and ("already exists" in p.err or f"pid {holder.pid}" in p.err), str(p)
        doc = w.inspect()
        assert doc["status"] == "active" and f"pid {holder.pid}" in doc["holder"], doc
        before = w.log_path.read_bytes()
    finally:
        holder.send_signal(signal.SIGKILL)
    p = w.finish(holder, args, started)
    assert p.killed
    assert w.log_path.read_bytes() == before, "a refused process wrote to the held run"
    block.touch()  # the world lets the tool finish this time
    assert w.inspect()["status"] == "resumable"
    assert w.recover() == ["resume:0"]
    ck.audit(golden, w, ck.expect(golden, "before:effect:1"))
    w.verify()
    assert w.tracebacks() == 0
    reliability.add("kills")
    reliability.add("runs_recovered")
    reliability.add("processes", len(w.procs))
    reliability.add("concurrency.refusals_naming_holder", 3)


def test_resumes_racing_after_a_crash_never_both_run(tmp_path, golden, reliability):
    for r in range(ROUNDS):
        w = ck.World(tmp_path / f"round-{r}", in_process=False)
        assert w.child_run(kill_at="after:intent:model_call:3").killed  # a safe step 3 left to do
        # The barrier stands before the command line starts: resume takes the
        # run's hold before it imports the agent.
        args = [ck.PYTHON, str(Path(__file__).with_name("barrier_cli.py")), "resume", ck.RUN_ID, "--dir", str(w.dir)]
        procs = _line_up(w, [args] * 2, w.root / "go", "POLYLOOP_CLI_BARRIER")
        # One resumes; the others are refused (held) or find it finished (exit 0, nothing run).
        assert all(p.code in (0, 2) for p in procs), "\n".join(map(str, procs))
        assert any(p.code == 0 for p in procs)
        for p in procs:
            if p.code == 2:
                assert "is active" in p.err and "pid " in p.err, str(p)
        ck.audit(golden, w, ck.expect(golden, "after:intent:model_call:3"))
        assert w.tracebacks() == 0
        reliability.add("kills")
        reliability.add("runs_recovered")
        reliability.add("processes", len(w.procs))
        reliability.add("concurrency.contenders", len(procs))
    reliability.add("concurrency.resume_rounds", ROUNDS)
