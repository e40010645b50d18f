"""Decoding a record: every field checked for its type and value, strictly (docs/reference/log-format.md).

`decode` is the one way a JSON value becomes a record, for every reader and
store; it refuses what a correct writer could not have written, and ignores
fields it does not know (a newer minor version's).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .errors import RecordError, SchemaVersionError
from .records import (
    _BY_TAG,
    DIFFERENCE_KINDS,
    SUPPORTED_MAJOR,
    ActionResult,
    ApprovalRequest,
    Artifact,
    CheckpointAccepted,
    CrashLoopAccepted,
    Decision,
    GuardCheck,
    Intent,
    ModelCallResult,
    Record,
    Resolution,
    Resumed,
    RunFinished,
    RunStopped,
    RunStarted,
    StepCompleted,
)

# What each field must hold: a tuple of accepted Python types (exact for
# bool/int so `True` never passes as a step number) and whether None is allowed.
_INT = (int,)
_STR = (str,)
_DICT = (dict,)
_SPEC: dict[type, dict[str, tuple[tuple[type, ...], bool]]] = {
    RunStarted: {
        "run_id": (_STR, False),
        "goal": (_STR, False),
        "target": (_STR, True),
        "config": (_DICT, False),
        "schema_version": (_STR, False),
        "trace": (_STR, True),
        "at": (_STR, False),
    },
    Intent: {
        "kind": (_STR, False),
        "step": (_INT, False),
        "attempt": (_INT, False),
        "result_id": (_STR, False),
        "tool": (_STR, True),
        "args": (_DICT, True),
        "replay": (_STR, True),
        "idempotency_key": (_STR, True),
        "call": (_INT, True),
        "at": (_STR, False),
    },
    ModelCallResult: {
        "result_id": (_STR, False),
        "output": (_DICT, True),
        "usage": (_DICT, True),
        "error": (_STR, True),
        "transient": ((bool,), True),
        "at": (_STR, False),
    },
    StepCompleted: {
        "step": (_INT, False),
        "result_id": (_STR, True),
        "observation": (_STR, True),
        "is_error": ((bool,), False),
        "calls": ((list,), True),
        "at": (_STR, False),
    },
    RunFinished: {
        "reason": (_STR, False),
        "result": (_STR, True),
        "steps": (_INT, False),
        "error": (_STR, True),
        "by": (_STR, True),
        "why": (_STR, True),
        "at": (_STR, False),
    },
    Resolution: {
        "result_id": (_STR, False),
        "outcome": (_STR, False),
        "observation": (_STR, True),
        "by": (_STR, False),
        "reason": (_STR, True),
        "source": (_STR, False),
        "at": (_STR, False),
    },
    GuardCheck: {
        "result_id": (_STR, False),
        "guard": (_STR, False),
        "passed": ((bool,), False),
        "reason": (_STR, True),
        "rollback": (_STR, True),
        "at": (_STR, False),
    },
    ActionResult: {
        "result_id": (_STR, False),
        "observation": (_STR, False),
        "is_error": ((bool,), False),
        "at": (_STR, False),
    },
    ApprovalRequest: {
        "result_id": (_STR, False),
        "step": (_INT, False),
        "kind": (_STR, False),
        "tool": (_STR, False),
        "args": (_DICT, False),
        "args_sha256": (_STR, False),
        "idempotency_key": (_STR, False),
        "reason": (_STR, True),
        "call": (_INT, True),
        "at": (_STR, False),
    },
    Decision: {
        "id": (_STR, False),
        "decision": (_STR, False),
        "by": (_STR, False),
        "request_sha256": (_STR, False),
        "args_sha256": (_STR, False),
        "reason": (_STR, True),
        "args": (_DICT, True),
        "answer": (_STR, True),
        "at": (_STR, False),
    },
    CheckpointAccepted: {
        "differences": ((list,), False),
        "reason": (_STR, False),
        "by": (_STR, False),
        "at": (_STR, False),
    },
    Resumed: {
        "by": (_STR, False),
        "trace": (_STR, True),
        "at": (_STR, False),
    },
    CrashLoopAccepted: {
        "resumes": (_INT, False),
        "reason": (_STR, False),
        "by": (_STR, False),
        "at": (_STR, False),
    },
    Artifact: {
        "result_id": (_STR, False),
        "name": (_STR, False),
        "path": (_STR, False),
        "size": (_INT, False),
        "sha256": (_STR, False),
        "at": (_STR, False),
    },
    RunStopped: {
        "cause": (_STR, False),
        "step": (_INT, False),
        "attempts": (_INT, False),
        "failures": (_INT, False),
        "error": (_STR, False),
        "since": (_STR, False),
        "endpoint": (_STR, True),
        "at": (_STR, False),
    },
}
# Fields a writer may leave out (older minor versions, or defaults).
_OPTIONAL = {
    RunStarted: {"target", "config", "trace"},  # trace: log format 1.4
    Intent: {"tool", "args", "replay", "idempotency_key", "call"},
    ModelCallResult: {"usage", "error", "transient"},
    StepCompleted: {"is_error", "calls"},
    RunFinished: {"error", "by", "why"},
    Resolution: {"observation", "reason", "by", "source"},
    GuardCheck: {"reason", "rollback"},
    ActionResult: {"is_error"},
    ApprovalRequest: {"reason", "call"},
    Decision: {"reason", "args", "answer"},
    CheckpointAccepted: set(),
    Resumed: {"trace"},  # log format 1.4
    CrashLoopAccepted: set(),
    Artifact: set(),
    RunStopped: {"endpoint"},
}


def schema_major(version: str) -> int | None:
    head, _, _ = version.partition(".")
    return int(head) if head.isdigit() else None


def decode(obj: Any) -> Record:
    """Turn one decoded JSON value into a record, or raise `RecordError`.

    Public as `polyloop.decode_record`. Strict about what a record needs,
    ignores fields it does not know, refuses an unknown major schema version
    (`SchemaVersionError`).
    """
    if not isinstance(obj, dict):
        raise RecordError(f"expected a JSON object, got {type(obj).__name__}")
    tag = obj.get("record")
    cls = _BY_TAG.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise RecordError(f"unknown record kind {tag!r}")
    kwargs: dict[str, Any] = {}
    for name, types, nullable, optional in _FIELDS[cls]:
        value = obj.get(name, _MISSING)
        if value is _MISSING:
            if optional:
                continue
            raise RecordError(f"{tag} record lacks field {name!r}")
        if value is None:
            if not nullable:
                raise RecordError(f"{tag}.{name} must not be null")
        elif type(value) not in types:
            raise RecordError(f"{tag}.{name} has the wrong type ({type(value).__name__})")
        kwargs[name] = value
    _check_values(cls, kwargs)
    return cls(**kwargs)


_MISSING = object()
_SHA256 = re.compile(r"[0-9a-f]{64}")
# _SPEC and _OPTIONAL flattened for decode's loop (one tuple per field, read
# once per record): (name, accepted types, nullable, optional).
_FIELDS: dict[type, tuple[tuple[str, tuple[type, ...], bool, bool], ...]] = {
    cls: tuple((name, types, nullable, name in _OPTIONAL[cls]) for name, (types, nullable) in spec.items())
    for cls, spec in _SPEC.items()
}


def _check_values(cls: type, v: dict[str, Any]) -> None:
    check = _CHECKS.get(cls)
    if check is not None:
        check(v)


def _check_run_started(v: dict[str, Any]) -> None:
    if schema_major(v["schema_version"]) != SUPPORTED_MAJOR:
        raise SchemaVersionError(None, v["schema_version"])


def _check_intent(v: dict[str, Any]) -> None:
    if v["kind"] not in ("model_call", "action", "rollback"):
        raise RecordError(f"intent.kind {v['kind']!r} is not model_call, action or rollback")
    if v["step"] < 1 or v["attempt"] < 1:
        raise RecordError("intent step and attempt start at 1")
    action_fields = ("tool", "args", "replay", "idempotency_key")
    if v["kind"] != "model_call":
        if any(v.get(f) is None for f in action_fields):
            raise RecordError(f"{v['kind']} intent lacks tool, args, replay or idempotency_key")
        if v["replay"] not in ("safe", "never"):
            raise RecordError(f"intent.replay {v['replay']!r} is not safe or never")
    elif any(v.get(f) is not None for f in action_fields) or v.get("call") is not None:
        raise RecordError("model_call intent carries action fields")
    call = v.get("call")
    if call is not None and call < 1:
        raise RecordError("intent.call starts at 1")


def _check_step_completed(v: dict[str, Any]) -> None:
    if v["step"] < 1:
        raise RecordError("step_completed.step starts at 1")
    calls = v.get("calls")
    if calls is not None:
        if len(calls) < 2 or not all(_is_call_outcome(c) for c in calls):
            raise RecordError(
                "step_completed.calls must list two or more {result_id, tool, observation, is_error}"
            )
        if v.get("result_id") is not None or v.get("observation") is not None:
            raise RecordError("a step_completed with calls has no result_id or observation of its own")


def _check_run_finished(v: dict[str, Any]) -> None:
    if v["reason"] not in ("final_answer", "max_steps", "error", "tool_failures", "cancelled"):
        raise RecordError(f"run_finished.reason {v['reason']!r} is unknown")
    # Who and why (log format 1.3) belong to a cancellation, and a cancellation has both.
    if v["reason"] == "cancelled":
        for name in ("by", "why"):
            if not (v.get(name) or "").strip():
                raise RecordError(f"run_finished of a cancelled run needs {name}")
    elif v.get("by") is not None or v.get("why") is not None:
        raise RecordError(f"run_finished.by and .why belong to a cancelled run, not to {v['reason']}")


def _check_resolution(v: dict[str, Any]) -> None:
    if v["outcome"] not in ("executed", "not_executed"):
        raise RecordError(f"resolution.outcome {v['outcome']!r} is unknown")
    if v.get("source", "operator") not in ("operator", "reconcile"):
        raise RecordError(f"resolution.source {v['source']!r} is not operator or reconcile")


def _check_guard_check(v: dict[str, Any]) -> None:
    if v["guard"] not in ("precondition", "verify", "reconcile"):
        raise RecordError(f"guard_check.guard {v['guard']!r} is not precondition, verify or reconcile")
    if v.get("rollback") not in (None, "undo", "compensate", "alert"):
        raise RecordError(f"guard_check.rollback {v['rollback']!r} is not undo, compensate or alert")


def _check_approval_request(v: dict[str, Any]) -> None:
    if v["kind"] not in ("approval", "answer"):
        raise RecordError(f"approval_request.kind {v['kind']!r} is not approval or answer")
    if v["step"] < 1:
        raise RecordError("approval_request.step starts at 1")
    if v.get("call") is not None and v["call"] < 1:
        raise RecordError("approval_request.call starts at 1")


def _check_decision(v: dict[str, Any]) -> None:
    if v["decision"] not in ("approved", "denied", "answered"):
        raise RecordError(f"decision.decision {v['decision']!r} is not approved, denied or answered")
    if (v["decision"] == "answered") != (v.get("answer") is not None):
        raise RecordError("decision.answer goes with an answered decision, and only with one")
    if v.get("args") is not None and v["decision"] != "approved":
        raise RecordError("decision.args (edited arguments) go only with an approved decision")


def _check_checkpoint_accepted(v: dict[str, Any]) -> None:
    for d in v["differences"]:
        if not (isinstance(d, dict) and d.get("what") in DIFFERENCE_KINDS and isinstance(d.get("name"), str)):
            raise RecordError("checkpoint_accepted.differences holds {what, name, recorded, now} objects")


def _check_crash_loop_accepted(v: dict[str, Any]) -> None:
    if v["resumes"] < 0:
        raise RecordError("crash_loop_accepted.resumes is not negative")


def _check_artifact(v: dict[str, Any]) -> None:
    if v["size"] < 0:
        raise RecordError("artifact.size must not be negative")
    if not _SHA256.fullmatch(v["sha256"]):
        raise RecordError("artifact.sha256 is not 64 lowercase hex digits")


def _check_run_stopped(v: dict[str, Any]) -> None:
    if v["cause"] != "model_unavailable":
        raise RecordError(f"run_stopped.cause {v['cause']!r} is not model_unavailable")
    if v["step"] < 1 or v["attempts"] < 0 or v["failures"] < 1:
        raise RecordError("run_stopped.step and .failures start at 1, .attempts at 0")


def _check_model_call_result(v: dict[str, Any]) -> None:
    if (v["output"] is None) == (v.get("error") is None):
        raise RecordError("model_call_result has exactly one of output and error")
    if v.get("transient") is not None and (v["transient"] is not True or v["output"] is not None):
        raise RecordError("model_call_result.transient is true on a failed attempt, or absent")
    usage = v.get("usage")
    if usage is not None:
        for key in ("input_tokens", "output_tokens"):
            if key in usage and type(usage[key]) is not int:
                raise RecordError(f"model_call_result.usage.{key} must be an integer")
    out = v["output"]
    if out is not None:
        text, call = out.get("text"), out.get("tool_call")
        if text is not None and not isinstance(text, str):
            raise RecordError("model_call_result.output.text must be a string")
        if call is not None and not _is_tool_call(call):
            raise RecordError("model_call_result.output.tool_call needs a name and args")
        model = out.get("model")
        if model is not None and not (isinstance(model, str) and model):
            raise RecordError("model_call_result.output.model must be a non-empty string")
        calls = out.get("tool_calls")
        if calls is not None and not (
            isinstance(calls, list)
            and len(calls) >= 2
            and all(_is_tool_call(c) for c in calls)
            and calls[0] == call
        ):
            raise RecordError(
                "model_call_result.output.tool_calls must list two or more {name, args}, "
                "the first of them the tool_call"
            )


# The value checks of each record kind, beyond the field types `_SPEC` states.
_CHECKS: dict[type, Callable[[dict[str, Any]], None]] = {
    RunStarted: _check_run_started,
    Intent: _check_intent,
    StepCompleted: _check_step_completed,
    RunFinished: _check_run_finished,
    Resolution: _check_resolution,
    GuardCheck: _check_guard_check,
    ApprovalRequest: _check_approval_request,
    Decision: _check_decision,
    CheckpointAccepted: _check_checkpoint_accepted,
    CrashLoopAccepted: _check_crash_loop_accepted,
    Artifact: _check_artifact,
    ModelCallResult: _check_model_call_result,
    RunStopped: _check_run_stopped,
}


def _is_tool_call(call: Any) -> bool:
    return isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("args"), dict)


def _is_call_outcome(c: Any) -> bool:
    return (
        isinstance(c, dict)
        and "result_id" in c  # null when the call never got an intent, but always there
        and (c["result_id"] is None or isinstance(c["result_id"], str))
        and isinstance(c.get("tool"), str)
        and isinstance(c.get("observation"), str)
        and type(c.get("is_error")) is bool
    )
