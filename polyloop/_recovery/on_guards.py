"""The walker's handlers for guarded actions (log format 1.1, docs/how-to/guard-a-side-effect.md).

One function per guard record, called by `polyloop._recovery.walker.Walker`
(`guard_check`, `action_result`, a `rollback` intent, a reconcile
`resolution`), each checking the numbered rules 15-20 of
docs/reference/log-format.md against a `WalkState`. The state these
records give an execution is assigned in `state.STATE_TABLE`, nowhere here.
"""

from __future__ import annotations

from typing import Any

from .._log.records import ActionResult, GuardCheck, Intent, Resolution
from .on_keys import check_rollback_key
from .state import NO_GUARDS, Exec, Step, WalkState, phase, rollback_succeeded

__all__ = [
    "NO_GUARDS", "apply_action_result", "apply_guard_check", "check_guard_config", "completion",
    "guard_resolution", "guards_of", "phase", "rollback_intent", "rollback_succeeded",
]


def guards_of(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{tool name: its recorded guards} from a `run_started` config (tools without guards absent)."""
    tools = config.get("tools")
    if not isinstance(tools, list):
        return {}
    return {t["name"]: t["guards"] for t in tools if isinstance(t, dict) and isinstance(t.get("guards"), dict)}


def check_guard_config(tools: list[Any]) -> str | None:
    """Why the recorded guards are not ones a writer makes (None when they are)."""
    for t in tools:
        g = t.get("guards")
        if g is None:
            continue
        if not isinstance(g, dict):
            return f"config.tools[{t['name']!r}].guards is not an object"
        for flag in ("precondition", "verify", "reconcile", "irreversible"):
            if type(g.get(flag, False)) is not bool:
                return f"config.tools[{t['name']!r}].guards.{flag} is not a boolean"
        if g.get("rollback") not in (None, "undo", "compensate", "alert"):
            return f"config.tools[{t['name']!r}].guards.rollback is not undo, compensate, alert or null"
    return None


def _guarded_target(s: WalkState, rid: str, what: str) -> tuple[Exec | None, tuple[int, str] | None]:
    if s.minor < 1:
        return None, (15, f"{what} in a log of format 1.0, which has no guard records")
    x = s.by_id.get(rid)
    if x is None:
        return None, (4, f"{what} names {rid}, which has no earlier intent")
    if x.intent.kind == "model_call":
        return None, (15, f"{what} names {rid}, a model call")
    if not s.is_current(x):
        return None, (5, f"{what} for {rid} after later intents: two writers interleaved")
    if x.result is not None:
        return None, (15, f"{what} for {rid}, whose step already completed")
    return x, None


def apply_guard_check(s: WalkState, rec: GuardCheck, index: int) -> tuple[int, str] | None:
    x, bad = _guarded_target(s, rec.result_id, f"guard_check ({rec.guard})")
    if bad is not None:
        return bad
    assert x is not None
    if x.intent.kind != "action":
        return 15, f"guard_check ({rec.guard}) names {rec.result_id}, a rollback"
    if x.precondition is not None and not x.precondition.passed:
        return 17, f"a guard record for {rec.result_id} after its precondition failed"
    if not x.guards.get(rec.guard):
        return 16, f"guard_check ({rec.guard}) for {x.intent.tool}, which declares no {rec.guard}"
    if rec.guard == "precondition":
        if x.precondition is not None or x.returned is not None or x.reconciled is not None:
            return 17, f"a second precondition check of {rec.result_id}, or one after its result"
        x.precondition = rec
    elif rec.guard == "verify":
        got = x.returned is not None or (x.reconciled is not None and x.reconciled.outcome == "executed")
        if not got:
            return 18, f"a verification of {rec.result_id}, which has no result"
        if x.verification is not None:
            return 18, f"a second verification of {rec.result_id}"
        if rec.passed and rec.rollback is not None:
            return 18, f"a passed verification of {rec.result_id} names a rollback"
        if not rec.passed and rec.rollback != x.guards.get("rollback"):
            return 18, f"the verification of {rec.result_id} names a rollback the tool does not declare"
        x.verification = rec
    else:
        if rec.passed:
            return 17, f"a passed reconcile check of {rec.result_id}: reconcile settles with a resolution"
        if x.returned is not None or x.reconciled is not None or x.resolution is not None:
            return 17, f"a reconcile check of {rec.result_id}, which is not unknown"
        if x.reconcile_check is not None:
            return 17, f"a second reconcile check of {rec.result_id}"
        x.reconcile_check = rec
    return None


def apply_action_result(s: WalkState, rec: ActionResult, index: int) -> tuple[int, str] | None:
    x, bad = _guarded_target(s, rec.result_id, "action_result")
    if bad is not None:
        return bad
    assert x is not None
    if x.returned is not None:
        return 3, f"a second result for {rec.result_id}"
    if x.resolution is not None or x.reconciled is not None:
        return 15, f"action_result for {rec.result_id}, which was already resolved"
    if x.intent.kind == "action":
        # A call of a step of several reports every outcome this way (1.2);
        # a step's only call, only a result that a verification reads back.
        if x.intent.call is None and not x.guards.get("verify"):
            return 16, f"action_result for {x.intent.tool}, which declares no verify"
        if x.guards.get("precondition") and (x.precondition is None or not x.precondition.passed):
            return 17, f"action_result for {rec.result_id} without a passed precondition"
    x.returned = rec
    return None


def rollback_intent(s: WalkState, rec: Intent, st: Step) -> tuple[int, str] | None:
    if s.minor < 1:
        return 15, "a rollback intent in a log of format 1.0"
    attempts = st.attempts(rec.call)
    a = attempts[-1] if attempts else None
    if a is None or a.verification is None or a.verification.passed:
        return 19, f"rollback intent for step {rec.step} without a failed verification"
    if a.resolution is not None:
        return 19, f"rollback of {a.result_id} after an operator settled it"
    if a.guards.get("rollback") not in ("undo", "compensate"):
        return 16, f"rollback intent for {a.intent.tool}, which declares no undo or compensate rollback"
    if (rec.tool, rec.args, rec.replay) != (a.intent.tool, a.intent.args, "never"):
        return 19, f"rollback intent of step {rec.step} does not name the action's tool and arguments"
    bad = check_rollback_key(s, rec, a)
    if bad is not None:
        return bad
    if rec.attempt != len(a.rollbacks) + 1:
        return 6, f"rollback attempt {rec.attempt} of step {rec.step} follows {len(a.rollbacks)} attempts"
    if a.rollbacks:
        prev = a.rollbacks[-1]
        res = prev.resolution
        if prev.returned is not None or res is None or res.outcome != "not_executed":
            return 19, f"rollback of step {rec.step} attempted again without a not_executed resolution"
    return None


def completion(s: WalkState, x: Exec) -> tuple[int, str] | None:
    """Why the step of action `x` may not complete yet (None: it may)."""
    rid = x.intent.result_id
    verdict = x.resolution or x.reconciled
    ver = x.verification
    if ver is not None and not ver.passed:
        if x.resolution is None and not (x.rollbacks and rollback_succeeded(x.rollbacks[-1])):
            return 20, f"step of {rid} completed after a failed verification without a rollback or resolution"
        return None
    if verdict is not None and verdict.outcome == "not_executed":
        return 10, f"result for {rid} after an operator said it did not execute"
    if x.guards.get("verify") and ver is None and x.resolution is None:
        if (x.returned is not None and not x.returned.is_error) or verdict is not None:
            return 20, f"step of {rid} completed before its verification"
    if phase(x) == "pending":
        return 17, f"step of {rid} completed before its precondition was checked"
    return None


def guard_resolution(s: WalkState, x: Exec, rec: Resolution) -> tuple[int, str] | None:
    """Rules for a resolution of a guarded execution (None: the general rule 11 decides)."""
    if rec.source == "reconcile":
        if s.minor < 1:
            return 15, "a reconcile resolution in a log of format 1.0"
        if x.intent.kind != "action" or not x.guards.get("reconcile"):
            return 16, f"a reconcile resolution of {rec.result_id}, whose tool declares no reconcile"
        if x.reconciled is not None or x.resolution is not None or x.returned is not None:
            return 11, f"a reconcile resolution of {rec.result_id}, which is not unknown"
        return None
    if x.intent.kind == "rollback":
        if x.returned is not None or x.resolution is not None:
            return 11, f"resolution of rollback {rec.result_id}, which is not unknown"
        if x.of is None or x.of.rollbacks[-1] is not x or x.of.result is not None:
            return 11, f"resolution of rollback {rec.result_id}, which a later attempt superseded"
        return None
    ver = x.verification
    if ver is not None and not ver.passed:
        if x.resolution is not None:
            return 11, f"a second resolution of {rec.result_id}"
        if x.rollbacks and phase(x.rollbacks[-1]) == "" and x.rollbacks[-1].returned is None \
                and x.rollbacks[-1].resolution is None:
            return 11, f"resolution of {rec.result_id} while its rollback is unknown: settle the rollback"
        return None
    if x.returned is not None:
        return 11, f"resolution of {rec.result_id}, which already has a result"
    return None
