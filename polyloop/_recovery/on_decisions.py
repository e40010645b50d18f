"""The walker's handlers for people in the loop (log format 1.2, docs/how-to/require-approval.md).

A mixin of `polyloop._recovery.walker.Walker`: a handler for `approval_request`
and one for `decision`, plus the checks an action intent and a step's end
must pass when the step's tool call waits (or waited) for a person. They
keep the numbered rules 28-32 of docs/reference/log-format.md. Everything
is keyed by the result id the action's first intent gets (`s3-a1`), which
is also the id the deciding commands take.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .on_calls import tool_calls_of
from .._log.ids import result_id as derive_result_id
from .._log.records import ApprovalRequest, Decision, Intent, args_digest

if TYPE_CHECKING:
    from .walker import _Step

RequestState = Literal["waiting", "approved", "denied", "answered"]

# A request's state: the decision's kind, or `waiting` without one. (A request
# is not an execution: it has no intent, so `STATE_TABLE` does not hold it.)
REQUEST_STATE: dict[str | None, RequestState] = {
    None: "waiting",
    "approved": "approved",
    "denied": "denied",
    "answered": "answered",
}
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


@dataclass(slots=True)
class RequestView:
    """An approval request and its decision, as the log tells them.

    Attributes:
        result_id: the id the deciding commands take, and the action's first intent gets.
        kind: `approval` or `answer`.
        step: its step.
        tool, args: the tool call the model made.
        request: the `ApprovalRequest` record.
        decision: the `Decision` record, or None while it waits.
        index: position of the request in the log (0-based).
    """

    result_id: str
    kind: str
    step: int
    tool: str
    args: dict[str, Any]
    request: ApprovalRequest
    decision: Decision | None
    index: int

    @property
    def state(self) -> RequestState:
        """`waiting`, `approved`, `denied` or `answered`."""
        return REQUEST_STATE[self.decision.decision if self.decision is not None else None]

    @property
    def approved_args(self) -> dict[str, Any]:
        """The arguments the action runs with once approved: the edited ones, else the model's."""
        d = self.decision
        return d.args if d is not None and d.args is not None else self.request.args

    @property
    def idempotency_key(self) -> str:
        return self.request.idempotency_key

    def observation(self) -> str:
        """What the model reads for a denied request or an answered question."""
        d = self.decision
        assert d is not None and d.decision != "approved"
        if d.decision == "answered":
            return d.answer or ""
        return f"denied by {d.by}: {d.reason}" if d.reason else f"denied by {d.by}"


class DecisionHandlers:
    """Handlers of the 1.2 records of people in the loop; mixed into `Walker`."""

    # Provided by Walker.
    minor: int
    steps: list[_Step]
    completed_steps: int
    finished: Any
    approvals: dict[str, str]
    requests: dict[str, RequestView]
    _request_key: Any

    def request_of(self, rid: str) -> RequestView | None:
        """The request recorded for the action whose first result id is `rid`, if any."""
        return self.requests.get(rid)

    def waiting_requests(self) -> list[RequestView]:
        """Requests no decision settled yet, in log order (none once the run finished)."""
        if self.finished is not None:
            return []
        return [r for r in self.requests.values() if r.decision is None]

    def _approval_request(self, rec: ApprovalRequest, index: int) -> tuple[int, str] | None:
        if self.minor < 2:
            return 28, f"approval_request in a log of format 1.{self.minor}, which has no such records"
        rid = rec.result_id
        if rid in self.requests:
            return 29, f"a second approval_request for {rid}"
        if rid != derive_result_id("action", rec.step, 1, rec.call):
            return 29, f"approval_request id {rid!r} is not the first action id of its call in step {rec.step}"
        open_step = self.completed_steps + 1
        st = self.steps[rec.step - 1] if rec.step == open_step and len(self.steps) >= rec.step else None
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
        wants = self.approvals.get(rec.tool)
        if (rec.kind == "answer") != (wants == "question") or wants is None:
            return 29, f"approval_request ({rec.kind}) for {rec.tool}, which run_started does not record as such"
        bad = self._request_key(rec)
        if bad is not None:
            return bad
        self.requests[rid] = RequestView(rid, rec.kind, rec.step, rec.tool, rec.args, rec, None, index)
        return None

    def _decision(self, rec: Decision, index: int) -> tuple[int, str] | None:
        if self.minor < 2:
            return 28, f"decision in a log of format 1.{self.minor}, which has no such records"
        r = self.requests.get(rec.id)
        if r is None:
            return 30, f"decision names {rec.id}, which has no approval_request"
        if r.decision is not None:
            return 30, f"a second decision for {rec.id}"
        st = self.steps[r.step - 1]
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

    def _gate_intent(self, rec: Intent, st: _Step) -> tuple[int, str] | None | bool:
        """Rules 31-32 for an action intent; True: no request, judge it as any action (rule 8)."""
        if self.minor < 2:
            return True
        attempts = st.attempts(rec.call)
        first = attempts[0].result_id if attempts else rec.result_id
        r = self.requests.get(first)
        if r is None:
            wants = self.approvals.get(rec.tool or "")
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

    def _gate_completion(self, step: int) -> tuple[int, str] | None:
        """Rule 32 for a step's end: a step whose tool call waits for a person does not end."""
        if self.minor < 2 or not self.requests:
            return None
        for r in self.requests.values():
            if r.step == step and r.decision is None:
                return 32, f"step {step} completed while {r.result_id} waits for a decision"
        return None
