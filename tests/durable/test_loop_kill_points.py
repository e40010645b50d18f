"""The crash matrix of a user's loop: a hand-written loop and a Pydantic AI agent, SIGKILLed at every write.

Each kill is a real SIGKILL of a real child process (`loop_child.py`) before or after one write
of the run; recovery is the operator's CLI (`worlds.World.recover`). Two telling points run by
default (a model call paid and not recorded; a `never` call's intent without its result); CI's
`pytest -m slow` runs every one, for both loops.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from worlds import MATRIX, World  # noqa: E402

if os.environ.get("CI") != "true":
    pytest.importorskip("pydantic_ai")


def test_an_uninterrupted_run_pays_each_call_once(tmp_path):
    loop = "hand"
    world = World(tmp_path, loop)
    assert world.child() == 0
    world.check(None)


@pytest.mark.parametrize("point", MATRIX)
@pytest.mark.parametrize("loop", ["hand", "pyd"])
def test_a_loop_killed_at_a_write_resumes_without_paying_twice(tmp_path, loop, point):
    world = World(tmp_path, loop)
    assert world.child(point) == -9, f"the child was not killed at {point}"
    world.recover()
    world.check(point)


def test_a_loop_whose_logic_changed_is_refused_with_exit_4_naming_the_divergence(tmp_path):
    world = World(tmp_path, "hand")
    assert world.child("after:step_completed:1") == -9
    world.env["DURABLE_CHANGED"] = "1"
    refused = world.cli("resume", "loop-run")
    assert refused.code == 4, refused.stderr
    assert "diverged from its log at step 1" in refused.stderr and "pay({'amount': 4})" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert [e["args"] for e in world.ledger("effects.jsonl")] == [{"q": "gas"}, {"amount": 3}]  # nothing more ran
    del world.env["DURABLE_CHANGED"]
    assert world.cli("resume", "loop-run").code == 0
