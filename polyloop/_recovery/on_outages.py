"""The walker's handler for outages (log format 1.3): `run_stopped`, and transient model failures.

A model call that failed transiently (`model_call_result.transient`) spends
the run's retry budget for outages, not its `max_attempts`: such failures
never end a run. Once the budget is spent the run loop writes
`run_stopped` and stops, resumable. The checks are rules 37 and 38 of
docs/reference/log-format.md.
"""

from __future__ import annotations

from .._log.records import ModelCallResult, RunStopped
from .state import WalkState

__all__ = ["RunStopped", "apply_run_stopped", "check_transient", "transient_failures"]


def check_transient(s: WalkState, rec: ModelCallResult) -> tuple[int, str] | None:
    """Why a `model_call_result` marked transient cannot be in this log (None: it can)."""
    if rec.transient and s.minor < 3:
        return 37, f"model_call_result {rec.result_id} is marked transient in a log of format 1.{s.minor}"
    return None


def transient_failures(s: WalkState, step: int) -> int:
    """Transiently failed model call attempts of `step` since its latest `run_stopped`."""
    if len(s.steps) < step:
        return 0
    calls = s.steps[step - 1].model_calls[s.fresh_from.get(step, 0):]
    return sum(1 for x in calls if isinstance(x.result, ModelCallResult) and x.result.transient)


def apply_run_stopped(s: WalkState, rec: RunStopped, index: int) -> tuple[int, str] | None:
    if s.minor < 3:
        return 37, f"run_stopped in a log of format 1.{s.minor}, which has no such record"
    open_step = s.completed_steps + 1
    if rec.step != open_step:
        return 38, f"run_stopped names step {rec.step} while step {open_step} is open"
    st = s.steps[rec.step - 1] if len(s.steps) >= rec.step else None
    if st is not None and st.output is not None:
        return 38, f"run_stopped for step {rec.step}, whose model call returned"
    if st is not None and st.model_calls and st.model_calls[-1].result is None:
        return 38, f"run_stopped while model call {st.model_calls[-1].intent.result_id} has no result"
    spent = transient_failures(s, rec.step)
    if rec.attempts != spent:
        return 38, f"run_stopped counts {rec.attempts} failed attempts, step {rec.step} has {spent} since its last stop"
    s.fresh_from[rec.step] = len(st.model_calls) if st is not None else 0
    # The resume that stopped here did not crash: it does not count towards the crash-loop budget.
    s.idle_resumes = max(0, s.idle_resumes - 1)
    s.stops.append(rec)
    s.stop_index = index
    return None
