"""Inspecting a run's log: what it says, and what resume would do next."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from .._run.artifacts import ArtifactCheck
from .._recovery.walker import Execution, Recovery, Walker
from .._log.errors import CheckpointError, CorruptLogError, Problem
from .._log.ids import check_run_id
from .._log.names import execution_name
from .._run.hold import maybe_await, walk_off_loop
from .._recovery.plan import (
    AlertStop,
    AwaitDecision,
    CallModel,
    CrashLoopStop,
    Finished,
    NeedsOperator,
    Next,
    crash_loop_reason,
    plan,
    waits_for,
)
from .outlook import outlook
from .shapes import cancelled_json, resolution_json
from .stops import stop_reason, stopped_json
from .._log.records import CheckpointAccepted, ModelCallResult, Record
from .._log.store_port import Store, capabilities_of

RunStatus = Literal["finished", "needs_operator", "resumable", "corrupt", "active"]


@dataclass(frozen=True, slots=True)
class RunReport:
    """Everything `polyloop inspect` shows about a run.

    Attributes:
        run_id: the run.
        status: `finished`, `needs_operator`, `resumable`, `corrupt` or
            `active` (a live process holds it).
        reason: why it finished (`final_answer`, `max_steps`, `error`, `tool_failures`) or,
            for any other status, why it stopped, in one sentence.
        next: what `polyloop resume` would do next, in one sentence, judged as
            resume judges it: a missing or altered product, and (when
            `validity` was asked for) a changed input, logic version or
            configuration, make it `refuse (exit code 4): ` and resume's own
            message; before a stop for a person it says the stop, then the refusal.
        recovery: the classification (None when the log is corrupt).
        records: the log's records as read.
        problems: why the log is corrupt (empty unless `status == "corrupt"`).
        holder: who holds the run when it is active.
        torn_line: the line where a torn tail starts, if the store knows one.
        validity: the checkpoint verdict of a stopped run (log format 1.2),
            when asked for (`inspect_run(..., validity=True)`):
            `{"valid": bool, "differences": [...], "not_checked": None}`, or
            `{"valid": None, "differences": [], "not_checked": WHY}` when
            the target could not be loaded; None for a finished, active or
            corrupt run, or when not asked.
        artifacts: every product the run references (latest reference per
            name), checked against what the store holds now (log format 1.2).
        refusal: the `CheckpointError` `polyloop resume` would refuse the run
            with now (exit code 4), or None; `next` says it.
    """

    run_id: str
    status: RunStatus
    reason: str
    next: str
    recovery: Recovery | None
    records: tuple[Record, ...]
    problems: tuple[Problem, ...] = ()
    holder: str | None = None
    torn_line: int | None = None
    validity: dict[str, Any] | None = None
    artifacts: tuple[ArtifactCheck, ...] = ()
    refusal: CheckpointError | None = None

    @property
    def waiting(self) -> list[dict[str, Any]]:
        """What a person must settle before the run can go on (empty when nothing waits).

        Each entry is `{"id", "kind", "tool", "args", "reason"}`; `id` is what
        the settling command takes (`polyloop mark-resolved RUN ID ...` for
        kinds `unknown` and `alert`, `polyloop approve` / `deny` for kind
        `approval`, `polyloop answer` for kind `answer`; for kind `crash_loop`
        it is the run id: `polyloop resume RUN --accept-crash-loop --reason
        TEXT`). A run held by a live process waits for nobody yet.
        """
        rec = self.recovery
        if rec is None or rec.finished is not None:
            return []
        requests = [_waiting_request(r, self.run_id) for r in rec.waiting_requests()]
        if not rec.blocking and not requests:
            planned = plan(rec)
            return [_crash_loop_waiting(self.run_id, planned)] if isinstance(planned, CrashLoopStop) else []
        return [_waiting(e) for e in rec.blocking] + requests

    def __repr__(self) -> str:
        # Short on purpose, like Recovery's: the records of a long run are many.
        return f"RunReport(run_id={self.run_id!r}, status={self.status!r}, records={len(self.records)})"

    @property
    def tokens(self) -> dict[str, int] | None:
        """Tokens spent by every model call, and re-spent by repeated attempts (None if corrupt)."""
        return token_totals(self.recovery) if self.recovery is not None else None

    def to_json(self) -> dict[str, Any]:
        """The `inspect --json` document."""
        rec = self.recovery
        doc: dict[str, Any] = {
            "run_id": self.run_id,
            "status": self.status,
            "reason": self.reason,
            "next": self.next,
            "problems": [str(p) for p in self.problems],
            "holder": self.holder,
            "torn_tail_line": self.torn_line,
            "waiting": self.waiting,
            "artifacts": [a.to_json() for a in self.artifacts],
        }
        if rec is None:
            doc.update(goal=None, target=None, steps=0, tools=None, executions=[], resolutions=[], tokens=None)
            return doc
        doc.update(
            goal=rec.started.goal,
            target=rec.started.target,
            started_at=rec.started.at,
            finished_at=rec.finished.at if rec.finished else None,
            result=rec.finished.result if rec.finished else None,
            steps=rec.completed_steps,
            max_steps=rec.max_steps,
            tools=rec.started.config.get("tools"),
            executions=[execution_json(e) for e in rec.executions],
            resolutions=[resolution_json(r) for r in rec.resolutions],
            cancelled=cancelled_json(rec.finished),
            tokens=token_totals(rec),
            validity=self.validity,
            budgets=budgets_json(rec),
            overrides=[override_json(o) for o in rec.overrides],
            stopped=stopped_json(rec.stopped),
        )
        if rec.requests:  # log format 1.2: only runs whose tool calls waited for a person
            doc["requests"] = [request_json(r) for r in rec.requests]
        return doc


def _waiting(e: Execution) -> dict[str, Any]:
    if e.state == "alert":
        ver = e.verification
        why = ver.reason if ver is not None and ver.reason else "it returned False"
        failed = e.rollbacks[-1].returned if e.rollbacks else None
        if failed is not None:
            undo = f"; its rollback failed: {failed.observation}"
        else:
            undo = "; the tool declares no undo or compensate rollback"
        reason = f"the verification of {e.tool} ({e.result_id}, step {e.step}) failed: {why}{undo}"
        return {"id": e.result_id, "kind": "alert", "tool": e.tool, "args": e.args, "reason": reason}
    if e.kind == "rollback":
        reason = (
            f"{execution_name(e)} is in doubt: the process stopped after its intent and before its "
            "result, and a rollback is never repeated silently"
        )
    else:
        reason = (
            f"the outcome of {execution_name(e)} is unknown: the process stopped after its "
            "intent and before its result, and it is `never` replay"
        )
    if e.reconcile_check is not None:
        reason += f"; its reconcile could not tell: {e.reconcile_check.reason}"
    return {"id": e.result_id, "kind": "unknown", "tool": e.tool, "args": e.args, "reason": reason}


def _waiting_request(r: Any, run_id: str) -> dict[str, Any]:
    return {"id": r.result_id, "kind": r.kind, "tool": r.tool, "args": r.args, "reason": waits_for(r, run_id)}


def request_json(r: Any) -> dict[str, Any]:
    """One entry of `inspect --json`'s `requests`: a request and its decision (docs/reference/json.md)."""
    q, d = r.request, r.decision
    return {
        "id": r.result_id,
        "kind": r.kind,
        "step": r.step,
        "state": r.state,
        "tool": r.tool,
        "args": r.args,
        "args_sha256": q.args_sha256,
        "idempotency_key": q.idempotency_key,
        "reason": q.reason,
        "at": q.at,
        "decision": None if d is None else {
            "decision": d.decision,
            "by": d.by,
            "reason": d.reason,
            "at": d.at,
            "args_sha256": d.args_sha256,
            "args": d.args,
            "answer": d.answer,
        },
    }


def budgets_json(rec: Recovery) -> dict[str, Any]:
    """How much of each retry budget the run spent: inspect's `budgets`."""
    doc = rec.budgets.to_json() if rec.budgets is not None else {"crash_loop": None, "tool_failures": []}
    done = rec.completed_steps
    view = rec.steps[done] if len(rec.steps) > done and rec.finished is None else None
    calls = view.model_calls if view is not None and view.output is None else ()
    transient = sum(1 for c in calls if isinstance(c.result, ModelCallResult) and c.result.transient)
    doc["model_attempts"] = {"step": done + 1 if view is not None else None, "used": len(calls) - transient,
                             "limit": rec.max_attempts, "transient": transient}
    return doc


def _crash_loop_waiting(run_id: str, stop: CrashLoopStop) -> dict[str, Any]:
    e = stop.execution
    tool = getattr(e, "tool", None)
    return {"id": run_id, "kind": "crash_loop", "tool": tool, "args": getattr(e, "args", None) if tool else None,
            "reason": crash_loop_reason(stop)}


def override_json(o: Any) -> dict[str, Any]:
    """A `checkpoint_accepted` or `crash_loop_accepted` record as `inspect --json` lists it."""
    doc: dict[str, Any] = {"record": o.TAG, "by": o.by, "at": o.at, "reason": o.reason}
    if isinstance(o, CheckpointAccepted):
        doc["differences"] = o.differences
    else:
        doc["resumes"] = o.resumes
    return doc


def _check_json(c: Any) -> dict[str, Any] | None:
    return None if c is None else {"passed": c.passed, "reason": c.reason, "at": c.at}


def execution_json(e: Execution) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": e.result_id,
        "kind": e.kind,
        "step": e.step,
        "attempt": e.attempt,
        "state": e.state,
    }
    if e.kind != "model_call":
        doc.update(tool=e.tool, args=e.args, replay=e.replay, idempotency_key=e.idempotency_key)
        if e.call is not None:  # log format 1.2: which of the step's several tool calls
            doc["call"] = e.call
        seen = e.observed
        doc["observation"] = seen[0] if seen else None
        doc["is_error"] = seen[1] if seen else False
        if e.resolution is not None:
            doc["resolution"] = e.resolution.outcome
        if e.guards and e.kind == "action":  # log format 1.1: what the tool declared and what its guards said
            doc["guards"] = e.guards
            doc["precondition"] = _check_json(e.precondition)
            ver = e.verification
            doc["verification"] = _check_json(ver)
            if ver is not None and not ver.passed:
                doc["verification"]["rollback"] = ver.rollback
            doc["rollbacks"] = [r.result_id for r in e.rollbacks]
            doc["reconciled"] = None if e.reconciled is None else {
                "outcome": e.reconciled.outcome, "observation": e.reconciled.observation, "by": "reconcile"}
            doc["reconcile_check"] = _check_json(e.reconcile_check)
    else:
        result = e.result
        doc["usage"] = getattr(result, "usage", None)
        doc["error"] = e.error
        output = getattr(result, "output", None)
        doc["output"] = output
    return doc


def token_totals(rec: Recovery) -> dict[str, int]:
    """Tokens spent by every model call, and by attempts that had to be repeated."""
    spent = {"input": 0, "output": 0, "respent_input": 0, "respent_output": 0, "reissued_calls": 0}
    for view in rec.steps:
        for e in view.model_calls:
            usage = getattr(e.result, "usage", None) or {}
            i, o = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
            spent["input"] += i
            spent["output"] += o
            if e.attempt > 1:
                spent["reissued_calls"] += 1
            if e is not view.model_calls[-1] or (e.result is not None and e.error):
                spent["respent_input"] += i
                spent["respent_output"] += o
    return spent


async def inspect_run(store: Store, run_id: str, *, validity: bool = False) -> RunReport:
    """Read and judge a run's log without changing anything.

    The log is read once and classified off the event loop when it is long.

    Args:
        store: where the run lives.
        run_id: the run.
        validity: for a stopped run, also compare its checkpoint with the
            agent now (`RunReport.validity`): this imports the recorded
            target (running its module's top-level code) and re-reads the
            recorded inputs.

    Returns:
        A `RunReport`; a corrupt log is reported (status `corrupt`), not raised.

    Raises:
        InvalidRunIdError: the run id is not a safe file name.
        RunNotFoundError: the run id has no log.
        StoreError: the log cannot be read.
    """
    check_run_id(run_id)
    can, torn_line = capabilities_of(store), None
    holder = await maybe_await(store.holder(run_id)) if can.holding else None  # type: ignore[attr-defined]
    if can.parsing:
        parsed = await store.read_parsed(run_id)  # type: ignore[attr-defined]
        records: tuple[Record, ...] = tuple(parsed.records)
        torn_line = parsed.torn_line
        if parsed.problems:
            return _corrupt(run_id, records, parsed.problems, holder, torn_line)
        walker = await walk_off_loop(records, run_id)
        problems = [parsed.locate(p) for p in walker.problems]
    else:
        try:
            records = tuple(await store.read_log(run_id))
        except CorruptLogError as exc:
            return _corrupt(run_id, (), exc.problems, holder)
        walker = await walk_off_loop(records, run_id)
        problems = list(walker.problems)
    if problems:
        return _corrupt(run_id, records, problems, holder, torn_line)
    return await report_of(store, run_id, records, walker, holder=holder, torn_line=torn_line, validity=validity)


async def report_of(
    store: Store, run_id: str, records: tuple[Record, ...], walker: Walker, *,
    holder: str | None = None, torn_line: int | None = None, validity: bool = False,
) -> RunReport:
    """The `RunReport` of a log already read and walked (`inspect_run` without reading it again)."""
    recovery = None if walker.problems else await _recovery_off_loop(walker)
    if walker.problems or recovery is None:
        problems = list(walker.problems) or [Problem("the log has no records", rule=1)]
        return _corrupt(run_id, records, problems, holder, torn_line)
    planned = plan(walker)
    status, reason = _status(recovery, planned, holder)
    seen = await outlook(store, walker, planned, stopped=status in ("resumable", "needs_operator"), validity=validity)
    next_action = seen.next
    if seen.bad:  # what resume refuses first
        reason = f"the checkpoint is no longer valid: {seen.bad[0].sentence()}"
    if status == "active":
        next_action = f"nothing while it is active; once it is not: {next_action}"
    return RunReport(
        run_id=run_id,
        status=status,
        reason=reason,
        next=next_action,
        recovery=recovery,
        records=records,
        holder=holder,
        torn_line=torn_line,
        validity=seen.validity,
        artifacts=seen.artifacts,
        refusal=seen.refusal,
    )


async def _recovery_off_loop(walker: Walker) -> Recovery | None:
    if len(walker.steps) < 500:
        return walker.recovery()
    return await asyncio.to_thread(walker.recovery)


def _corrupt(
    run_id: str,
    records: tuple[Record, ...],
    problems: Any,
    holder: str | None,
    torn_line: int | None = None,
) -> RunReport:
    problems = tuple(problems)
    return RunReport(
        run_id=run_id,
        status="corrupt",
        reason=f"the log is corrupt: {problems[0]}",
        next="refuse: a corrupt log is never resumed; keep it for analysis and start a new run",
        recovery=None,
        records=records,
        problems=problems,
        holder=holder,
        torn_line=torn_line,
    )


def _status(rec: Recovery, planned: Next, holder: str | None) -> tuple[RunStatus, str]:
    if isinstance(planned, Finished):
        return "finished", planned.reason
    if holder is not None:
        return "active", f"the run is in progress, held by {holder}"
    if isinstance(planned, AlertStop):
        return "needs_operator", _waiting(planned.executions[0])["reason"]
    if isinstance(planned, AwaitDecision):
        r = planned.requests[0]
        what = f"asks a person: {r.args.get('question', '')!r}" if r.kind == "answer" else "waits for approval"
        more = f" (and {len(planned.requests) - 1} more)" if len(planned.requests) > 1 else ""
        return "needs_operator", f"{r.tool} ({r.result_id}, step {r.step}) {what}{more}"
    if isinstance(planned, CrashLoopStop):
        return "needs_operator", crash_loop_reason(planned)
    if isinstance(planned, NeedsOperator) and planned.executions[0].kind == "rollback":
        return "needs_operator", _waiting(planned.executions[0])["reason"]
    if isinstance(planned, NeedsOperator):
        e = planned.executions[0]
        return "needs_operator", (
            f"the outcome of {e.tool} ({e.result_id}) is unknown: the process stopped "
            "after its intent and before its result, and the tool is not safe to replay"
        )
    if rec.stopped is not None and isinstance(planned, CallModel):
        return "resumable", stop_reason(rec.stopped)
    if isinstance(planned, CallModel) and planned.after_failure:
        failed = rec.steps[planned.step - 1].model_calls[-1].error
        return "resumable", (
            f"the model call of step {planned.step} failed ({failed}); resume tries it again"
        )
    return "resumable", "the run stopped before finishing (crash or interruption)"
