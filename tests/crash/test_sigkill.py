"""Real processes, real SIGKILL: an unknown `never` action stops resume; a `safe` one replays."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from polyloop import JsonlStore, NeedsOperatorError, classify, mark_resolved
from polyloop._run.target import load_target

AGENT = textwrap.dedent(
    """
    import os, signal
    from pathlib import Path
    from polyloop import Agent, ScriptedModel, tool

    EFFECTS = Path(os.environ["EFFECTS"])

    def side_effect(name):
        with EFFECTS.open("a") as f:
            f.write(name + "\\n")
            f.flush()
            os.fsync(f.fileno())
        if os.environ.get("KILL_AFTER") == name:
            os.kill(os.getpid(), signal.SIGKILL)
        return "wrote " + name

    @tool
    def write(name: str) -> str:
        "A side effect that must not repeat."
        return side_effect(name)

    @tool(replay="safe")
    def read(name: str) -> str:
        "An idempotent read."
        return side_effect(name)

    SCRIPT = [
        {"tool": "read", "args": {"name": "r1"}},
        {"tool": "write", "args": {"name": "w2"}},
        {"tool": "read", "args": {"name": "r3"}},
        {"final": "done"},
    ]
    agent = Agent(model=ScriptedModel(SCRIPT), tools=[read, write])
    """
)

RUN = "import asyncio, sys; from polyloop import JsonlStore; from polyloop._run.target import load_target; " \
      "asyncio.run(load_target(sys.argv[1]).run('goal', run_id='r', store=JsonlStore(sys.argv[2]), target=sys.argv[1]))"


@pytest.fixture
def world(tmp_path):
    target = tmp_path / "crashy.py"
    target.write_text(AGENT)
    effects = tmp_path / "effects.txt"
    return f"{target}:agent", JsonlStore(tmp_path / "runs"), effects


def run_child(world, kill_after):
    target, store, effects = world
    env = {**os.environ, "EFFECTS": str(effects), "KILL_AFTER": kill_after}
    return subprocess.run([sys.executable, "-c", RUN, target, str(store.directory)], env=env, timeout=60)


def effects_of(world):
    return world[2].read_text().split()


def resume(world):
    target, store, effects = world
    os.environ["EFFECTS"] = str(effects)
    os.environ.pop("KILL_AFTER", None)
    try:
        return asyncio.run(load_target(target).run(run_id="r", store=store))
    finally:
        os.environ.pop("EFFECTS", None)


def test_sigkill_after_a_never_side_effect_stops_resume_with_the_action_listed(world):
    proc = run_child(world, "w2")
    assert proc.returncode == -signal.SIGKILL
    assert effects_of(world) == ["r1", "w2"]
    with pytest.raises(NeedsOperatorError) as info:
        resume(world)
    (e,) = info.value.executions
    assert (e.tool, e.args, e.result_id) == ("write", {"name": "w2"}, "s2-a1")
    assert effects_of(world) == ["r1", "w2"]  # not repeated
    store = world[1]
    asyncio.run(mark_resolved(store, "r", "s2-a1", executed=True, observation="wrote w2"))
    assert resume(world).text == "done"
    assert effects_of(world) == ["r1", "w2", "r3"]
    assert classify(asyncio.run(store.read_log("r"))).status == "finished"


def test_sigkill_after_a_safe_side_effect_is_replayed_on_resume(world):
    proc = run_child(world, "r3")
    assert proc.returncode == -signal.SIGKILL
    assert effects_of(world) == ["r1", "w2", "r3"]
    assert resume(world).text == "done"
    assert effects_of(world) == ["r1", "w2", "r3", "r3"]  # the safe read ran again
    recovery = classify(asyncio.run(world[1].read_log("r")))
    assert [(e.result_id, e.state) for e in recovery.steps[2].actions] == [("s3-a1", "superseded"), ("s3-a2", "done")]
