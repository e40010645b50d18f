"""A crash world for a user's loop: a directory, the child that dies on cue, the CLI as the operator.

The loop runs in a real child process (`loop_child.py`) that SIGKILLs itself at a kill point;
recovery goes through the `polyloop` command line as an operator would (`resume`; on exit 3,
`inspect --json`, `mark-resolved` from the side-effect ledger, `resume` again), in this process
(`support.cli.polyloop_in_process`: the same typer app, exit codes and output). The oracle:
the run ends with the scripted answer; every model call whose result was durable was paid
once (only the kill between a model call's intent and its result may pay one more); every
`never` call ran one time, no more and no less; the log verifies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from support.cli import clean_env, polyloop_in_process
from support import forking

HERE = Path(__file__).resolve().parent
CHILD = HERE / "loop_child.py"
RUN_ID = "loop-run"

# The writes of the scenario (loops.py), in order: where a kill can land.
WRITES = [
    "run_started:1", "intent:model_call:1", "model_call_result:1", "intent:action:1", "action_result:1",
    "intent:action:2", "action_result:2", "step_completed:1", "intent:model_call:2", "model_call_result:2",
    "intent:action:3", "step_completed:2", "intent:model_call:3", "model_call_result:3", "step_completed:3",
    "run_finished:1",
]
POINTS = [f"{when}:{w}" for w in WRITES for when in ("before", "after")]
# Two telling points by default (a model call paid and not recorded; a `never` call's intent
# without its result); every one under the slow marker, or with POLYLOOP_ALL_KILL_POINTS=1.
DEFAULT = ("before:model_call_result:2", "after:intent:action:3")
MATRIX = [p if p in DEFAULT or os.environ.get("POLYLOOP_ALL_KILL_POINTS") == "1"
          else pytest.param(p, marks=pytest.mark.slow, id=p) for p in POINTS]


def model_window(point: str) -> int | None:
    """The step whose model call a kill at `point` leaves unknown (re-issued: paid once more), if any."""
    when, kind, n = point.split(":", 1)[0], *point.split(":", 1)[1].rsplit(":", 1)
    if (when, kind) == ("before", "model_call_result"):  # called, its answer not yet durable
        return int(n)
    return None


class World:
    def __init__(self, root: Path, loop: str) -> None:
        self.root, self.loop = root, loop
        self.dir = root / "runs"
        self.env = clean_env(DURABLE_WORLD=str(root))

    def child(self, kill_at: str = "") -> int:
        env = dict(self.env, POLYLOOP_KILL_AT=kill_at) if kill_at else self.env
        proc = forking.run([sys.executable, str(CHILD), self.loop, RUN_ID, str(self.dir)], env=env,
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.returncode

    def cli(self, *args: str) -> Any:
        return polyloop_in_process(*args, "--dir", str(self.dir), env=self.env)

    def ledger(self, name: str) -> list[dict[str, Any]]:
        path = self.root / name
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def recover(self, rounds: int = 6) -> list[str]:
        steps: list[str] = []
        for _ in range(rounds):
            if not (self.dir / f"{RUN_ID}.jsonl").exists():
                steps.append(f"run:{self.child()}")
                continue
            p = self.cli("resume", RUN_ID)
            steps.append(f"resume:{p.code}")
            if p.code == 0:
                return steps
            assert p.code == 3 and "mark-resolved" in p.stderr, (p.code, p.stdout, p.stderr)
            steps += self.settle()
        raise AssertionError(f"no end after {rounds} rounds: {steps}")

    def settle(self) -> list[str]:
        doc = json.loads(self.cli("inspect", RUN_ID, "--json").stdout)
        unknown = [e for e in doc["executions"] if e["state"] == "unknown" and e["replay"] == "never"]
        assert unknown, doc
        done = []
        for e in unknown:
            landed = [x for x in self.ledger("effects.jsonl") if x["args"] == e["args"]]  # amounts are unique
            assert len(landed) <= 1, f"{e['id']} ran {len(landed)} times"
            flag = ["--executed", "--observation", f"paid {e['args']['amount']}"] if landed else ["--not-executed"]
            p = self.cli("mark-resolved", RUN_ID, e["id"], *flag, "--reason", "the ledger says so")
            assert p.code == 0, p.stderr
            done.append(f"mark-resolved {e['id']} {flag[0]}")
        return done

    def check(self, point: str | None) -> None:
        doc = json.loads(self.cli("inspect", RUN_ID, "--json").stdout)
        assert (doc["status"], doc["reason"], doc["result"]) == ("finished", "final_answer", "done"), doc
        paid = Counter(e["step"] for e in self.ledger("model.jsonl"))
        window = model_window(point) if point else None
        assert paid == Counter({1: 1, 2: 1, 3: 1}) + Counter({window: 1} if window else {}), (point, paid)
        effects = self.ledger("effects.jsonl")
        for amount in (3, 5):
            runs = [x for x in effects if x["tool"] == "pay" and x["args"] == {"amount": amount}]
            assert len(runs) == 1, (point, f"pay {amount} ran {len(runs)} times")
        assert 1 <= sum(x["tool"] == "lookup" for x in effects) <= 2, (point, effects)
        p = self.cli("verify")
        assert p.code == 0, p.stdout + p.stderr
