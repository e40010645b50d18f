"""Guarded actions (log format 1.1), table-driven: the states and plans guard records give, and
every rule (15-20 of docs/reference/log-format.md) a log breaks when no correct writer wrote it."""

from __future__ import annotations

import pytest

from polyloop import (
    ActionResult,
    GuardCheck,
    Intent,
    ModelCallResult,
    Resolution,
    RunStarted,
    StepCompleted,
    check,
    classify,
)
from polyloop._log.ids import idempotency_key
from polyloop._recovery.plan import (
    AbortAction,
    AlertStop,
    CallModel,
    Complete,
    ContinueAction,
    NeedsOperator,
    Reconcile,
    Rollback,
    RunAction,
    Verify,
    describe,
    plan,
)

ALL = {"precondition": True, "verify": True, "rollback": "compensate", "reconcile": True, "irreversible": False}
KEY = idempotency_key("r", 1, "t", {"x": 1})


def S(guards=ALL, version="1.1", replay="never"):
    tool = {"name": "t", "replay": replay}
    if guards is not None:
        tool["guards"] = guards
    return RunStarted(run_id="r", goal="g", config={"max_steps": 5, "tools": [tool]}, schema_version=version)


def head(guards=ALL, version="1.1", replay="never"):
    return [
        S(guards, version, replay),
        Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
        ModelCallResult(result_id="s1-m1", output={"text": None, "tool_call": {"name": "t", "args": {"x": 1}}}),
    ]


def AI(attempt=1, replay="never"):
    return Intent(kind="action", step=1, attempt=attempt, result_id=f"s1-a{attempt}", tool="t", args={"x": 1},
                  replay=replay, idempotency_key=KEY)


def RI(attempt=1, key=KEY + "-rollback", args=None):
    return Intent(kind="rollback", step=1, attempt=attempt, result_id=f"s1-r{attempt}", tool="t",
                  args=args or {"x": 1}, replay="never", idempotency_key=key)


def PRE(ok=True, rid="s1-a1"):
    return GuardCheck(result_id=rid, guard="precondition", passed=ok, reason=None if ok else "too low")


def VER(ok=True, rollback="compensate", rid="s1-a1"):
    return GuardCheck(result_id=rid, guard="verify", passed=ok, reason=None if ok else "wrong",
                      rollback=None if ok else rollback)


def RET(rid="s1-a1", error=False):
    return ActionResult(result_id=rid, observation="error: boom" if error else "moved", is_error=error)


def REC(outcome="executed", rid="s1-a1"):
    return Resolution(result_id=rid, outcome=outcome, observation="found" if outcome == "executed" else None,
                      by="reconcile", source="reconcile")


def OP(outcome="executed", rid="s1-a1"):
    return Resolution(result_id=rid, outcome=outcome, observation="seen" if outcome == "executed" else None, by="op")


def SC(rid="s1-a1", error=False):
    return StepCompleted(step=1, result_id=rid, observation="obs", is_error=error)


NO_ROLLBACK = {**ALL, "rollback": None}
ALERT_KIND = {**ALL, "rollback": "alert"}

# (id, guards, tail, state of s1-a1, status, type of the plan, waiting kind or None)
VALID = [
    ("intent-only-is-pending", ALL, [AI()], "pending", "resumable", ContinueAction, None),
    ("precondition-passed-then-crash-is-unknown-and-reconciled", ALL, [AI(), PRE()], "unknown", "resumable",
     Reconcile, None),
    ("unknown-without-reconcile-waits", NO_ROLLBACK | {"reconcile": False}, [AI(), PRE()], "unknown",
     "needs_operator", NeedsOperator, "unknown"),
    ("reconcile-could-not-tell-waits", ALL, [AI(), PRE(), GuardCheck(result_id="s1-a1", guard="reconcile",
     passed=False, reason="bank down")], "unknown", "needs_operator", NeedsOperator, "unknown"),
    ("precondition-failed-aborts", ALL, [AI(), PRE(False)], "done", "resumable", AbortAction, None),
    ("precondition-failed-recorded", ALL, [AI(), PRE(False), SC(error=True)], "done", "resumable", CallModel, None),
    ("returned-then-verify", ALL, [AI(), PRE(), RET()], "done", "resumable", Verify, None),
    ("verified-completes", ALL, [AI(), PRE(), RET(), VER()], "done", "resumable", Complete, None),
    ("failed-verify-rolls-back", ALL, [AI(), PRE(), RET(), VER(False)], "alert", "resumable", Rollback, None),
    ("rollback-unknown-waits", ALL, [AI(), PRE(), RET(), VER(False), RI()], "alert", "needs_operator",
     NeedsOperator, "unknown"),
    ("rollback-done-completes", ALL, [AI(), PRE(), RET(), VER(False), RI(), RET("s1-r1")], "rolled_back",
     "resumable", Complete, None),
    ("rollback-failed-alerts", ALL, [AI(), PRE(), RET(), VER(False), RI(), RET("s1-r1", error=True)], "alert",
     "needs_operator", AlertStop, "alert"),
    ("rollback-resolved-executed", ALL, [AI(), PRE(), RET(), VER(False), RI(), OP(rid="s1-r1")], "rolled_back",
     "resumable", Complete, None),
    ("rollback-resolved-not-executed-runs-again", ALL,
     [AI(), PRE(), RET(), VER(False), RI(), OP("not_executed", rid="s1-r1")], "alert", "resumable", Rollback, None),
    ("no-rollback-alerts", NO_ROLLBACK, [AI(), PRE(), RET(), VER(False, None)], "alert", "needs_operator",
     AlertStop, "alert"),
    ("alert-kind-alerts", ALERT_KIND, [AI(), PRE(), RET(), VER(False, "alert")], "alert", "needs_operator",
     AlertStop, "alert"),
    ("alert-settled-by-operator", NO_ROLLBACK, [AI(), PRE(), RET(), VER(False, None), OP("not_executed")],
     "resolved", "resumable", Complete, None),
    ("rolled-back-step-done", ALL, [AI(), PRE(), RET(), VER(False), RI(), RET("s1-r1"), SC(error=True)],
     "rolled_back", "resumable", CallModel, None),
    ("reconciled-executed-verifies", ALL, [AI(), PRE(), REC()], "resolved", "resumable", Verify, None),
    ("reconciled-executed-verified", ALL, [AI(), PRE(), REC(), VER()], "resolved", "resumable", Complete, None),
    ("reconciled-not-executed-reruns", ALL, [AI(), PRE(), REC("not_executed")], "resolved", "resumable",
     RunAction, None),
    ("tool-raised-completes-unverified", ALL, [AI(), PRE(), SC(error=True)], "done", "resumable", CallModel, None),
]


@pytest.mark.parametrize(("guards", "tail", "state", "status", "nxt", "waits"),
                         [row[1:] for row in VALID], ids=[row[0] for row in VALID])
def test_guard_records_give_one_state_and_one_plan(guards, tail, state, status, nxt, waits) -> None:
    rec = classify(head(guards) + tail, run_id="r")
    assert rec.execution("s1-a1").state == state
    assert rec.status == status
    decided = plan(rec)
    assert type(decided) is nxt
    assert describe(decided, "r")  # every verdict renders
    kinds = ["alert" if e.state == "alert" else "unknown" for e in rec.blocking]
    assert kinds == ([waits] if waits else [])


# (id, guards, tail, rule broken)
CORRUPT = [
    ("verification-without-result", ALL, [AI(), PRE(), VER()], 18),
    ("second-verification", ALL, [AI(), PRE(), RET(), VER(), VER()], 18),
    ("rollback-without-failed-verification", ALL, [AI(), PRE(), RET(), VER(), RI()], 19),
    ("rollback-before-verification", ALL, [AI(), PRE(), RET(), RI()], 19),
    ("rollback-of-alert-kind", ALERT_KIND, [AI(), PRE(), RET(), VER(False, "alert"), RI()], 16),
    ("rollback-with-foreign-key", ALL, [AI(), PRE(), RET(), VER(False), RI(key="pl-other")], 36),
    ("rollback-repeated-silently", ALL, [AI(), PRE(), RET(), VER(False), RI(), RI(2)], 19),
    ("reconcile-resolution-without-reconcile", {**ALL, "reconcile": False}, [AI(), PRE(), REC()], 16),
    ("verify-the-tool-lacks", {**ALL, "verify": False}, [AI(), PRE(), RET()], 16),
    ("precondition-the-tool-lacks", {**ALL, "precondition": False}, [AI(), PRE()], 16),
    ("action-after-failed-precondition", ALL, [AI(), PRE(False), RET()], 17),
    ("step-done-before-precondition", ALL, [AI(), SC()], 17),
    ("step-done-before-verification", ALL, [AI(), PRE(), RET(), SC()], 20),
    ("step-done-after-failed-verification", ALL, [AI(), PRE(), RET(), VER(False), SC()], 20),
    ("step-done-after-failed-rollback", ALL, [AI(), PRE(), RET(), VER(False), RI(), RET("s1-r1", True), SC()], 20),
    ("verify-names-undeclared-rollback", ALL, [AI(), PRE(), RET(), VER(False, "undo")], 18),
    ("guard-record-in-a-1.0-log", None, [AI(), PRE()], 15),
    ("rerun-before-precondition", ALL, [AI(), AI(2)], 9),
    ("resolution-of-alert-while-rollback-unknown", ALL, [AI(), PRE(), RET(), VER(False), RI(), OP()], 11),
]


@pytest.mark.parametrize(("guards", "tail", "rule"), [row[1:] for row in CORRUPT], ids=[row[0] for row in CORRUPT])
def test_a_guard_record_no_correct_writer_writes_is_refused(guards, tail, rule) -> None:
    version = "1.0" if guards is None else "1.1"
    _, problems = check(head(guards, version) + tail, run_id="r")
    assert problems, "the log was accepted"
    assert problems[0].rule == rule, problems


def test_a_1_0_log_keeps_its_four_states() -> None:
    log = head(None, "1.0") + [AI()]
    rec = classify(log, run_id="r")
    assert rec.execution("s1-a1").state == "unknown" and rec.status == "needs_operator"
    assert type(plan(rec)) is NeedsOperator
