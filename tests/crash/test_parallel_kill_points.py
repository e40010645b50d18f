"""Kill points inside steps of several tool calls: a real SIGKILL, recovery through the CLI.

`crash_agent.parallel_agent` asks for three calls at once (two `never`
writes around a safe read), then two (a read and a write), then answers.
The calls of a step run concurrently in threads, so which call is the N-th
side effect differs from run to run: killing "after effect 2" lands between
the calls' intents and results in whatever order the threads took.

For every point a child process runs the agent and SIGKILLs itself there;
the harness recovers as an operator would (resume; on exit 3 settle every
waiting call by the ground truth, the effects file; resume) and audits:

* every `never` call's side effect happened once and only once (by idempotency
  key), none was lost, and no call ran before its intent was durable;
* the recovered log verifies, finishes with the final answer after three
  steps, and each step lists one outcome per call, in the model's order.
"""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import crashkit as ck

AGENT = "parallel_agent"
NEVER = {"w1", "w2", "w3"}
SAFE = {"r1", "r2"}

ALL_POINTS = (
    [f"{when}:intents:{n}" for n in (1, 2) for when in ("before", "after")]
    + [f"{when}:effect:{n}" for n in range(1, 6) for when in ("before", "after")]
    + [f"after:action_result:{n}" for n in (1, 2, 3, 5)]
    + ["before:step_completed:1", "before:step_completed:2", "after:model_call_result:2"]
)
POINTS = ck.sampled(ALL_POINTS, 10)  # POLYLOOP_ALL_KILL_POINTS=1: every one


def _intent_lines(w: ck.World) -> dict[str, int]:
    """Line number of each action intent in the log (by result id)."""
    lines = w.log_path.read_bytes().splitlines()
    found = {}
    for i, r in enumerate(w.records()):
        if getattr(r, "kind", None) == "action" and r.TAG == "intent":
            found[r.result_id] = i
    assert len(found) <= len(lines)
    return found


def scenario(root: Path, point: str) -> str | None:
    """Kill at `point`, recover, audit; returns what went wrong (None: nothing)."""
    w = ck.World(root / point.replace(":", "_"), AGENT)
    killed = w.child_run(kill_at=point)
    if not killed.killed:
        return f"{point}: the child was not killed there:\n{killed}"
    transcript = w.recover()
    effects = w.effects()
    by_name = Counter(e["args"]["name"] for e in effects)
    problems = []
    for name in NEVER:
        if by_name[name] != 1:
            problems.append(f"`never` write {name} happened {by_name[name]} times")
    for name in SAFE:
        if by_name[name] < 1:
            problems.append(f"safe read {name} never happened")
    intents = _intent_lines(w)
    for e in effects:
        if e["result_id"] not in intents:
            problems.append(f"effect {e['result_id']} has no intent in the log")
    doc = w.inspect()
    if (doc["status"], doc["reason"], doc["steps"]) != ("finished", "final_answer", 3):
        problems.append(f"the run ended {doc['status']} / {doc['reason']} after {doc['steps']} steps")
    steps = [r for r in w.records() if r.TAG == "step_completed"]
    tools = [[c["tool"] for c in s.calls] if s.calls else None for s in steps]
    if tools != [["write", "read", "write"], ["read", "write"], None]:
        problems.append(f"step outcomes name {tools}")
    for s in steps[:2]:
        for c in s.calls:
            if c["is_error"] or not c["observation"].startswith(("wrote", "read")):
                problems.append(f"call outcome {c}")
    w.verify()
    if w.tracebacks():
        problems.append("a process printed a traceback")
    if problems:
        return f"{point}: " + "; ".join(problems) + f"\ntranscript: {transcript}"
    return None


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str | None]:
    root = tmp_path_factory.mktemp("parallel")
    points = ck.selected(request, "point")  # the slow-marked ones only when they run
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 2)) as pool:
        return dict(zip(points, pool.map(lambda p: scenario(root, p), points)))


def test_the_uninterrupted_run_writes_all_intents_of_a_step_before_any_result(tmp_path: Path) -> None:
    w = ck.World(tmp_path, AGENT)
    done = w.child_run()
    assert done.code == 0, str(done)
    kinds = [(r.TAG, getattr(r, "call", None)) for r in w.records()]
    first_step = kinds[3:10]
    assert first_step[:3] == [("intent", 1), ("intent", 2), ("intent", 3)], kinds
    assert sorted(first_step[3:6]) == [("action_result", None)] * 3
    assert first_step[6] == ("step_completed", None)
    assert sorted(e["args"]["name"] for e in w.effects()) == sorted(NEVER | SAFE)


@pytest.mark.parametrize("point", POINTS)
def test_kill_inside_a_step_of_several_calls(outcomes: dict[str, str | None], point: str) -> None:
    assert outcomes[point] is None, outcomes[point]
