"""People in the loop (log format 1.2), table-driven: what requests and decisions plan, and every
rule (28-32 of docs/reference/log-format.md) a log breaks when no correct writer wrote it."""

from __future__ import annotations

import pytest

from polyloop import (
    ApprovalRequest,
    Decision,
    Intent,
    ModelCallResult,
    Resolution,
    RunStarted,
    StepCompleted,
    check,
    classify,
)
from polyloop._log.ids import idempotency_key
from polyloop._recovery.plan import AwaitDecision, Decided, RunAction, describe, plan
from polyloop._log.records import args_digest

ARGS = {"amount": 500}
EDITED = {"amount": 400}
KEY = idempotency_key("r", 1, "pay", ARGS)
SHA = args_digest(ARGS)


def S(version="1.2", approval="required", question=False):
    tools = [{"name": "pay", "replay": "never", **({"approval": approval} if approval else {})}]
    if question:
        tools.append({"name": "ask_human", "replay": "never", "question": True})
    return RunStarted(run_id="r", goal="g", config={"max_steps": 5, "tools": tools}, schema_version=version)


def head(version="1.2", approval="required", tool="pay", args=ARGS, question=False):
    return [
        S(version, approval, question),
        Intent(kind="model_call", step=1, attempt=1, result_id="s1-m1"),
        ModelCallResult(result_id="s1-m1", output={"text": None, "tool_call": {"name": tool, "args": args}}),
    ]


def REQ(kind="approval", tool="pay", args=ARGS, sha=None, rid="s1-a1", step=1):
    return ApprovalRequest(result_id=rid, step=step, kind=kind, tool=tool, args=args,
                           args_sha256=sha or args_digest(args), idempotency_key=idempotency_key("r", step, tool, args))


def DEC(decision="approved", args=None, request_sha=SHA, sha=None, answer=None, rid="s1-a1"):
    return Decision(id=rid, decision=decision, by="ann@host", reason="checked", request_sha256=request_sha,
                    args_sha256=sha or args_digest(args if args is not None else ARGS), args=args, answer=answer)


def AI(attempt=1, args=ARGS, key=KEY):
    return Intent(kind="action", step=1, attempt=attempt, result_id=f"s1-a{attempt}", tool="pay", args=args,
                  replay="never", idempotency_key=key)


def test_a_request_without_a_decision_waits_for_a_person():
    rec = classify(head() + [REQ()], run_id="r")
    assert rec.status == "needs_operator"
    assert [r.result_id for r in rec.waiting_requests()] == ["s1-a1"]
    nxt = plan(rec)
    assert isinstance(nxt, AwaitDecision)
    assert "polyloop approve r s1-a1 --reason TEXT" in describe(nxt, "r")


def test_an_approval_runs_the_call_with_the_approved_arguments():
    assert plan(classify(head() + [REQ(), DEC()], run_id="r")) == RunAction(1, 1, "pay", ARGS, "approved")
    edited = classify(head() + [REQ(), DEC(args=EDITED)], run_id="r")
    assert plan(edited) == RunAction(1, 1, "pay", EDITED, "approved")
    assert edited.status == "resumable"


def test_a_rerun_after_not_executed_keeps_the_approved_arguments():
    records = head() + [REQ(), DEC(args=EDITED), AI(args=EDITED),
                        Resolution(result_id="s1-a1", outcome="not_executed", by="op")]
    assert plan(classify(records, run_id="r")) == RunAction(1, 2, "pay", EDITED, "rerun")
    check_ok = classify(records + [AI(2, args=EDITED)], run_id="r")
    assert check_ok.execution("s1-a2").state == "unknown"


def test_a_denial_and_an_answer_complete_the_step_with_what_the_model_reads():
    nxt = plan(classify(head() + [REQ(), DEC("denied")], run_id="r"))
    assert nxt == Decided(1, "s1-a1", "pay", "denied by ann@host: checked", True)
    q = {"question": "which?"}
    records = head(tool="ask_human", args=q, question=True) + [
        REQ("answer", "ask_human", q), DEC("answered", request_sha=args_digest(q), sha=args_digest(q), answer="blue")]
    assert plan(classify(records, run_id="r")) == Decided(1, "s1-a1", "ask_human", "blue", False)
    done = classify(records + [StepCompleted(step=1, result_id=None, observation="blue")], run_id="r")
    assert done.status == "resumable" and done.request_of("s1-a1").state == "answered"


def _problems(records):
    _, problems = check(records, run_id="r")
    return [(p.rule, p.message) for p in problems]


BAD = {
    "request in a 1.1 log": (head(version="1.1") + [REQ()], 28),
    "decision in a 1.1 log": (head(version="1.1") + [DEC()], 28),
    "request after the intent": (head(approval=None) + [AI(), REQ()], 29),
    "request for another call": (head() + [REQ(args={"amount": 1})], 29),
    "request with a wrong hash": (head() + [REQ(sha="0" * 64)], 29),
    "request of a tool recorded without approval": (head(approval=None) + [REQ()], 29),
    "a question for a tool that is no question": (head() + [REQ("answer")], 29),
    "a second request": (head() + [REQ(), REQ()], 29),
    "request id not the first action id": (head() + [REQ(rid="s1-a2")], 29),
    "decision without a request": (head() + [DEC()], 30),
    "a second decision": (head() + [REQ(), DEC(), DEC("denied")], 30),
    "decision naming another request's hash": (head() + [REQ(), DEC(request_sha="1" * 64)], 30),
    "edited args hashed wrong": (head() + [REQ(), DEC(args=EDITED, sha=SHA)], 30),
    "answer to an approval": (head() + [REQ(), DEC("answered", answer="x")], 30),
    "intent with other args than approved": (head() + [REQ(), DEC(args=EDITED), AI(args=ARGS)], 31),
    "intent with another key": (head() + [REQ(), DEC(), AI(key="pl-other")], 36),
    "intent before the decision": (head() + [REQ(), AI()], 32),
    "intent after a denial": (head() + [REQ(), DEC("denied"), AI()], 32),
    "intent of a required tool without a request": (head() + [AI()], 32),
    "step completes while its request waits": (
        head() + [REQ(), StepCompleted(step=1, result_id=None, observation="x")], 32),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_log_no_correct_writer_writes_breaks_its_rule(name):
    records, rule = BAD[name]
    problems = _problems(records)
    assert problems, name
    assert problems[0][0] == rule, problems


def test_a_predicate_tool_may_run_without_a_request_and_old_logs_read_unchanged():
    assert _problems(head(approval="predicate") + [AI()]) == []
    # A 1.1 log of a tool that is irreversible today: it recorded no approval, nothing waits.
    assert _problems(head(version="1.1", approval=None) + [AI()]) == []


def test_the_records_round_trip_and_decoding_refuses_what_no_writer_writes():
    import orjson

    from polyloop import RecordError, decode_record, encode_record

    for record in (REQ(), DEC(args=EDITED), DEC("answered", answer="blue")):
        line = encode_record(record)
        assert line.startswith(b'{"record":"')
        assert decode_record(orjson.loads(line)) == record
    bad = [
        {**orjson.loads(encode_record(REQ())), "kind": "maybe"},
        {**orjson.loads(encode_record(DEC())), "decision": "perhaps"},
        {**orjson.loads(encode_record(DEC())), "answer": "an answer to an approval"},
        {**orjson.loads(encode_record(DEC("denied"))), "args": {"amount": 1}},
        {k: v for k, v in orjson.loads(encode_record(REQ())).items() if k != "args_sha256"},
    ]
    for obj in bad:
        with pytest.raises(RecordError):
            decode_record(obj)
