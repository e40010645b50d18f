"""SIGKILL at every boundary around an approval request, a decision and an answer (real processes).

Each scenario drives one run of `approval_child.py` (a `pay` that needs
approval above 100, a question asked with `ask_human`, a small `pay`) to its
end as a person and an operator would: run; decide what waits (approve,
deny, approve with edited arguments, answer); settle an unknown `pay` by
the ground truth (the fsync'd effects file); resume. One invocation of the
chosen kind is SIGKILLed before or after the chosen write. The audit:

* the request is never lost: the run never goes past a tool call that
  needs a person without a request and a decision in the log;
* the action never runs before its approval, and never twice after it
  (one effect for bob unless denied; with the edited amount when edited);
* nothing of a denied call runs; the question is asked once and its
  answer is what the model read, also after crashes;
* `polyloop verify --strict` finds the log clean.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from crashkit import sampled
from support.cli import polyloop_in_process
from support import forking

CHILD = Path(__file__).with_name("approval_child.py")
RUN = "gated"


class World:
    def __init__(self, root: Path, kill: tuple[str, int, str] | None) -> None:
        self.root = root
        self.runs = root / "runs"
        self.effects = root / "effects.jsonl"
        self.kill = kill
        self.seen: dict[str, int] = {}
        self.killed = False

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("POLYLOOP_", "PYTEST_"))}
        return {**base, "EFFECTS": str(self.effects)}

    def child(self, command: str, *args: str) -> int:
        self.seen[command] = self.seen.get(command, 0) + 1
        env = self.env()
        if self.kill is not None and (command, self.seen[command]) == self.kill[:2]:
            env["POLYLOOP_KILL_AT"] = self.kill[2]
        done = forking.run([sys.executable, str(CHILD), command, str(self.runs), RUN, *args], env=env,
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert "Traceback" not in done.stderr, done.stderr
        if done.returncode == -signal.SIGKILL:
            self.killed = True
        self.check_invariants()
        return done.returncode

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """inspect, mark-resolved, verify: in this process (only the children are killed)."""
        done = polyloop_in_process(*args, cwd=self.root, env=self.env())
        return subprocess.CompletedProcess(list(args), done.code, done.stdout, done.stderr)

    def log(self) -> list[dict]:
        path = self.runs / f"{RUN}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]

    def paid(self, to: str) -> list[dict]:
        if not self.effects.exists():
            return []
        return [e for e in map(json.loads, self.effects.read_text().splitlines()) if e["to"] == to]

    def check_invariants(self) -> None:
        log = self.log()
        approved = any(r["record"] == "decision" and r["id"] == "s1-a1" and r["decision"] == "approved"
                       for r in log)
        if not approved:
            assert self.paid("bob") == [], "pay ran before its approval"
        kinds = [r["record"] for r in log]
        if "step_completed" in kinds or any(r["record"] == "intent" and r["kind"] == "action" for r in log):
            assert "approval_request" in kinds, "the run went past the call without a request"

    def settle_unknown(self, wait: dict) -> None:
        happened = [e for e in self.paid(wait["args"]["to"]) if e["key"]]
        doc = json.loads(self.cli("inspect", RUN, "--dir", "runs", "--json").stdout)
        e = next(x for x in doc["executions"] if x["id"] == wait["id"])
        done = [h for h in happened if h["key"] == e["idempotency_key"]]
        flag = ["--executed", "--observation", f"paid {done[0]['amount']}"] if done else ["--not-executed"]
        assert self.cli("mark-resolved", RUN, wait["id"], *flag, "--reason", "effects file",
                        "--dir", "runs").returncode == 0


def drive(w: World, decision: str) -> None:
    for _ in range(25):
        if not (w.runs / f"{RUN}.jsonl").exists() or not w.log() or w.log()[-1]["record"] != "run_finished":
            pass
        else:
            return
        doc = json.loads(w.cli("inspect", RUN, "--dir", "runs", "--json").stdout) if w.log() else None
        waiting = doc["waiting"] if doc else []
        if not waiting:
            w.child("run")
            continue
        wait = waiting[0]
        if wait["kind"] == "approval":
            if decision == "deny":
                w.child("deny", wait["id"])
            elif decision == "edit":
                w.child("approve", wait["id"], json.dumps({"amount": 400, "to": "bob"}))
            else:
                w.child("approve", wait["id"])
        elif wait["kind"] == "answer":
            w.child("answer", wait["id"], "blue")
        else:
            assert wait["kind"] == "unknown", wait
            w.settle_unknown(wait)
    raise AssertionError("the run did not finish")


def audit(w: World, decision: str) -> None:
    log = w.log()
    requests = [r for r in log if r["record"] == "approval_request"]
    assert [r["kind"] for r in requests] == ["approval", "answer"], "each call waited once, no more"
    decisions = [r for r in log if r["record"] == "decision"]
    assert [d["id"] for d in decisions] == ["s1-a1", "s2-a1"], "one decision per request"
    bob = w.paid("bob")
    if decision == "deny":
        assert bob == []
        assert not any(r["record"] == "intent" and r.get("tool") == "pay" and r["step"] == 1 for r in log)
    else:
        assert len(bob) == 1, f"pay to bob ran {len(bob)} times"
        assert bob[0]["amount"] == (400 if decision == "edit" else 500)
    assert len(w.paid("al")) == 1
    step2 = next(r for r in log if r["record"] == "step_completed" and r["step"] == 2)
    assert step2["observation"] == "blue"
    assert w.cli("verify", "runs", "--strict").returncode == 0


# (invocation kind, which one of that kind, kill point)
KILLS = [
    ("run", 1, "after:model_call_result:1"),
    ("run", 1, "before:approval_request:1"),
    ("run", 1, "after:approval_request:1"),
    ("approve", 1, "before:decision:1"),
    ("approve", 1, "after:decision:1"),
    ("run", 2, "before:intent:action:1"),
    ("run", 2, "after:intent:action:1"),
    ("run", 2, "before:step_completed:1"),
    ("run", 2, "after:step_completed:1"),
    ("run", 2, "before:approval_request:1"),
    ("run", 2, "after:approval_request:1"),
    ("answer", 1, "before:decision:1"),
    ("answer", 1, "after:decision:1"),
    ("run", 3, "before:step_completed:1"),
    ("run", 3, "after:step_completed:1"),
    ("run", 3, "after:intent:model_call:1"),
]


SAMPLED = sampled(KILLS, 7, ids=lambda k: f"{k[0]}{k[1]}-{k[2]}")  # the others: slow


@pytest.mark.parametrize("kill", SAMPLED)
def test_a_kill_around_an_approval_loses_nothing_and_runs_nothing_twice(tmp_path: Path, kill: tuple) -> None:
    w = World(tmp_path, kill)
    drive(w, "approve")
    assert w.killed, "the kill point was never reached"
    audit(w, "approve")


DENIAL = sampled([
    pytest.param(("run", 2, "before:step_completed:1"), id="denial-step-before"),
    pytest.param(("run", 2, "after:step_completed:1"), id="denial-step-after"),
    pytest.param(("approve", 1, "before:decision:1"), id="decision-before"),
    pytest.param(("approve", 1, "after:decision:1"), id="decision-after"),
], 2)


@pytest.mark.parametrize("kill", DENIAL)
def test_a_kill_around_a_denial_never_runs_the_call(tmp_path: Path, kill: tuple) -> None:
    w = World(tmp_path, (kill[0].replace("approve", "deny"), kill[1], kill[2]))
    drive(w, "deny")
    assert w.killed
    audit(w, "deny")


EDITED = sampled([
    pytest.param(("approve", 1, "after:decision:1"), id="decision-after"),
    pytest.param(("run", 2, "after:intent:action:1"), id="intent-after"),
    pytest.param(("run", 2, "before:step_completed:1"), id="step-before"),
], 2)


@pytest.mark.parametrize("kill", EDITED)
def test_a_kill_around_an_edited_approval_runs_the_edited_call_once(tmp_path: Path, kill: tuple) -> None:
    w = World(tmp_path, kill)
    drive(w, "edit")
    assert w.killed
    audit(w, "edit")
    intent = next(r for r in w.log() if r["record"] == "intent" and r.get("tool") == "pay")
    assert intent["args"] == {"amount": 400, "to": "bob"}
