"""`polyloop batch` as a user runs it: output, exit codes, re-running as the resume, changed and bad lines."""

from __future__ import annotations

import os

import asyncio
import json
import shlex
import signal
import subprocess
import time

import pytest
from batch_helpers import World, kill_group, polyloop, target

from polyloop import BatchReport, JsonlStore, inspect_run, run_batch
from support import TESTS, forking


@pytest.fixture
def world(tmp_path) -> World:
    return World(tmp_path)


def test_every_line_runs_and_the_same_command_again_skips_them(world):
    goals = world.goals(["first goal", "", "second goal", "third goal"])
    done = world.batch("quick", goals, "--processes", "2")
    assert done.code == 0, done
    assert "finished           3" in done.stdout and "done: every run finished" in done.stdout
    assert sorted(p.name for p in world.runs.glob("*.jsonl")) == [
        "goals-00001.jsonl", "goals-00003.jsonl", "goals-00004.jsonl"
    ]
    again = world.batch("quick", goals, "--json")
    assert again.code == 0, again
    doc = json.loads(again.stdout)  # exactly one document: json.loads refuses trailing text
    assert doc["summary"] == {
        "total": 3, "finished": 3, "needs_operator": 0, "failed": 0, "corrupt": 0,
        "invalid": 0, "changed": 0, "active": 0, "interrupted": 0, "unavailable": 0,
    }
    assert doc["name"] == "goals" and doc["processes"] == 1 and doc["concurrency"] == 16
    assert doc["outcome"] == "finished" and doc["steps"] == 0
    assert [(r["run_id"], r["line"], r["status"], r["steps"], r["action"]) for r in doc["runs"]] == [
        ("goals-00001", 1, "finished", 2, "skipped"),
        ("goals-00003", 3, "finished", 2, "skipped"),
        ("goals-00004", 4, "finished", 2, "skipped"),
    ]
    assert set(doc["runs"][0]) >= {"run_id", "line", "status", "steps", "reason"}


def test_bad_lines_are_reported_per_line_and_the_rest_runs(world):
    path = world.root / "evals.jsonl"
    path.write_text(
        '{"goal": "fine"}\n'
        "not json at all\n"
        '{"goal": "escape", "run_id": "../../etc/x"}\n'
        '{"goal": "with inputs", "inputs": ["a.txt"]}\n'
        '{"goal": "also fine", "run_id": "custom-id"}\n'
    )
    done = world.batch("quick", path)
    assert done.code == 1, done
    assert "line 2, evals-00002: the line is not JSON" in done.stdout
    assert "line 3, (no run id): invalid run id '../../etc/x'" in done.stdout
    assert 'line 4, evals-00004: "inputs" must be an object' in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert sorted(p.name for p in world.runs.glob("*.jsonl")) == ["custom-id.jsonl", "evals-00001.jsonl"]
    assert not (world.root / "etc").exists()
    doc = world.batch("quick", path, "--json").json()
    assert [r["status"] for r in doc["runs"]] == ["finished", "invalid", "invalid", "invalid", "finished"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope.txt"], "no goals file nope.txt"),
        (["blank.txt"], "the goals file blank.txt has no goals"),
        (["goals.txt", "--name", "../x"], "invalid batch name"),
        (["goals.txt", "--concurrency", "0"], "--concurrency"),
        (["goals.txt", "--processes", "0"], "--processes"),
    ],
    ids=["missing-file", "blank-file", "bad-name", "zero-concurrency", "zero-processes"],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(world, args, message):
    world.goals(["a"])
    (world.root / "blank.txt").write_text("\n   \n")
    argv = [*polyloop(), "batch", target("quick"), *args, "--dir", str(world.runs)]
    done = forking.run(argv, cwd=world.root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert message in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert not world.runs.exists()  # not a log, a manifest or a hold file, not even the directory


def test_a_bad_target_exits_2_before_anything_is_written(world):
    goals = world.goals(["a"])
    done = world.batch("no_such_agent", goals, "--json")
    assert done.code == 2
    assert done.json()["error"]["type"] == "TargetError"
    assert not any(world.runs.glob("*.jsonl")) if world.runs.exists() else True


def test_a_changed_goals_file_is_reported_per_line_and_never_mixed(world):
    goals = world.goals(["alpha", "beta", "gamma"])
    assert world.batch("quick", goals).code == 0
    world.goals(["alpha", "BETA (edited)", "gamma", "delta"])
    doc = world.batch("quick", goals, "--json").json()
    by_line = {r["line"]: r for r in doc["runs"]}
    assert by_line[2]["status"] == "changed" and "goals file changed" in by_line[2]["reason"]
    assert [by_line[n]["status"] for n in (1, 3)] == ["finished", "finished"]
    assert by_line[4]["status"] == "changed" and by_line[4]["action"] == "none"  # not while line 2 differs
    assert doc["outcome"] == "failed"
    # The run of line 2 still holds the goal it started with.
    first = json.loads((world.runs / "goals-00002.jsonl").read_text().splitlines()[0])
    assert first["goal"] == "beta"

    world.goals(["alpha", "beta"])  # restore line 2; line 3 is gone (line 4 never started)
    done = world.batch("quick", goals)
    assert done.code == 1
    assert "line 3, goals-00003: the goals file changed: line 3 (run goals-00003) is gone" in done.stdout
    assert "then: do what each line above says" in done.stdout  # a plain re-run would change nothing
    world.goals(["alpha", "beta", "gamma", "delta"])
    assert world.batch("quick", goals).code == 0


def test_a_log_with_another_goal_is_changed_even_without_a_manifest(world):
    goals = world.goals(["alpha"])
    assert world.batch("quick", goals).code == 0
    (world.runs / ".batch-goals.json").unlink()
    world.goals(["omega"])
    doc = world.batch("quick", goals, "--json").json()
    assert doc["runs"][0]["status"] == "changed"
    assert "exists with another goal" in doc["runs"][0]["reason"]


def test_a_failed_run_exits_1_and_is_listed(world):
    goals = world.goals(["x"])
    done = world.batch("broken", goals)
    assert done.code == 1
    assert "line 1, goals-00001: the run ended in an error" in done.stdout
    assert "then: run the same command again" in done.stdout


def test_a_worker_killed_after_a_never_action_parks_the_run_with_its_settle_commands(world):
    goals = world.goals(["one", "two", "three"])
    done = world.batch("stamper", goals, "--processes", "1", "--concurrency", "1", BATCH_KILL_ONCE=str(world.root / "killed"))
    assert done.code == 3, done
    assert "1 worker restart" in done.stdout
    lines = done.stdout.splitlines()
    commands = [line.strip().split("  #")[0] for line in lines if line.strip().startswith("polyloop mark-resolved")]
    assert len(commands) == 2, done.stdout
    executed = commands[0]
    assert executed.endswith(f"--executed --reason TEXT --dir {shlex.quote(str(world.runs))}")
    # The killed worker's other runs were resumed by a new worker and finished.
    doc = world.batch("stamper", goals, "--json").json()
    assert doc["summary"]["finished"] == 2 and doc["summary"]["needs_operator"] == 1
    parked = next(r for r in doc["runs"] if r["status"] == "needs_operator")
    assert parked["action"] == "skipped" and parked["waiting"][0]["tool"] == "stamp"
    assert parked["commands"][0] == executed  # the JSON carries the same commands
    assert doc["next"].startswith("polyloop batch ")
    # The effect happened (the world says so): settle it with the printed command, re-run.
    pasted = shlex.split(executed.replace("TEXT", "stamped"))[1:]  # the operator gives the reason
    settle = forking.run([*polyloop(), *pasted], cwd=world.root, capture_output=True, text=True, timeout=60)
    assert settle.returncode == 0, settle
    final = world.batch("stamper", goals, "--json")
    assert final.code == 0, final
    stamps = [(e["run_id"], e["step"]) for e in world.effects()]
    assert len(stamps) == len(set(stamps)) == 6


def test_a_run_that_keeps_killing_its_worker_fails_after_three_deaths(world):
    report = run_batch(target("killer"), ["doomed"], name="k", directory=world.runs, processes=1, concurrency=1)
    assert report.runs[0].status == "failed" and report.restarts == 3
    assert "its worker process died 3 times" in report.runs[0].reason
    assert "killed by signal 9" in report.runs[0].reason
    assert (world.runs / "k-00001.jsonl").exists()  # it stays resumable, like any crashed run


def test_a_second_invocation_of_a_running_batch_exits_2_and_runs_nothing(world):
    from polyloop._fleet.manifest import batch_lock

    goals = world.goals(["a"])
    world.runs.mkdir()
    with batch_lock(world.runs, "goals"):
        done = world.batch("quick", goals)
    assert done.code == 2, done
    assert "batch goals is already running" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not any(world.runs.glob("*.jsonl"))


def test_a_run_held_elsewhere_is_reported_active(world):
    store = JsonlStore(world.runs)

    async def hold() -> BatchReport:
        async with store.lock("held-00001"):
            return await asyncio.to_thread(
                run_batch, target("quick"), ["a", "b"], name="held", directory=world.runs,
                processes=1, wait_active=0.2,
            )

    report = asyncio.run(hold())
    assert [r.status for r in report.runs] == ["active", "finished"]
    assert "is active" in report.runs[0].reason and report.outcome == "failed"


def test_ctrl_c_exits_130_leaves_everything_resumable_and_a_rerun_completes(world):
    run_ids = [f"goals-{n:05d}" for n in range(1, 9)]
    goals = world.goals([f"goal {n}" for n in range(1, 9)])
    proc = world.spawn("stamper", goals, "--json", "--processes", "2", "--concurrency", "2", BATCH_SLOW="0.3")
    try:
        deadline = time.monotonic() + 60
        while not world.effects():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        kill_group(proc, signal.SIGINT)  # Ctrl-C reaches the whole process group
        out, err = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 130, err
    doc = json.loads(out)
    assert doc["outcome"] == "interrupted" and doc["killed"] is False
    assert doc["summary"]["interrupted"] >= 1 and doc["summary"]["needs_operator"] == 0
    assert "Traceback" not in err
    # The runs under way ended the action they were in: none waits for a person.
    for run_id in run_ids:
        if (world.runs / f"{run_id}.jsonl").exists():
            assert asyncio.run(inspect_run(JsonlStore(world.runs), run_id)).status in ("finished", "resumable")
    done = world.batch("stamper", goals, "--json", BATCH_SLOW="0")
    assert done.code == 0, done  # nothing to settle
    from batch_helpers import check_oracle

    check_oracle(world, done.json(), run_ids)


def test_ctrl_c_stops_a_batch_whose_tool_blocks_its_thread_and_a_rerun_completes(world):
    goals = world.goals(["a", "b"])
    started = world.root / "started"
    proc = world.spawn("sleeper", goals, "--json", BATCH_STARTED=str(started))
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        kill_group(proc, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 130, err
    assert json.loads(out)["outcome"] == "interrupted"
    assert "stopping:" in err and "Traceback" not in err
    done = world.batch("sleeper", goals, "--json", BATCH_BLOCK="0")
    assert done.code == 0, done
    assert [r["status"] for r in done.json()["runs"]] == ["finished", "finished"]


def test_the_python_api_is_what_the_command_calls(world):
    seen = []
    report = run_batch(target("quick"), ["a", "b", "c"], name="api", directory=world.runs,
                       processes=1, concurrency=2, progress=seen.append)
    assert report.outcome == "finished" and report.counts["finished"] == 3
    assert [r.run_id for r in report.runs] == ["api-00001", "api-00002", "api-00003"]
    assert report.steps == 6
    assert seen[-1].done == 3 and seen[-1].total == 3 and seen[-1].eta == 0.0
    assert json.loads(json.dumps(report.to_json()))["summary"]["total"] == 3
    again = run_batch(target("quick"), ["a", "b", "c"], name="api", directory=world.runs)
    assert {r.action for r in again.runs} == {"skipped"} and again.steps == 0


def test_a_line_with_inputs_records_them_and_a_changed_input_is_reported_changed(world):
    doc = world.root / "doc.txt"
    doc.write_text("version 1")
    path = world.root / "evals.jsonl"
    path.write_text(json.dumps({"goal": "read it", "inputs": {"doc": str(doc)}}) + "\n")
    first = world.batch("hostile", path, "--json").json()  # its model call fails: the run stays resumable
    assert first["runs"][0]["status"] == "failed", first
    started = json.loads((world.runs / "evals-00001.jsonl").read_text().splitlines()[0])
    assert started["config"]["inputs"]["doc"]["path"] == str(doc.resolve())
    size = (world.runs / "evals-00001.jsonl").stat().st_size
    doc.write_text("version 2")
    again = world.batch("hostile", path, "--json").json()
    (run,) = again["runs"]
    assert run["status"] == "changed" and "input 'doc'" in run["reason"], run
    assert (world.runs / "evals-00001.jsonl").stat().st_size == size  # refused before anything ran


def test_a_goals_file_emptied_after_a_run_reports_its_lines_gone(world):
    goals = world.goals(["a", "b"])
    assert world.batch("quick", goals).code == 0
    goals.write_text("\n")
    done = world.batch("quick", goals, "--json")
    assert done.code == 1, done
    doc = done.json()
    assert [r["status"] for r in doc["runs"]] == ["changed", "changed"]
    assert all("is gone" in r["reason"] for r in doc["runs"])


def test_json_is_the_one_document_on_stdout_even_when_the_agent_prints_as_it_loads(world):
    noisy = world.root / "noisy.py"
    noisy.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(target('quick').rpartition(':')[0].rpartition('/')[0])!r})\n"
        "print('loading the noisy agent')\n"
        "from agents import quick as agent\n",
        encoding="utf-8",
    )
    goals = world.goals(["a", "b"])
    proc = forking.run(
        [*polyloop(), "batch", f"{noisy}:agent", str(goals), "--dir", str(world.runs), "--processes", "1", "--json"],
        cwd=world.root, env=world.env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc
    assert json.loads(proc.stdout)["outcome"] == "finished"
    assert "loading the noisy agent" in proc.stderr


def test_a_run_waiting_for_approval_or_an_answer_gets_the_commands_that_settle_it(world):
    agents = TESTS / "cli" / "approval_agents.py"
    for agent, expected in (("payer", ["polyloop approve", "polyloop deny"]), ("asker", ["polyloop answer"])):
        goals = world.goals(["g"], name=f"{agent}.txt")
        proc = forking.run(
            [*polyloop(), "batch", f"{agents}:{agent}", str(goals), "--dir", str(world.runs), "--processes", "1"],
            cwd=world.root, env=world.env(APPROVAL_TEST_EFFECTS=str(world.root / "paid")),
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 3, proc
        commands = [line.strip() for line in proc.stdout.splitlines()
                    if line.strip().startswith("polyloop ") and not line.strip().startswith("polyloop batch")]
        run_id = f"{agent}-00001"
        assert [c.split(" ")[:3] for c in commands] == [[*e.split(" "), run_id] for e in expected], proc.stdout
        assert "inspect says how" not in proc.stdout


def test_a_crash_loop_is_settled_by_resume_accept_crash_loop():
    from cli.batch import _settle
    from polyloop import BatchRun

    crash = {"id": "r-1", "kind": "crash_loop", "tool": "die", "args": None, "step": 1}
    run = BatchRun("r-1", 1, "needs_operator", 0, "it keeps dying", "resumed", (crash,))
    [(command, _)] = _settle(run, "elsewhere")
    # a directory other than the default is named by its absolute path: the command works pasted anywhere
    assert command == f"polyloop resume r-1 --accept-crash-loop --reason TEXT --dir {os.path.abspath('elsewhere')}"


def test_the_api_looks_where_the_command_looks(world, monkeypatch):
    monkeypatch.chdir(world.root)
    monkeypatch.setenv("POLYLOOP_DIR", str(world.root / "by-dir"))
    monkeypatch.setenv("POLYLOOP_STORE", str(world.root / "by-store"))
    report = run_batch(target("quick"), ["a"], name="env", processes=1)
    assert report.outcome == "finished"
    assert (world.root / "by-store" / "env-00001.jsonl").exists() and not (world.root / "by-dir").exists()
