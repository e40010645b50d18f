"""The walker's checks of idempotency keys (rule 36 of docs/reference/log-format.md).

Checks the walker's intent and request handlers call. A key is derived, never chosen: an
action's from its run id, step, tool, arguments and, in a step of several
tool calls, its call number (`polyloop._log.ids.idempotency_key`); an approved
call's action keeps its request's key, edited arguments or not; a rollback's
is its action's key + `-rollback`. A tool hands its key to the far side to
de-duplicate, so a forged one (malformed, changed between attempts, borrowed
from another action or another run) is refused before any tool can see it.
Every key of every format (1.0 on) was derived this way, so the check needs
no version switch.
"""

from __future__ import annotations

import re

from .._log.ids import idempotency_key, rollback_key
from .._log.records import ApprovalRequest, Intent
from .state import Exec, RequestView, WalkState

KEY_RULE = 36
_KEY = re.compile(r"pl-[0-9a-f]{32}")
_ROLLBACK_KEY = re.compile(r"pl-[0-9a-f]{32}-rollback")
_DERIVED = "the key a writer derives from its run id, step, tool, arguments and call"


def key_problem(key: str | None, expected: str, what: str, whose: str) -> tuple[int, str] | None:
    """Rule 36 for one key a record carries: `expected` is the key a writer puts there, `whose` says why."""
    if key == expected:
        return None
    rollback = expected.endswith("-rollback")
    if key is None or not (_ROLLBACK_KEY if rollback else _KEY).fullmatch(key):
        form = "pl- and 32 lowercase hex digits" + (" and -rollback" if rollback else "")
        return KEY_RULE, f"{what} carries idempotency key {key!r}, which is not {form}"
    return KEY_RULE, f"{what} carries idempotency key {key!r}, not {whose} ({expected})"


def _derived_key(s: WalkState, step: int, tool: str, args: dict, call: int | None) -> str:
    assert s.started is not None
    return idempotency_key(s.started.run_id, step, tool, args, call)


def check_action_key(s: WalkState, rec: Intent, first: Exec | None, request: RequestView | None) -> tuple[int, str] | None:
    """An action intent's key: its request's, else its first attempt's, else derived from its own fields."""
    what, key = f"action intent {rec.result_id}", rec.idempotency_key
    if request is not None:
        whose = f"the key of its approval request {request.result_id}"
        return key_problem(key, request.idempotency_key, what, whose)
    if first is not None:  # the first attempt's own key was checked when it was read
        whose = f"the key of its first attempt {first.result_id}"
        return key_problem(key, first.intent.idempotency_key or "", what, whose)
    assert rec.tool is not None and rec.args is not None
    bad = key_problem(key, _derived_key(s, rec.step, rec.tool, rec.args, rec.call), what, _DERIVED)
    if bad is None:
        return None
    owner = next((x for x in s.order if x.intent.kind == "action" and x.intent.idempotency_key == key), None)
    if owner is None:
        return bad
    return KEY_RULE, f"{bad[1]}: it is the key of {owner.result_id}, another logical action"


def check_request_key(s: WalkState, rec: ApprovalRequest) -> tuple[int, str] | None:
    """An approval request's key: derived from the tool call it shows, as its action's would be."""
    derived = _derived_key(s, rec.step, rec.tool, rec.args, rec.call)
    return key_problem(rec.idempotency_key, derived, f"approval_request {rec.result_id}", _DERIVED)


def check_rollback_key(s: WalkState, rec: Intent, action: Exec) -> tuple[int, str] | None:
    """A rollback intent's key: its action's key + `-rollback`."""
    derived = rollback_key(action.intent.idempotency_key or "")
    return key_problem(rec.idempotency_key, derived, f"rollback intent {rec.result_id}",
                       f"the key of its action {action.result_id} + -rollback")
