"""The history the model is given, rebuilt from what the log recorded (pure: no model, no tool)."""

from __future__ import annotations

from typing import Any

from .._log.ids import call_id
from .._log.model_port import _History
from .._recovery.state import tool_call
from .._recovery.walker import Walker


def assistant_turn(output: dict[str, Any] | None, model_rid: str, several: bool = False) -> dict[str, Any]:
    """The history message of a model's answer (`several`: its step runs every tool call, 1.2)."""
    out = output or {}
    call = out.get("tool_call")
    turn = {
        "role": "assistant",
        "content": out.get("text"),
        "tool_call": None if call is None else {"id": model_rid, "name": call["name"], "args": call["args"]},
    }
    calls = out.get("tool_calls")
    if several and calls and len(calls) > 1:
        n = len(calls)
        listed = [{"id": call_id(model_rid, k, n), "name": c["name"], "args": c["args"]} for k, c in enumerate(calls, 1)]
        turn["tool_call"] = listed[0]
        turn["tool_calls"] = listed
    return turn


def rebuild_history(walker: Walker) -> _History:
    """The history the model saw, rebuilt from the recorded steps (no model, no tool)."""
    history = _History()
    started = walker.started
    assert started is not None
    system = started.config.get("system")
    if system:
        history.append({"role": "system", "content": system})
    history.append({"role": "user", "content": started.goal})
    several = walker.minor >= 2
    for st in walker.steps:
        if st.output is None:
            break
        rid = st.output.result_id
        history.append(assistant_turn(st.output.output, rid, several))
        done = st.completed
        if done is None:
            continue
        if done.calls is not None:
            n = len(done.calls)
            for k, c in enumerate(done.calls, start=1):
                history.append(tool_turn(call_id(rid, k, n), c["tool"], c["observation"]))
            continue
        call = tool_call(st.output)
        if call is not None:
            history.append(tool_turn(rid, call["name"], done.observation or ""))
    return history


def tool_turn(model_rid: str, name: str, observation: str) -> dict[str, Any]:
    """The history message of a tool's observation, answering the model's call `model_rid`."""
    return {"role": "tool", "tool_call_id": model_rid, "name": name, "content": observation}
