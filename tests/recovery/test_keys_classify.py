"""Idempotency keys, table-driven: a key is derived, never chosen (rule 36 of
docs/reference/log-format.md), so a log whose key a correct writer could not have written is corrupt."""

from __future__ import annotations

import pytest

from polyloop import (
    ActionResult,
    ApprovalRequest,
    CorruptLogError,
    Decision,
    GuardCheck,
    Intent,
    ModelCallResult,
    Resolution,
    RunStarted,
    StepCompleted,
    check,
    classify,
)
from polyloop._log.ids import idempotency_key, rollback_key
from polyloop._log.records import args_digest

RUN = "r"
ARGS = {"x": 1}
EDITED = {"x": 2}
GUARDS = {"precondition": False, "verify": True, "rollback": "compensate", "reconcile": False, "irreversible": False}


def key(step=1, tool="t", args=ARGS, call=None, run=RUN):
    return idempotency_key(run, step, tool, args, call)


def S(version="1.2", approval=None, guards=None):
    tool = {"name": "t", "replay": "never"}
    if approval:
        tool["approval"] = approval
    if guards:
        tool["guards"] = guards
    return RunStarted(run_id=RUN, goal="g", config={"max_steps": 5, "tools": [tool]}, schema_version=version)


def MI(step=1):
    return Intent(kind="model_call", step=step, attempt=1, result_id=f"s{step}-m1")


def MR(step=1, args=ARGS):
    return ModelCallResult(result_id=f"s{step}-m1", output={"text": None, "tool_call": {"name": "t", "args": args}})


def MR2(step=1, calls=(ARGS, ARGS)):
    out = {"text": None, "tool_calls": [{"name": "t", "args": a} for a in calls]}
    return ModelCallResult(result_id=f"s{step}-m1", output=out)


def AI(step=1, attempt=1, k="derive", replay="never", args=ARGS, call=None):
    rid = f"s{step}-a{attempt}" if call is None else f"s{step}-c{call}-a{attempt}"
    return Intent(kind="action", step=step, attempt=attempt, result_id=rid, tool="t", args=args, replay=replay,
                  idempotency_key=key(step, args=args, call=call) if k == "derive" else k, call=call)


def SC(step=1, attempt=1):
    return StepCompleted(step=step, result_id=f"s{step}-a{attempt}", observation="obs")


def REQ(k="derive"):
    return ApprovalRequest(result_id="s1-a1", step=1, kind="approval", tool="t", args=ARGS,
                           args_sha256=args_digest(ARGS), idempotency_key=key() if k == "derive" else k)


def DEC(args=None):
    return Decision(id="s1-a1", decision="approved", by="ann@host", request_sha256=args_digest(ARGS),
                    args_sha256=args_digest(args if args is not None else ARGS), args=args)


def RI(k):
    return Intent(kind="rollback", step=1, attempt=1, result_id="s1-r1", tool="t", args=ARGS, replay="never",
                  idempotency_key=k)


def safe_step(step, k="derive", args=ARGS):
    return [MI(step), MR(step, args), AI(step, k=k, replay="safe", args=args), SC(step)]


def failed_verification(k="derive"):
    return [S("1.1", guards=GUARDS), MI(), MR(), AI(k=k), ActionResult(result_id="s1-a1", observation="moved"),
            GuardCheck(result_id="s1-a1", guard="verify", passed=False, reason="wrong", rollback="compensate")]


FORGED = "pl-" + "0" * 32

# (id, records): logs a correct writer writes, keys and all
VALID = [
    ("derived-key", [S(), *safe_step(1)]),
    ("same-key-every-attempt", [S(), MI(), MR(), AI(replay="safe"), AI(attempt=2, replay="safe"), SC(attempt=2)]),
    ("two-steps-same-call-two-keys", [S(), *safe_step(1), *safe_step(2)]),
    ("log-format-1.0", [S("1.0"), *safe_step(1)]),
    ("several-calls-keyed-by-call", [S(), MI(), MR2(), AI(call=1), AI(call=2)]),
    ("approved-edited-keeps-the-request-key", [S(approval="required"), MI(), MR(), REQ(), DEC(EDITED),
                                               AI(args=EDITED, k=key())]),
    ("rollback-key-derived", [*failed_verification(), RI(rollback_key(key()))]),
]


@pytest.mark.parametrize("records", [v[1] for v in VALID], ids=[v[0] for v in VALID])
def test_derived_keys_classify(records):
    classify(records, run_id=RUN)


# (id, records, words in the problem): every way a key can be forged
CORRUPT = [
    ("not-pl-and-32-hex", [S(), *safe_step(1, k="pl-key")], "not pl- and 32 lowercase hex digits"),
    ("uppercase-hex", [S(), *safe_step(1, k=key().upper().replace("PL-", "pl-"))], "not pl- and 32 lowercase hex"),
    ("empty-key", [S(), *safe_step(1, k="")], "not pl- and 32 lowercase hex digits"),
    ("well-formed-not-derived", [S(), *safe_step(1, k=FORGED)], "not the key a writer derives"),
    ("another-runs-key", [S(), *safe_step(1, k=key(run="other"))], "not the key a writer derives"),
    ("forged-in-a-1.0-log", [S("1.0"), *safe_step(1, k=FORGED)], "not the key a writer derives"),
    ("differs-between-attempts", [S(), MI(), MR(), AI(replay="safe"), AI(attempt=2, k=FORGED, replay="safe")],
     "not the key of its first attempt s1-a1 (pl-"),
    ("shared-by-two-steps", [S(), *safe_step(1), *safe_step(2, k=key(1))], "the key of s1-a1, another logical action"),
    ("shared-by-two-calls", [S(), MI(), MR2(), AI(call=1), AI(call=2, k=key(call=1))],
     "the key of s1-c1-a1, another logical action"),
    ("several-calls-key-without-call", [S(), MI(), MR2(), AI(call=1, k=key())], "not the key a writer derives"),
    ("request-key-forged", [S(approval="required"), MI(), MR(), REQ(k=FORGED)],
     "approval_request s1-a1 carries idempotency key"),
    ("request-and-action-key-forged", [S(approval="required"), MI(), MR(), REQ(k=FORGED), DEC(), AI(k=FORGED)],
     "approval_request s1-a1 carries idempotency key"),
    ("approved-action-not-request-key", [S(approval="required"), MI(), MR(), REQ(), DEC(EDITED), AI(args=EDITED)],
     "not the key of its approval request s1-a1"),
    ("approved-action-forged-key", [S(approval="required"), MI(), MR(), REQ(), DEC(), AI(k=FORGED)],
     "not the key of its approval request s1-a1"),
    ("rollback-key-not-derived", [*failed_verification(), RI("pl-" + "1" * 32 + "-rollback")],
     "not the key of its action s1-a1 + -rollback"),
    ("rollback-key-without-suffix", [*failed_verification(), RI(key())],
     "which is not pl- and 32 lowercase hex digits and -rollback"),
    ("rollback-of-a-forged-key", [*failed_verification(k=FORGED), RI(FORGED + "-rollback")],
     "not the key a writer derives"),
]


@pytest.mark.parametrize("records, words", [c[1:] for c in CORRUPT], ids=[c[0] for c in CORRUPT])
def test_forged_keys_are_corrupt(records, words):
    with pytest.raises(CorruptLogError) as info:
        classify(records, run_id=RUN)
    problems = info.value.problems  # the refused intent is skipped, so what names it may follow
    assert problems[0].rule == 36, [str(p) for p in problems]
    assert words in str(problems[0]), str(problems[0])
    assert str(problems[0]).endswith("(rule 36)")


def test_a_forged_key_is_reported_at_its_record_and_the_log_is_not_followed_past_it():
    records = [S(), MI(), MR(), AI(k=FORGED, replay="safe"), SC()]
    recovery, problems = check(records, run_id=RUN)
    assert [(p.rule, p.index) for p in problems] == [(36, 3), (4, 4)]
    assert recovery is not None and recovery.executions[-1].result_id == "s1-m1"


def test_a_resolution_does_not_make_a_forged_key_acceptable():
    records = [S(), MI(), MR(), AI(k=FORGED), Resolution(result_id="s1-a1", outcome="not_executed", by="op")]
    _, problems = check(records, run_id=RUN)
    assert problems[0].rule == 36
