"""The run loop's part for people in the loop: recording that a tool call waits (log format 1.2).

`polyloop._run.loop._Run._prepare` calls `request_for` before an action's first intent.
When the recorded configuration says the tool's calls wait for a person
(and its predicate holds), the run writes a durable `approval_request` and
stops with `ApprovalRequiredError`: nothing of the call has run. The
decision comes later from `polyloop._operate.decide` (approve, deny, answer); the
planner then runs the approved call or completes the step with the
denial or the answer (docs/how-to/require-approval.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._log.errors import RunMismatchError
from .._log.ids import idempotency_key
from .._log.ids import result_id as derive_result_id
from .._log.records import ApprovalRequest, args_digest
from .validity import tool_hash

if TYPE_CHECKING:
    from .run_port import RunPort
    from .._recovery.plan import RunAction
    from .tools import Tool


def check_recorded(run: RunPort) -> None:
    """Refuse to go on with tools whose approval differs from what `run_started` recorded."""
    w = run.walker
    assert w.started is not None
    if w.minor < 2:
        return  # logs from before approvals existed: nothing was recorded, nothing waits
    recorded = {c.get("name"): c for c in w.started.config.get("tools") or [] if isinstance(c, dict)}
    opted = run.agent.approve_irreversible
    hashes = w.started.config.get("config_hashes") or {}
    for t in run.agent.tools:
        if t.name not in recorded:
            continue
        given = "question" if t.question else t.approval_mode(approve_irreversible=opted)
        if t.origin is not None and hashes.get(f"tool {t.name}") not in (None, tool_hash(t)):
            # An MCP tool whose server changed what it claims (its approval follows its annotations):
            # a changed tool, which the checkpoint check names (exit 4) and a person may accept.
            continue
        if given != w.approvals.get(t.name):
            raise RunMismatchError(run.run_id, f"approval of tool {t.name!r}", w.approvals.get(t.name), given)


def request_for(run: RunPort, tool: Tool, planned: RunAction) -> ApprovalRequest | None:
    """The request to record when this call waits for a person (None: it need not wait).

    The run loop writes it (durable) before anything of the call runs and
    stops. In a step of several calls, nothing of the step runs while any of
    its requests waits: every call waiting for a person records its request,
    the run stops, and the step's calls run together once all are decided.
    """
    w = run.walker
    wants = w.approvals.get(tool.name) if w.minor >= 2 else None
    if wants is None:
        return None
    if wants == "question":
        kind, reason = "answer", "the model asks a person"
    else:
        why = tool.needs_approval(planned.args, approve_irreversible=run.agent.approve_irreversible)
        if why is None and wants == "required" and tool.origin is not None:
            # An MCP tool whose server no longer claims what made it wait, a change a person accepted:
            # the run keeps the approval it recorded.
            why = "the run recorded that its calls wait for approval"
        if why is None:
            return None
        kind, reason = "approval", why
    args: dict[str, Any] = planned.args
    return ApprovalRequest(
        result_id=derive_result_id("action", planned.step, 1, planned.call),  # the approved call's first intent's id
        step=planned.step,
        kind=kind,
        tool=tool.name,
        args=args,
        args_sha256=args_digest(args),
        idempotency_key=idempotency_key(run.run_id, planned.step, tool.name, args, planned.call),
        reason=reason,
        call=planned.call,
    )
