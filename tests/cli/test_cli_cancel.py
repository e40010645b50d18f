"""`polyloop cancel`, with real processes: a stopped run ends now, a live one at its next safe point.

The live runs are `cancel_agents.py:worker`, whose `never` tool leaves `start N` and `end N` in a
world file around a short sleep: a call cut by a cancel would leave a `start` without its `end`.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any
from pathlib import Path

import pytest
from cli_helpers import HERE, Cli, clean_env, console_script, logs_digest, target
from support import forking

WORKER = f"{HERE / 'cancel_agents.py'}:worker"


def start_worker(cli: Cli, run_id: str, world: Path, **env: str) -> Any:
    """`polyloop run` of the cancel agent, in its own process (a `subprocess.Popen`, or its forked stand-in)."""
    argv = [*console_script(), "run", WORKER, "--run-id", run_id, "--goal", "work", "--dir", str(cli.runs)]
    how: dict[str, Any] = dict(cwd=cli.cwd, env=clean_env(POLYLOOP_TEST_WORLD=str(world), **env),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    return forking.popen(argv, **how)


@pytest.fixture
def workers(cli: Cli) -> Iterator[Callable[..., Any]]:
    """`start_worker` for this test; whatever is still running when it ends is killed and reaped."""
    procs: list[Any] = []

    def start(run_id: str, world: Path, **env: str) -> Any:
        procs.append(start_worker(cli, run_id, world, **env))
        return procs[-1]

    yield start
    for proc in procs:
        proc.kill()
        proc.communicate(timeout=30)


def wait_for_steps(cli: Cli, run_id: str, steps: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cli.log(run_id).exists() and cli.log(run_id).read_text().count('"step_completed"') >= steps:
            return
        time.sleep(0.01)
    raise AssertionError(f"run {run_id} did not complete {steps} steps")


def calls(world: Path) -> tuple[set[str], set[str]]:
    lines = world.read_text().splitlines() if world.exists() else []
    return ({x[6:] for x in lines if x.startswith("start ")}, {x[4:] for x in lines if x.startswith("end ")})


def last(cli: Cli, run_id: str) -> dict:
    return cli.records(run_id)[-1]


def test_a_live_run_is_asked_and_stops_between_steps_never_inside_a_tool_call(
    cli: Cli, tmp_path: Path, workers: Callable[..., Any]
) -> None:
    world = tmp_path / "world"
    proc = workers("live", world)
    wait_for_steps(cli, "live", 3)
    done = cli("cancel", "live", "--reason", "superseded by live-2", "--by", "alice", "--dir", str(cli.runs),
               "--json")
    assert done.code == 0, done
    doc = done.json()
    # Asked; the run may have reached its safe point and ended before the command's own look.
    assert doc["schema"] == 1 and doc["outcome"] in ("requested", "cancelled") and doc["holder"].startswith("pid ")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, (out, err)  # the run ended, unfinished: cancelled
    assert "cancelled by alice: superseded by live-2" in err
    end = last(cli, "live")
    assert end["record"] == "run_finished" and end["reason"] == "cancelled"
    assert (end["by"], end["why"]) == ("alice", "superseded by live-2")
    assert end["steps"] < 200
    started, ended = calls(world)
    assert started == ended and len(started) == end["steps"]  # every call that started ended
    assert not (cli.runs / ".live.cancel").exists()  # the request is gone once the run has ended
    assert cli("verify", str(cli.runs)).code == 0
    shown = cli("inspect", "live", "--json").json()
    assert shown["status"] == "finished" and shown["reason"] == "cancelled"
    assert shown["cancelled"]["by"] == "alice" and shown["cancelled"]["why"] == "superseded by live-2"
    human = cli("inspect", "live")
    assert "cancelled after" in human.stdout and "by alice: superseded by live-2" in human.stdout


def test_wait_returns_once_the_live_run_has_ended(cli: Cli, tmp_path: Path, workers) -> None:
    proc = workers("w", tmp_path / "world")
    wait_for_steps(cli, "w", 2)
    done = cli("cancel", "w", "--reason", "stop now", "--wait", "--timeout", "60", "--dir", str(cli.runs))
    assert done.code == 0, done
    assert "cancelled: run w ended after" in done.stdout
    assert last(cli, "w")["reason"] == "cancelled"
    proc.communicate(timeout=60)


def test_wait_gives_up_after_its_timeout_while_a_tool_call_runs(cli: Cli, tmp_path: Path, workers) -> None:
    # The tool sleeps 60 s: no safe point comes; the request stays, the call is never cut.
    proc = workers("slow", tmp_path / "world", POLYLOOP_TEST_NAP="60", POLYLOOP_TEST_STEPS="2")
    deadline = time.monotonic() + 30
    while not (tmp_path / "world").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        done = cli("cancel", "slow", "--reason", "too slow", "--wait", "--timeout", "1", "--json",
                   "--dir", str(cli.runs))
        assert done.code == 1 and done.json()["outcome"] == "requested", done
        assert (cli.runs / ".slow.cancel").exists()
        assert last(cli, "slow")["record"] == "intent"  # nothing was written for the run by anyone else
    finally:
        proc.kill()
        proc.communicate(timeout=30)


@pytest.mark.parametrize("seed", range(6))
def test_cancel_and_sigkill_at_random_moments_lose_nothing(cli: Cli, tmp_path: Path, seed: int, workers) -> None:
    """A request at a random moment, a SIGKILL at another; then resume. The run ends cancelled, the
    only call ever cut is the one the SIGKILL cut (an unknown, on the record), and the log verifies."""
    rnd = random.Random(seed)
    world = tmp_path / "world"
    proc = workers("r", world, POLYLOOP_TEST_NAP="0.01")
    wait_for_steps(cli, "r", 1)
    time.sleep(rnd.uniform(0, 0.3))
    asked = cli("cancel", "r", "--reason", "random", "--by", "chaos", "--json", "--dir", str(cli.runs))
    assert asked.code == 0, asked
    time.sleep(rnd.choice([0.0, 0.0005, 0.002, 0.01, 0.05]))
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    records = cli.records("r")
    if records[-1]["record"] != "run_finished":
        resumed = cli("resume", "r", env={"POLYLOOP_TEST_WORLD": str(world)})
        # Either it reaches a safe point and ends cancelled (1), or the SIGKILL cut a `never` call
        # and it stops for an operator first (3): cancel then ends it now.
        assert resumed.code in (1, 3), resumed
        if resumed.code == 3:
            ended = cli("cancel", "r", "--reason", "random", "--by", "chaos", "--json", "--dir", str(cli.runs))
            assert ended.json()["outcome"] == "cancelled", ended
    end = last(cli, "r")
    assert end["record"] == "run_finished" and end["reason"] == "cancelled" and end["by"] == "chaos"
    started, ended_calls = calls(world)
    cut = started - ended_calls
    assert len(cut) <= 1  # only the SIGKILL can cut a call, and only once
    shown = cli("inspect", "r", "--json").json()
    unknown = {e["id"] for e in shown["executions"] if e["state"] == "unknown"}
    # A cut call is an unknown on the record, never lost; so is a call that ended in the world just
    # before the SIGKILL, its result not yet written. Either way, at most the one the SIGKILL hit.
    assert len(unknown) <= 1 and len(unknown) >= len(cut)
    assert cli("verify", str(cli.runs)).code == 0


def test_a_run_stopped_for_an_operator_is_ended_now_and_its_unknown_stays_unknown(cli, crashed_mailer) -> None:
    crashed_mailer("m")
    done = cli("cancel", "m", "--reason", "customer withdrew", "--by", "bob", "--dir", str(cli.runs))
    assert done.code == 0, done
    assert "cancelled: run m ended after 0 steps, cancelled by bob: customer withdrew" in done.stdout
    shown = cli("inspect", "m", "--json").json()
    assert shown["status"] == "finished" and shown["waiting"] == []
    assert [e["state"] for e in shown["executions"] if e["kind"] == "action"] == ["unknown"]
    again = cli("resume", "m")  # a finished run is never resumed: it says how it ended
    assert again.code == 1 and "had already finished after 0 steps: cancelled by bob: customer withdrew" in again.stderr
    assert cli("verify", str(cli.runs)).code == 0


def test_a_run_waiting_for_approval_is_ended_now(cli: Cli, tmp_path: Path) -> None:
    env = {"APPROVAL_TEST_EFFECTS": str(tmp_path / "effects")}
    agent = f"{HERE / 'approval_agents.py'}:payer"
    assert cli("run", agent, "--run-id", "p", "--goal", "pay", env=env).code == 3
    done = cli("cancel", "p", "--reason", "not this month", "--json", "--dir", str(cli.runs))
    assert done.code == 0 and done.json()["outcome"] == "cancelled" and done.json()["steps"] == 0, done
    assert cli("approve", "p", "s1-a1", "--reason", "late", "--dir", str(cli.runs)).code == 2
    assert not (tmp_path / "effects").exists()
    assert cli("verify", str(cli.runs)).code == 0
    assert cli("inspect", "p", "--json").json()["waiting"] == []


def test_a_finished_run_has_nothing_to_cancel_exit_0_and_nothing_written(cli: Cli) -> None:
    assert cli("run", target("finishing"), "--run-id", "f", "--goal", "g").code == 0
    before = logs_digest(cli.runs)
    done = cli("cancel", "f", "--reason", "late", "--dir", str(cli.runs))
    assert done.code == 0 and "nothing to cancel: run f had already finished (final_answer" in done.stderr
    doc = cli("cancel", "f", "--reason", "late", "--json", "--dir", str(cli.runs)).json()
    assert doc["outcome"] == "already_finished" and doc["reason"] == "final_answer"
    assert logs_digest(cli.runs) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "--reason", "x"], "no run 'nope'"),
        (["f", "--reason", "  "], "the reason (--reason) is blank"),
        (["f", "--reason", "x", "--by", "\t"], "who decides (--by) is blank"),
        (["../f", "--reason", "x"], "run id"),
        (["f"], "--reason"),
    ],
)
def test_bad_cancels_exit_2_and_write_nothing(cli: Cli, args: list[str], message: str) -> None:
    assert cli("run", target("model_down"), "--run-id", "f", "--goal", "g").code == 1
    before = logs_digest(cli.runs)
    done = cli("cancel", *args, "--dir", str(cli.runs))
    assert done.code == 2 and message in done.stderr, done
    assert logs_digest(cli.runs) == before


def test_cancel_json_errors_are_json(cli: Cli) -> None:
    done = cli("cancel", "ghost", "--reason", "x", "--json", "--dir", str(cli.runs))
    assert done.code == 2
    assert json.loads(done.stdout)["error"]


def test_the_python_function_is_the_same_one(tmp_path: Path) -> None:
    import asyncio

    from polyloop import InvalidInputError, JsonlStore, RunNotFoundError, cancel

    async def go() -> None:
        async with JsonlStore(tmp_path / "runs") as store:
            with pytest.raises(RunNotFoundError, match="no run 'missing'"):
                await cancel(store, "missing", reason="x")
            with pytest.raises(InvalidInputError, match="blank"):
                await cancel(store, "missing", reason="\u200b")

    asyncio.run(go())
