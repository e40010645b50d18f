"""SIGKILL between the requests, decisions and calls of a step of several tool calls (real processes).

`approval_child.py` with `APPROVAL_SCRIPT=step`: step 1 asks for three
payments at once — bob 500 and cy 600 wait for approval, al 5 waits for
nobody but is `never` like every `pay`; step 2 asks a question beside a
payment to dee that waits for nobody. The driver decides one request at a
time and resumes after each decision (so a first decision that released
anything would show), settles an unknown `pay` by the ground truth (the
fsync'd effects file), and one invocation is SIGKILLed at the chosen point:
after the intents, after the first request, after all requests, after the
first of two decisions, after the last decision before anything runs, and
while the released calls run. The audit, after every process:

* no payment of a step ran before every request of that step was recorded
  and decided (the world's effects file, and the order of the log);
* at the end each payment happened once, never twice (none for a denied call,
  the edited amount for an edited one), and `polyloop verify --strict`
  finds the log clean.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from crashkit import sampled
from test_approval_kill_points import RUN, World

REQUESTS = {1: {"s1-c1-a1", "s1-c3-a1"}, 2: {"s2-c1-a1"}}


def _step(result_id: str) -> int:
    return int(result_id[1:].split("-")[0])


class StepWorld(World):
    def env(self) -> dict[str, str]:
        return {**super().env(), "APPROVAL_SCRIPT": "step"}

    def check_invariants(self) -> None:
        log = self.log()
        recorded = {r["result_id"] for r in log if r["record"] == "approval_request"}
        decided = {r["id"] for r in log if r["record"] == "decision"}
        for e in self.payments():
            step = _step(e["result_id"])
            assert REQUESTS[step] <= recorded & decided, f"{e} ran before every request of its step was decided"
        seen: set[str] = set()
        for r in log:  # and the log says so too: no action intent of a step before all its decisions
            if r["record"] == "decision":
                seen.add(r["id"])
            elif r["record"] == "intent" and r["kind"] == "action":
                assert REQUESTS[r["step"]] <= seen, f"intent {r['result_id']} before the step's decisions"

    def payments(self) -> list[dict]:
        return [json.loads(x) for x in self.effects.read_text().splitlines()] if self.effects.exists() else []

    def settle_unknown(self, wait: dict) -> None:
        done = [e for e in self.payments() if e["result_id"] == wait["id"]]
        assert len(done) <= 1, done
        flag = ["--executed", "--observation", f"paid {done[0]['amount']}"] if done else ["--not-executed"]
        assert self.cli("mark-resolved", RUN, wait["id"], *flag, "--reason", "effects file",
                        "--dir", "runs").returncode == 0


def decide(w: StepWorld, wait: dict, decision: str) -> None:
    if wait["kind"] == "answer":
        w.child("answer", wait["id"], "blue")
    elif decision == "deny" and wait["id"] == "s1-c1-a1":
        w.child("deny", wait["id"])
    elif decision == "edit" and wait["id"] == "s1-c1-a1":
        w.child("approve", wait["id"], json.dumps({"amount": 400, "to": "bob"}))
    else:
        w.child("approve", wait["id"])


def drive(w: StepWorld, decision: str) -> None:
    """Run; decide one request at a time and resume after each; settle unknowns; until the end."""
    for _ in range(30):
        log = w.log()
        if log and log[-1]["record"] == "run_finished":
            return
        doc = json.loads(w.cli("inspect", RUN, "--dir", "runs", "--json").stdout) if log else None
        waiting = doc["waiting"] if doc else []
        if not waiting:
            w.child("run")
            continue
        wait = waiting[0]
        if wait["kind"] == "unknown":
            w.settle_unknown(wait)
            continue
        before = w.payments()
        decide(w, wait, decision)
        code = w.child("run")
        if len(waiting) > 1 and code == 3:  # another request of the step still waits
            assert w.payments() == before, "a decision released a call while another of its step waited"
    raise AssertionError("the run did not finish")


def audit(w: StepWorld, decision: str) -> None:
    log = w.log()
    requests = Counter(r["result_id"] for r in log if r["record"] == "approval_request")
    assert requests == Counter(REQUESTS[1] | REQUESTS[2]), "each waiting call recorded once"
    paid = Counter(e["to"] for e in w.payments())
    want = {"al": 1, "cy": 1, "dee": 1} if decision == "deny" else {"bob": 1, "al": 1, "cy": 1, "dee": 1}
    assert paid == want, f"payments {paid}, want {want}"
    if decision == "edit":
        assert [e["amount"] for e in w.payments() if e["to"] == "bob"] == [400]
    steps = {r["step"]: r for r in log if r["record"] == "step_completed"}
    assert steps[2]["calls"][0]["observation"] == "blue"
    if decision == "deny":
        assert steps[1]["calls"][0] == {"result_id": None, "tool": "pay",
                                        "observation": "denied by tester: too much", "is_error": True}
    assert w.cli("verify", "runs", "--strict").returncode == 0


# (invocation kind, which one of that kind, kill point); the uninterrupted flow is
# run 1 (model call, request c1, request c3) · approve 1 · run 2 (still waits) · approve 2 ·
# run 3 (intents, three payments, step 1 done, model call, question) · answer 1 · run 4 (dee, end).
KILLS = [
    ("run", 1, "after:model_call_result:1"),
    ("run", 1, "after:approval_request:1"),  # between the two requests of step 1
    ("run", 1, "after:approval_request:2"),  # after the requests
    ("approve", 1, "after:decision:1"),  # after the first of two decisions
    ("approve", 2, "before:decision:1"),
    ("approve", 2, "after:decision:1"),  # after the last decision, before anything runs
    ("run", 3, "before:intents:1"),
    ("run", 3, "after:intents:1"),
    ("run", 3, "after:effect:1"),  # while the released calls run
    ("run", 3, "after:effect:2"),
    ("run", 3, "after:action_result:2"),
    ("run", 3, "before:step_completed:1"),
    ("run", 3, "after:approval_request:1"),  # the question of step 2
    ("answer", 1, "after:decision:1"),
    ("run", 4, "after:intent:action:1"),
    ("run", 4, "after:effect:1"),
]
SAMPLED = sampled(KILLS, 8, ids=lambda k: f"{k[0]}{k[1]}-{k[2]}")  # the others: slow


@pytest.mark.parametrize("kill", SAMPLED)
def test_a_kill_in_a_step_with_waiting_calls_runs_nothing_early_and_nothing_twice(tmp_path: Path,
                                                                                kill: tuple) -> None:
    w = StepWorld(tmp_path, kill)
    drive(w, "approve")
    assert w.killed, "the kill point was never reached"
    audit(w, "approve")


OTHERS = [
    pytest.param("deny", ("approve", 1, "after:decision:1"), id="deny-after-first-decision"),
    pytest.param("deny", ("run", 3, "after:intents:1"), id="deny-after-intents"),
    pytest.param("edit", ("approve", 2, "after:decision:1"), id="edit-after-last-decision"),
    pytest.param("edit", ("run", 3, "after:effect:1"), id="edit-during-execution"),
]


@pytest.mark.parametrize(("decision", "kill"), sampled(OTHERS, 2))
def test_a_kill_around_a_denial_or_an_edit_in_a_step_runs_each_released_call_once(
        tmp_path: Path, decision: str, kill: tuple) -> None:
    kind = "deny" if decision == "deny" and kill[0] == "approve" else kill[0]
    w = StepWorld(tmp_path, (kind, kill[1], kill[2]))
    drive(w, decision)
    assert w.killed, "the kill point was never reached"
    audit(w, decision)
