"""Kill at every boundary: one real SIGKILL per point of the run, recovery through the CLI.

For every point before and after each record write of an uninterrupted run
(run start, model call intent and result, action intent, step record, run
finish), before and after each tool's side effect, inside the creation of
the log, and around an operator's `resolution` write, a child process runs
the agent and SIGKILLs itself there. The harness then recovers through the
`polyloop` CLI (resume; on exit 3 mark-resolved by the ground truth; resume)
and checks the result against the prediction for that point (see
`crashkit.expect` and `crashkit.audit`).

The scenarios run in parallel in a module fixture; each point is reported
as its own test.
"""

from __future__ import annotations

import asyncio
import os
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

import crash_agent
import crashkit as ck
from polyloop import JsonlStore, RunNotFoundError, inspect_run


def planned_points() -> list[str]:
    """The write and side-effect points of the agent's script, worked out from the script alone."""
    points = ["run_started:1"]
    model = action = effect = done = 0
    for out in crash_agent.SCRIPT:
        model += 1
        points += [f"intent:model_call:{model}", f"model_call_result:{model}"]
        if "tool" in out:
            action += 1
            effect += 1
            points += [f"intent:action:{action}", f"effect:{effect}"]
        done += 1
        points.append(f"step_completed:{done}")
    points.append("run_finished:1")
    return [f"{when}:{p}" for p in points for when in ("before", "after")]


CREATE = ["create:partial-write", "create:before-fsync", "create:before-link", "create:before-dir-fsync"]
RESOLUTION = ["before:resolution:1", "after:resolution:1"]
POINTS = planned_points() + CREATE + RESOLUTION


@dataclass
class Outcome:
    point: str
    kills: int = 0
    recovered: bool = False
    transcript: list[str] = field(default_factory=list)
    error: str | None = None
    tracebacks: int = 0
    processes: int = 0
    verdict: ck.Verdict | None = None


def _status(w: ck.World) -> str:
    try:
        return asyncio.run(inspect_run(JsonlStore(w.dir), ck.RUN_ID)).status
    except RunNotFoundError:
        return "absent"


def _first_never_effect(golden: ck.Golden) -> int:
    return 1 + next(i for i, e in enumerate(golden.effects) if golden.replay[e["tool"]] == "never")


def scenario(golden: ck.Golden, root, point: str) -> Outcome:
    w = ck.World(root / point.replace(":", "_"), in_process=False)  # the one matrix all through the CLI
    out = Outcome(point)
    try:
        if point in RESOLUTION:
            # An operator's mark-resolved is killed around its own write.
            n = _first_never_effect(golden)
            p = w.child_run(kill_at=f"after:effect:{n}")
            assert p.killed, str(p)
            out.kills += 1
            e = golden.effects[n - 1]
            p = w.child_resolve(e["result_id"], True, e["observation"], kill_at=point)
            assert p.killed, str(p)
            out.kills += 1
            expected = ck.expect(golden, f"after:effect:{n}")
            status = "resumable" if point.startswith("after") else "needs_operator"
        else:
            p = w.child_run(kill_at=point)
            assert p.killed, f"the child was not killed at {point}:\n{p}"
            out.kills += 1
            expected = ck.expect(golden, point)
            status = expected.status_after_crash
        assert _status(w) == status, f"after the kill: {_status(w)}, expected {status}"
        if point.startswith("create:") and status == "absent":
            assert not any(w.dir.glob("*.jsonl")), "a crash mid-creation left a log behind"
        out.transcript = w.recover()
        out.verdict = ck.audit(golden, w, expected)
        out.recovered = True
    except Exception:  # reported per scenario by its own test
        out.error = traceback.format_exc()
    finally:
        out.tracebacks = w.tracebacks()
        out.processes = len(w.procs)
    return out


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill-matrix")
    golden = ck.golden_run(root / "golden")
    workers = max(2, (os.cpu_count() or 2) + 1)
    with ThreadPoolExecutor(workers) as pool:
        outcomes = {o.point: o for o in pool.map(lambda p: scenario(golden, root, p), POINTS)}
    # One `polyloop verify --strict` over every recovered log (one process, not one each).
    verdicts = {f["path"]: f for f in ck.World(root / "verify", in_process=False).verify_all(root)["files"]}
    for out in outcomes.values():
        if out.recovered:
            path = str(root / out.point.replace(":", "_") / "runs" / f"{ck.RUN_ID}.jsonl")
            status = verdicts.get(path, {}).get("status")
            if status != "ok":
                out.recovered = False
                out.error = f"polyloop verify says {status!r} for {path}: {verdicts.get(path)}"
    return golden, outcomes


def test_the_matrix_covers_every_write_and_side_effect_of_the_run(matrix):
    golden, _ = matrix
    assert golden.kill_points() == planned_points()
    assert len(set(POINTS)) == len(POINTS)


@pytest.mark.parametrize("point", POINTS)
def test_kill_at(matrix, point, reliability):
    _, outcomes = matrix
    out = outcomes[point]
    reliability.add("kill_matrix.kills", out.kills)
    reliability.add("kills", out.kills)
    reliability.add("processes", out.processes)
    reliability.add("tracebacks", out.tracebacks)
    if out.verdict is not None:
        reliability.add("never_duplicates", out.verdict.duplicates)
        reliability.add("silently_lost", out.verdict.lost)
    assert out.error is None, f"kill at {point}: {out.transcript}\n{out.error}"
    assert out.tracebacks == 0
    reliability.kill_points.add(point)
    reliability.add("runs_recovered")
    reliability.add("kill_matrix.recovered")
