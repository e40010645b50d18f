"""The walker's handlers for checkpoint validity and retry budgets (log format 1.2).

The walker's checks, on a `WalkState`, of the records `checkpoint_accepted`,
`resumed` and `crash_loop_accepted`, the 1.2 fields of `run_started.config`
and the `tool_failures` finish, each checked against the numbered rules
21-24 of docs/reference/log-format.md. They also keep the two budgets the
planner reads: resumes without progress (the crash loop) and each tool's
failures in a row.
"""

from __future__ import annotations

from typing import Any

from .._log.records import CheckpointAccepted, CrashLoopAccepted, Intent, Record, Resumed, RunFinished, RunStarted
from .state import Budgets, Step, WalkState

__all__ = [
    "CONFIG_1_2", "Budgets", "apply_checkpoint_accepted", "apply_crash_loop_accepted", "apply_resumed",
    "budget_finish", "budget_intent", "budgets_from", "check_config_1_2", "step_done",
]

# run_started.config keys a 1.1 writer never wrote.
CONFIG_1_2 = ("logic_version", "inputs", "config_hashes", "max_tool_failures", "max_resumes_without_progress")


def _positive(value: Any) -> bool:
    return type(value) is int and value >= 1


def check_config_1_2(config: dict[str, Any], minor: int) -> tuple[int, str] | None:
    """Why the 1.2 fields of a recorded config are not ones a writer makes (None: they are)."""
    tools = config.get("tools") if isinstance(config.get("tools"), list) else []
    present = [k for k in CONFIG_1_2 if k in config]
    present += [f"tools[{t['name']!r}].max_failures" for t in tools if "max_failures" in t]
    if minor < 2:
        return (21, f"config.{present[0]} in a log of format 1.{minor}, which has no such field") if present else None
    for key in ("max_tool_failures", "max_resumes_without_progress"):
        if config.get(key) is not None and not _positive(config[key]):
            return 14, f"config.{key} is {config[key]!r}, not a positive integer"
    for t in tools:
        if t.get("max_failures") is not None and not _positive(t["max_failures"]):
            return 14, f"config.tools[{t['name']!r}].max_failures is not a positive integer"
    version = config.get("logic_version")
    if version is not None and not isinstance(version, str):
        return 14, "config.logic_version is not a string"
    hashes = config.get("config_hashes", {})
    if not (isinstance(hashes, dict) and all(isinstance(v, str) for v in hashes.values())):
        return 14, "config.config_hashes is not an object of hashes"
    inputs = config.get("inputs", {})
    if not (isinstance(inputs, dict) and all(
        isinstance(fp, dict) and isinstance(fp.get("sha256"), str) for fp in inputs.values()
    )):
        return 14, "config.inputs is not an object of {kind, path, sha256}"
    return None


def budgets_from(s: WalkState, rec: RunStarted) -> tuple[int, str] | None:
    config = rec.config
    bad = check_config_1_2(config, s.minor)
    if bad is not None:
        return bad
    s.max_resumes = config.get("max_resumes_without_progress")
    default = config.get("max_tool_failures")
    for t in config.get("tools") or []:
        limit = t.get("max_failures") or default
        if limit is not None:
            s.limits[t["name"]] = limit
    s.default_limit = default
    return None


def _new_in_1_2(s: WalkState, rec: Record) -> tuple[int, str] | None:
    if s.minor < 2:
        return 21, f"{rec.TAG} in a log of format 1.{s.minor}, which has no such record"
    return None


def apply_checkpoint_accepted(s: WalkState, rec: CheckpointAccepted, index: int) -> tuple[int, str] | None:
    bad = _new_in_1_2(s, rec)
    if bad is not None:
        return bad
    if not rec.differences:
        return 22, "checkpoint_accepted accepts no difference"
    if not rec.reason.strip() or not rec.by:
        return 22, "checkpoint_accepted without a reason or without who accepted"
    s.accepted.append(rec)
    s.overrides.append(rec)
    return None


def apply_resumed(s: WalkState, rec: Resumed, index: int) -> tuple[int, str] | None:
    bad = _new_in_1_2(s, rec)
    if bad is not None:
        return bad
    if s.max_resumes is not None and s.idle_resumes >= s.max_resumes:
        return 23, (
            f"a resume after {s.idle_resumes} resumes without progress (the crash-loop budget is "
            f"{s.max_resumes}) and no crash_loop_accepted"
        )
    s.resumes += 1
    s.idle_resumes += 1
    return None


def apply_crash_loop_accepted(s: WalkState, rec: CrashLoopAccepted, index: int) -> tuple[int, str] | None:
    bad = _new_in_1_2(s, rec)
    if bad is not None:
        return bad
    if s.max_resumes is None or s.idle_resumes < s.max_resumes:
        return 23, "crash_loop_accepted while the run is not in a crash loop"
    if rec.resumes != s.idle_resumes:
        return 23, f"crash_loop_accepted lifts {rec.resumes} resumes, the log has {s.idle_resumes}"
    if not rec.reason.strip() or not rec.by:
        return 23, "crash_loop_accepted without a reason or without who accepted"
    s.idle_resumes = 0
    s.overrides.append(rec)
    return None


def step_done(s: WalkState, st: Step, is_error: bool) -> None:
    """A step completed: progress for the crash loop, and its tools' failure streaks
    (each call of a step of several counts for its own tool, in the calls' order)."""
    s.idle_resumes = 0
    done = st.completed
    if done is not None and done.calls is not None:
        # A step of several calls counts once per tool: a failure if every call of it
        # in the step failed, a success (the streak ends) if any succeeded.
        failed: dict[str, bool] = {}
        for c in done.calls:
            failed[c["tool"]] = failed.get(c["tool"], True) and c["is_error"]
        for name, all_failed in failed.items():
            _streak(s, name, all_failed)
        return
    out = st.output.output if st.output is not None else None
    call = out.get("tool_call") if out else None
    if call is None:
        return
    _streak(s, call["name"], is_error)


def _streak(s: WalkState, name: str, is_error: bool) -> None:
    if not is_error:
        if name in s.streaks:
            s.streaks[name] = 0
        return
    n = s.streaks[name] = s.streaks.get(name, 0) + 1
    limit = s.limits.get(name, s.default_limit)
    if limit is not None and n >= limit:
        s.exhausted = (name, n)


def budget_intent(s: WalkState, rec: Intent) -> tuple[int, str] | None:
    if s.exhausted is not None:
        tool, n = s.exhausted
        return 24, f"intent for step {rec.step} after {tool} failed {n} times in a row, its budget"
    return None


def budget_finish(s: WalkState, rec: RunFinished) -> tuple[int, str] | None:
    if rec.reason == "tool_failures":
        if s.minor < 2:
            return 21, f"run_finished says tool_failures in a log of format 1.{s.minor}"
        if s.exhausted is None:
            return 24, "run_finished says tool_failures, but no tool spent its failure budget"
    elif s.exhausted is not None and rec.reason != "cancelled":
        return 24, f"run_finished says {rec.reason} after {s.exhausted[0]} spent its failure budget"
    return None
