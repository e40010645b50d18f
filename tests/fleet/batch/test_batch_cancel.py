"""A run of a batch cancelled while the batch runs it: it ends at a safe point, the batch reports who
and why, goes on with its other runs, and a re-run leaves it ended. `ls --batch` lists the batch's runs."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from batch_helpers import env, polyloop

from support import forking

WORKER = str(Path(__file__).resolve().parents[2] / "cli" / "cancel_agents.py") + ":worker"


def test_a_cancelled_run_of_a_batch_ends_on_the_record_and_the_batch_goes_on(tmp_path: Path) -> None:
    goals = tmp_path / "goals.txt"
    goals.write_text("first\nsecond\n")
    runs = tmp_path / "runs"
    world = env(POLYLOOP_TEST_WORLD=str(tmp_path / "world"), POLYLOOP_TEST_STEPS="150", POLYLOOP_TEST_NAP="0.03")
    argv = [*polyloop(), "batch", WORKER, str(goals), "--name", "b", "--dir", str(runs), "--processes", "1", "--json"]
    how: dict = dict(cwd=tmp_path, env=world, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     stdin=subprocess.DEVNULL)
    batch = forking.popen(argv, **how)  # forked from the test zygote
    try:
        deadline = time.monotonic() + 60
        log = runs / "b-00001.jsonl"
        while not (log.exists() and log.read_text().count('"step_completed"') >= 3):
            assert time.monotonic() < deadline and batch.poll() is None
            time.sleep(0.02)
        done = forking.run([*polyloop(), "cancel", "b-00001", "--reason", "one is enough", "--by", "ops",
                               "--wait", "--timeout", "60", "--dir", str(runs), "--json"],
                              capture_output=True, text=True, env=env(), timeout=90)
        assert done.returncode == 0 and json.loads(done.stdout)["outcome"] == "cancelled", done
        out, err = batch.communicate(timeout=120)
    finally:
        if batch.poll() is None:
            batch.kill()
            batch.communicate()
    assert batch.returncode == 0, err
    report = {r["run_id"]: r for r in json.loads(out)["runs"]}
    assert report["b-00001"]["status"] == "finished"
    assert report["b-00001"]["reason"].startswith("cancelled by ops: one is enough; the run is over")
    assert report["b-00002"]["reason"] == "final_answer" and report["b-00002"]["steps"] == 151
    again = forking.run(argv, cwd=tmp_path, env=world, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again
    first = json.loads(again.stdout)["runs"][0]
    assert (first["run_id"], first["status"], first["steps"]) == ("b-00001", "finished", report["b-00001"]["steps"])
    assert first["reason"].startswith("cancelled by ops")  # over: never resumed by a re-run
    listed = forking.run([*polyloop(), "ls", "--batch", "b", "--dir", str(runs), "--json"], capture_output=True,
                            text=True, env=env(), timeout=60)
    assert sorted((r["run_id"], r["cause"]) for r in json.loads(listed.stdout)) == [
        ("b-00001", "cancelled by ops: one is enough"), ("b-00002", None)]
    unknown = forking.run([*polyloop(), "ls", "--batch", "nope", "--dir", str(runs)], capture_output=True,
                             text=True, env=env(), timeout=60)
    assert unknown.returncode == 2 and "no batch 'nope'" in unknown.stderr
