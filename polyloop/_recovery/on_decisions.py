"""The walker's handlers for people in the loop (log format 1.2, docs/how-to/require-approval.md).

The walker's handler (on a `WalkState`) for `approval_request`
and one for `decision`, plus the checks an action intent and a step's end
must pass when the step's tool call waits (or waited) for a person. They
keep the numbered rules 28-32 of docs/reference/log-format.md. Everything
is keyed by the result id the action's first intent gets (`s3-a1`), which
is also the id the deciding commands take.
"""

from __future__ import annotations

from typing import Any

from .._log.ids import result_id as derive_result_id
from .._log.records import ApprovalRequest, Decision, Intent, args_digest
from .on_keys import check_request_key
from .state import REQUEST_STATE, RequestState, RequestView, Step, WalkState, tool_calls_of

__all__ = [
    "REQUEST_STATE", "RequestState", "RequestView", "apply_approval_request", "apply_decision",
    "approvals_of", "check_approval_config", "gate_completion", "gate_intent",
]

# Which decisions settle which kind of request.
_DECIDES = {"approval": ("approved", "denied"), "answer": ("answered",)}


def approvals_of(config: dict[str, Any]) -> dict[str, str]:
    """{tool name: what makes its calls wait}, from a `run_started` config.

    `required` or `predicate` (`approval` of `config.tools[i]`), or
    `question` for a tool recorded with `"question": true` (`ask_human`).
    """
    tools = config.get("tools")
    if not isinstance(tools, list):
        return {}
    out: dict[str, str] = {}
    for t in tools:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            continue
        if t.get("question") is True:
            out[t["name"]] = "question"
        elif t.get("approval") in ("required", "predicate"):
            out[t["name"]] = t["approval"]
    return out


def check_approval_config(config: dict[str, Any]) -> str | None:
    """Why the recorded approval settings are not ones a writer makes (None when they are)."""
    flag = config.get("approve_irreversible", True)
    if type(flag) is not bool:
        return "config.approve_irreversible is not a boolean"
    for t in config.get("tools") or []:
        if t.get("approval") not in (None, "required", "predicate"):
            return f"config.tools[{t['name']!r}].approval is not required, predicate or null"
        if type(t.get("question", False)) is not bool:
            return f"config.tools[{t['name']!r}].question is not a boolean"
    return None


def apply_approval_request(s: WalkState, rec: ApprovalRequest, index: int) -> tuple[int, str] | None:
    if s.minor < 2:
        return 28, f"approval_request in a log of format 1.{s.minor}, which has no such records"
    rid = rec.result_id
    if rid in s.requests:
        return 29, f"a second approval_request for {rid}"
    if rid != derive_result_id("action", rec.step, 1, rec.call):
        return 29, f"approval_request id {rid!r} is not the first action id of its call in step {rec.step}"
    open_step = s.completed_steps + 1
    st = s.steps[rec.step - 1] if rec.step == open_step and len(s.steps) >= rec.step else None
    calls = tool_calls_of(st.output) if st is not None else []
    several = st is not None and st.calls is not None
    if rec.call is not None and not (several and rec.call <= len(calls)):
        return 29, f"approval_request {rid} names call {rec.call}, which step {rec.step} does not have"
    if several and rec.call is None:
        return 29, f"approval_request {rid} names no call, but step {rec.step} has several"
    call = calls[(rec.call or 1) - 1] if calls else None
    if st is None or call is None:
        return 29, f"approval_request for step {rec.step}, which has no open tool call"
    if st.attempts(rec.call):
        return 29, f"approval_request for step {rec.step} after its action's intent"
    if call["name"] != rec.tool or call["args"] != rec.args:
        return 29, f"approval_request {rid} is not the tool call the model returned"
    if rec.args_sha256 != args_digest(rec.args):
        return 29, f"approval_request {rid} carries a SHA-256 that is not its arguments'"
    wants = s.approvals.get(rec.tool)
    if (rec.kind == "answer") != (wants == "question") or wants is None:
        return 29, f"approval_request ({rec.kind}) for {rec.tool}, which run_started does not record as such"
    bad = check_request_key(s, rec)
    if bad is not None:
        return bad
    s.requests[rid] = RequestView(rid, rec.kind, rec.step, rec.tool, rec.args, rec, None, index)
    return None


def apply_decision(s: WalkState, rec: Decision, index: int) -> tuple[int, str] | None:
    if s.minor < 2:
        return 28, f"decision in a log of format 1.{s.minor}, which has no such records"
    r = s.requests.get(rec.id)
    if r is None:
        return 30, f"decision names {rec.id}, which has no approval_request"
    if r.decision is not None:
        return 30, f"a second decision for {rec.id}"
    st = s.steps[r.step - 1]
    if st.completed is not None:
        return 30, f"decision for {rec.id}, whose step already completed"
    if rec.decision not in _DECIDES[r.kind]:
        return 30, f"a decision {rec.decision!r} for {rec.id}, a request of kind {r.kind}"
    if rec.request_sha256 != r.request.args_sha256:
        return 30, f"decision for {rec.id} names another request's arguments (SHA-256 differs)"
    approved = rec.args if rec.args is not None else r.request.args
    if rec.args_sha256 != args_digest(approved):
        return 30, f"decision for {rec.id}: args_sha256 is not the hash of the arguments it approves"
    r.decision = rec
    return None


def gate_intent(s: WalkState, rec: Intent, st: Step) -> tuple[int, str] | None | bool:
    """Rules 31-32 for an action intent; True: no request, judge it as any action (rule 8)."""
    if s.minor < 2:
        return True
    attempts = st.attempts(rec.call)
    first = attempts[0].result_id if attempts else rec.result_id
    r = s.requests.get(first)
    if r is None:
        wants = s.approvals.get(rec.tool or "")
        if wants in ("required", "question"):
            return 32, f"action {rec.tool} of step {rec.step} without an approving decision"
        return True
    if r.decision is None:
        return 32, f"action {rec.tool} of step {rec.step} before a decision on {first}"
    if r.decision.decision != "approved":
        return 32, f"action {rec.tool} of step {rec.step} runs, but {first} was {r.decision.decision}"
    if rec.tool != r.tool or rec.args != r.approved_args:
        return 31, f"action intent {rec.result_id} does not carry the arguments approved for {first}"
    return None


def gate_completion(s: WalkState, step: int) -> tuple[int, str] | None:
    """Rule 32 for a step's end: a step whose tool call waits for a person does not end."""
    if s.minor < 2 or not s.requests:
        return None
    for r in s.requests.values():
        if r.step == step and r.decision is None:
            return 32, f"step {step} completed while {r.result_id} waits for a decision"
    return None
