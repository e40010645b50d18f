"""From a run's records to its trace: the one mapping, used live and to rebuild a trace from a log.

`Trace` is fed a run's records in log order. Each record opens, closes or
annotates spans in the OpenTelemetry GenAI conventions' shape (names and
attribute keys in `polyloop._trace.names`): one `invoke_agent` span per
process's share of the run (the start, then one per `resumed`), a `chat`
span per model call attempt (intent -> result) and an `execute_tool` span
per action attempt (intent -> outcome). What a record changes comes back as
a list of `Change`s: the live observer (`polyloop.otel`) turns them into
SDK spans and metric points as the run writes, and `rebuild` keeps the spans
of a whole log, with the times the log recorded.

Nothing here imports OpenTelemetry: ids are hex strings, times nanoseconds.
Span ids are derived from the trace id and what the span is (`s3-m1`, the
2nd process), so a live trace and one rebuilt from its log name the same spans.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .._log.ids import call_id
from .._log.records import (
    ActionResult,
    ApprovalRequest,
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
    RunStarted,
    RunStopped,
    StepCompleted,
)
from . import names as N
from .content import output_messages, to_json


@dataclass(slots=True)
class Event:
    """A span event: a name, a time, attributes."""

    name: str
    time: int
    attributes: dict[str, Any]


@dataclass(slots=True)
class Span:
    """One span of a run's trace, as the log tells it.

    `key` is what it is (`p0`, `p1`, ... for processes, the result id for an
    execution); `live` is True when this process opened it (the observer has
    an SDK span for it), False when it comes from the log (a crashed
    process's span, reported by the process that found it).
    """

    key: str
    name: str
    span_id: str
    parent_id: str | None
    start: int
    kind: str = "internal"  # or "client" (a model call)
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    end: int | None = None
    error: str | None = None  # the `error.type`; None: the span is OK
    live: bool = False
    process: int = 0


@dataclass(frozen=True, slots=True)
class Change:
    """What a record did: `open`/`close` a span, add an `event` to one, or a `metric` point."""

    op: str
    span: Span | None = None
    event: Event | None = None
    metric: str = ""
    amount: float = 0
    attributes: dict[str, Any] | None = None


def ns(at: str) -> int:
    """A record's `at` (ISO 8601 UTC) in nanoseconds since the epoch."""
    stamp = _dt.datetime.fromisoformat(at)
    return (int(stamp.timestamp()) * 1_000_000 + stamp.microsecond) * 1000


def derived_id(trace_id: str, key: str) -> str:
    """The span id of `key` in trace `trace_id`: 16 hex digits, never zero."""
    digest = hashlib.sha256(f"{trace_id}/{key}".encode()).hexdigest()[:16]
    return digest if int(digest, 16) else "0000000000000001"


def trace_id_of(run_id: str) -> str:
    """The trace id of a run whose log records none (it was never traced): derived from its id."""
    return hashlib.sha256(f"polyloop-run/{run_id}".encode()).hexdigest()[:32]


_HEX = frozenset("0123456789abcdef")


def parse_traceparent(value: str | None) -> tuple[str, str] | None:
    """(trace id, span id) of a W3C `traceparent` (lowercase hex, ids not all zeros, version not
    `ff`), or None: a log's `trace` that is not one is ignored, as if the run was not traced."""
    parts = value.split("-") if value else []
    if [len(p) for p in parts[:4]] != [2, 32, 16, 2] or parts[0] == "ff":
        return None
    if not all(set(p) <= _HEX for p in parts) or not int(parts[1], 16) or not int(parts[2], 16):
        return None
    return parts[1], parts[2]


def traceparent(trace_id: str, span_id: str) -> str:
    """The W3C `traceparent` of a sampled span."""
    return f"00-{trace_id}-{span_id}-01"


@dataclass(slots=True)
class _Execution:
    span: Span
    kind: str
    step: int
    call: int | None
    state: str = "in_flight"  # then done, unknown, not_executed


class Trace:
    """The spans of one run, built record by record (see the module docstring).

    Args:
        run_id: the run.
        content: record message and argument content (off unless the user opts in).
        live: True for the observer of a running process: the records fed
            before `go_live` are history (they change state, nothing is
            reported), every later one is this process's.
        lease_epoch: this process's lease on the run (PostgreSQL): on its own spans only.
    """

    def __init__(self, run_id: str, *, content: bool = False, live: bool = False,
                 lease_epoch: int | None = None) -> None:
        self.run_id = run_id
        self.content = content
        self.live = live
        self.lease_epoch = lease_epoch
        self.reporting = not live  # a rebuild reports everything; the observer, once live
        self.trace_id: str | None = None
        self.spans: list[Span] = []
        self.processes: list[Span] = []
        self.executions: dict[str, _Execution] = {}
        self.latest: dict[tuple[int, int | None, str], _Execution] = {}  # the last attempt of each call
        self.completed: set[int] = set()
        self.model_of_step: dict[int, str] = {}
        self.waiting: dict[str, str] = {}  # request id -> its `at`
        self.pending: list[Event] = []  # settlements before the next process: its first events
        self.model: dict[str, Any] = {}
        self.agent = "agent"
        self.last_at = 0
        self.opened_live = False
        # What a settlement found (cut spans) or did (a decision) while history was fed: the next
        # live process reports it.
        self.unreported: list[Change] = []

    # -- feeding ---------------------------------------------------------------------

    def go_live(self) -> None:
        """The records fed from now on are this process's own (the observer)."""
        self.reporting = True

    def feed(self, record: Record) -> list[Change]:
        """Apply one record; return what it changed (empty for history, when live)."""
        at = ns(record.at)
        self.last_at = max(self.last_at, at)
        out: list[Change] = []
        if self.live and self.reporting and not self.opened_live and not isinstance(record, (RunStarted, Resumed)):
            if not isinstance(record, (CheckpointAccepted, CrashLoopAccepted, Decision, Resolution)):
                self._open_process(at, None, out)  # a log whose resumes write no `resumed` (before 1.2)
        handler = _HANDLERS.get(type(record))
        if handler is not None:
            handler(self, record, at, out)
        return out if self.reporting else []

    def end_process(self, at: int, error: str | None = None) -> list[Change]:
        """This process lets the run go (the observer, at the end of its hold): end its span."""
        out: list[Change] = []
        current = self.processes[-1] if self.processes else None
        if current is not None and current.live and current.end is None:
            self._close(current, at, error, out)
        return out

    def finish(self) -> list[Span]:
        """Every span of the log, once the last record is fed (a rebuild): what is open ends
        at the last record, an execution still in flight as `unknown`."""
        out: list[Change] = []
        self._cut(self.last_at, out, final=True)
        return self.spans

    # -- processes -------------------------------------------------------------------

    def _open_process(self, at: int, recorded: str | None, out: list[Change]) -> Span:
        n = len(self.processes)
        previous = self.processes[-1] if self.processes else None
        if previous is not None:
            self._cut(at, out, final=False)
        if self.live and self.reporting:  # what happened since the last process: cuts, decisions
            out.extend(self.unreported)
        self.unreported = []
        ids = parse_traceparent(recorded)
        if self.trace_id is None:
            self.trace_id = ids[0] if ids else trace_id_of(self.run_id)
        span_id = ids[1] if ids and ids[0] == self.trace_id else derived_id(self.trace_id, f"p{n}")
        root = self.processes[0].span_id if self.processes else None
        span = Span(f"p{n}", f"{N.INVOKE_AGENT} {self.agent}", span_id, root, at, process=n,
                    live=self.live and self.reporting)
        span.attributes.update({
            N.OPERATION: N.INVOKE_AGENT, N.AGENT_NAME: self.agent, N.CONVERSATION_ID: self.run_id,
            N.RUN_ID: self.run_id, N.PROCESS: n, N.RESUMED: n > 0, **self._provider(),
        })
        span.attributes.update(self._fenced(span.live))
        span.events.extend(self.pending)  # settlements since the last process: before what it finds
        self.pending = []
        if previous is not None:
            span.links.append(previous.span_id)
            span.events.extend(self._found(at))
        self.processes.append(span)
        self.spans.append(span)
        if span.live:
            self.opened_live = True
        out.append(Change("open", span))
        return span

    def _found(self, at: int) -> list[Event]:
        """What a resume found: each result it reuses, each execution whose outcome is unknown."""
        found = []
        for rid, e in self.executions.items():
            if e.state == "done" and e.step not in self.completed:
                found.append(Event(N.EVENT_REUSED, at, {N.RESULT_ID: rid, N.OPERATION: _op(e.kind), N.STEP: e.step}))
            elif e.state == "unknown_found":
                e.state = "unknown"
                attrs = {N.RESULT_ID: rid, N.OPERATION: _op(e.kind), N.STEP: e.step, N.STATE: "unknown",
                         N.VERDICT: _verdict(e)}
                found.append(Event(N.EVENT_UNKNOWN, at, attrs))
        return found

    def _cut(self, at: int, out: list[Change], *, final: bool) -> None:
        """End what the previous process left open: an execution in flight is unknown (cut by a
        crash, ended when the next process found it); so is its process, then."""
        previous = self.processes[-1] if self.processes else None
        cut = False
        for rid, e in self.executions.items():
            if e.state != "in_flight":
                continue
            e.state = "unknown_found"
            cut = True
            e.span.attributes.update({N.STATE: "unknown", N.CUT: True})
            self._close(e.span, at if not final else max(at, e.span.start), N.ERROR_CUT, out)
            if not final:  # counted once: by the process that finds it (or after a settlement found it)
                found = Change("metric", metric=N.M_UNKNOWN, amount=1, attributes={N.OPERATION: _op(e.kind)})
                (out if self.reporting else self.unreported).append(found)
        if previous is not None and previous.end is None:
            if cut:
                previous.attributes[N.CUT] = True
                self._close(previous, at, N.ERROR_CRASHED, out)
            elif final or not previous.live:
                self._close(previous, self.last_before(at), None, out)

    def last_before(self, at: int) -> int:
        return max((s.end or s.start for s in self.spans if s.process == len(self.processes) - 1), default=at)

    def _close(self, span: Span, at: int, error: str | None, out: list[Change]) -> None:
        span.end = max(at, span.start)
        if error is not None:
            span.error = error
            span.attributes[N.ERROR_TYPE] = error
            if not self.reporting and error in (N.ERROR_CUT, N.ERROR_CRASHED):
                self.unreported.append(Change("close", span))
        out.append(Change("close", span))

    def _event(self, event: Event, out: list[Change], between: bool = False) -> None:
        """Add `event` to the current process's span; a settlement written `between` processes (by
        a person's command) waits for the next one when the current one is not this process's."""
        current = self.processes[-1] if self.processes else None
        if current is None or current.end is not None or (between and self.live and not current.live):
            self.pending.append(event)
            return
        current.events.append(event)
        out.append(Change("event", current, event))

    def _fenced(self, live: bool) -> dict[str, Any]:
        return {N.LEASE_EPOCH: self.lease_epoch} if live and self.lease_epoch is not None else {}

    def _provider(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        kind = self.model.get("type")
        if isinstance(kind, str):
            attrs[N.PROVIDER] = N.provider_name(kind)
        model = self.model.get("model")
        if isinstance(model, str):
            attrs[N.REQUEST_MODEL] = model
        return attrs

    # -- record by record ------------------------------------------------------------

    def _started(self, r: RunStarted, at: int, out: list[Change]) -> None:
        model = r.config.get("model") if isinstance(r.config, dict) else None
        self.model = model if isinstance(model, dict) else {}
        self.agent = N.agent_name(r.target)
        self._open_process(at, r.trace, out).attributes[N.GOAL_SHA] = _sha(r.goal)
        out.append(Change("metric", metric=N.M_STARTED, amount=1))

    def _resumed(self, r: Resumed, at: int, out: list[Change]) -> None:
        if self.live and self.opened_live:
            return  # this process's span is open already
        self._open_process(at, r.trace, out)
        out.append(Change("metric", metric=N.M_RESUMES, amount=1))

    def _intent(self, r: Intent, at: int, out: list[Change]) -> None:
        assert self.trace_id is not None
        parent = self.processes[-1]
        previous = self.latest.get((r.step, r.call, r.kind))
        replay = previous is not None and previous.state in ("unknown", "unknown_found")
        attrs: dict[str, Any] = {N.RUN_ID: self.run_id, N.STEP: r.step, N.RESULT_ID: r.result_id,
                                 N.ATTEMPT: r.attempt, N.CONVERSATION_ID: self.run_id}
        if r.kind == "model_call":
            attrs.update({N.OPERATION: N.CHAT, **self._provider()})
            name, kind = f"{N.CHAT} {self.model.get('model') or self.model.get('type') or 'model'}", "client"
        else:
            attrs.update({N.OPERATION: N.EXECUTE_TOOL, N.TOOL_NAME: r.tool or "", N.REPLAY_POLICY: r.replay or "",
                          N.TOOL_TYPE: "function"})
            if r.idempotency_key is not None:
                attrs[N.KEY_SHA] = _sha(r.idempotency_key)
            model_rid = self.model_of_step.get(r.step)
            if model_rid is not None:
                attrs[N.TOOL_CALL_ID] = call_id(model_rid, r.call or 1, 1 if r.call is None else 2)
            if self.content and r.args is not None:
                attrs[N.TOOL_ARGS] = to_json(r.args)
            name, kind = f"{N.EXECUTE_TOOL} {r.tool}", "internal"
        if r.call is not None:
            attrs[N.CALL] = r.call
        attrs.update(self._fenced(parent.live))
        if replay:
            attrs[N.REPLAY] = True
            out.append(Change("metric", metric=N.M_REPLAYS, amount=1, attributes={N.OPERATION: attrs[N.OPERATION]}))
        span = Span(r.result_id, name, derived_id(self.trace_id, r.result_id), parent.span_id, at, kind,
                    attrs, live=parent.live, process=parent.process)
        self.spans.append(span)
        self.executions[r.result_id] = self.latest[(r.step, r.call, r.kind)] = _Execution(span, r.kind, r.step, r.call)
        out.append(Change("open", span))

    def _model_result(self, r: ModelCallResult, at: int, out: list[Change]) -> None:
        e = self.executions.get(r.result_id)
        if e is None or e.state not in ("in_flight",):
            return
        e.state = "done"
        span = e.span
        span.attributes[N.STATE] = "done"
        usage = r.usage or {}
        tokens = {t: usage.get(k) for t, k in (("input", "input_tokens"), ("output", "output_tokens"))}
        for t, value in tokens.items():
            if isinstance(value, int):
                span.attributes[N.INPUT_TOKENS if t == "input" else N.OUTPUT_TOKENS] = value
        error = None
        if r.output is None:
            error = N.ERROR_UNAVAILABLE if r.transient else N.ERROR_MODEL
        else:
            self.model_of_step[e.step] = r.result_id
            answered = r.output.get("model")  # log format 1.4: the model the provider named
            if isinstance(answered, str) and answered:
                span.attributes[N.RESPONSE_MODEL] = answered
            if self.content:
                span.attributes[N.OUTPUT_MESSAGES] = output_messages(r.output)
        self._close(span, at, error, out)
        common = {N.OPERATION: N.CHAT, **self._provider()}
        seconds = (span.end - span.start) / 1e9 if span.end is not None else 0.0
        out.append(Change("metric", metric=N.M_DURATION, amount=seconds,
                          attributes={**common, **({N.ERROR_TYPE: error} if error else {})}))
        for t, value in tokens.items():
            if isinstance(value, int):
                out.append(Change("metric", metric=N.M_TOKENS, amount=value, attributes={**common, N.TOKEN_TYPE: t}))

    def _outcome(self, rid: str | None, observation: str | None, is_error: bool, at: int, out: list[Change]) -> None:
        e = self.executions.get(rid) if rid is not None else None
        if e is None or e.state != "in_flight":
            return
        e.state = "done"
        e.span.attributes[N.STATE] = "done"
        if self.content and observation is not None:
            e.span.attributes[N.TOOL_RESULT] = observation
        self._close(e.span, at, N.ERROR_TOOL if is_error else None, out)

    def _step(self, r: StepCompleted, at: int, out: list[Change]) -> None:
        self._outcome(r.result_id, r.observation, r.is_error, at, out)
        for c in r.calls or ():
            self._outcome(c.get("result_id"), c.get("observation"), bool(c.get("is_error")), at, out)
        self.completed.add(r.step)

    def _action_result(self, r: ActionResult, at: int, out: list[Change]) -> None:
        self._outcome(r.result_id, r.observation, r.is_error, at, out)

    def _guard(self, r: GuardCheck, at: int, out: list[Change]) -> None:
        e = self.executions.get(r.result_id)
        attrs = {N.RESULT_ID: r.result_id, N.GUARD: r.guard, N.GUARD_PASSED: r.passed}
        if e is not None and e.state == "in_flight":
            e.span.events.append(Event(N.EVENT_GUARD, at, attrs))
            if e.span.live:
                out.append(Change("event", e.span, e.span.events[-1]))
            if r.guard == "precondition" and not r.passed:
                e.state = "not_executed"
                e.span.attributes[N.STATE] = "not_executed"
                self._close(e.span, at, N.ERROR_PRECONDITION, out)
            return
        self._event(Event(N.EVENT_GUARD, at, attrs), out)

    def _resolution(self, r: Resolution, at: int, out: list[Change]) -> None:
        e = self.executions.get(r.result_id)
        if e is not None and e.state == "in_flight":  # a person settles only what a crash cut
            self._cut(at, out, final=False)
        if e is not None and e.state == "unknown_found":
            self._event(Event(N.EVENT_UNKNOWN, at, {N.RESULT_ID: r.result_id, N.OPERATION: _op(e.kind),
                                                    N.STEP: e.step, N.STATE: "unknown", N.VERDICT: _verdict(e)}), out, True)
        if e is not None:
            e.state = "done" if r.outcome == "executed" else "not_executed"
        self._event(Event(N.EVENT_RESOLVED, at, {N.RESULT_ID: r.result_id, N.STATE: r.outcome,
                                                 N.RESOLVED_BY: r.source}), out, True)

    def _request(self, r: ApprovalRequest, at: int, out: list[Change]) -> None:
        self.waiting[r.result_id] = r.at
        self._event(Event(N.EVENT_WAITING, at, {N.RESULT_ID: r.result_id, N.TOOL_NAME: r.tool,
                                                N.REQUEST_KIND: r.kind}), out)
        out.append(Change("metric", metric=N.M_WAITING, amount=1))

    def _decision(self, r: Decision, at: int, out: list[Change]) -> None:
        asked = self.waiting.pop(r.id, None)
        self._event(Event(N.EVENT_DECIDED, at, {N.RESULT_ID: r.id, N.DECISION: r.decision}), out, True)
        if asked is not None:
            done = [Change("metric", metric=N.M_WAITING, amount=-1), Change(
                "metric", metric=N.M_WAIT_AGE, amount=(at - ns(asked)) / 1e9, attributes={N.DECISION: r.decision})]
            (out if self.reporting else self.unreported).extend(done)

    def _accepted(self, r: CheckpointAccepted | CrashLoopAccepted, at: int, out: list[Change]) -> None:
        self._event(Event(N.EVENT_ACCEPTED, at, {N.ACCEPTED: r.TAG}), out, True)

    def _finished(self, r: RunFinished, at: int, out: list[Change]) -> None:
        current = self.processes[-1]
        current.attributes[N.FINISH_REASON] = r.reason
        current.attributes[N.STEPS] = r.steps
        self._close(current, at, N.ERROR_RUN if r.reason in ("error", "tool_failures") else None, out)
        out.append(Change("metric", metric=N.M_FINISHED, amount=1, attributes={N.FINISH_REASON: r.reason}))

    def _stopped(self, r: RunStopped, at: int, out: list[Change]) -> None:
        current = self.processes[-1]
        current.attributes[N.STOP_CAUSE] = r.cause
        self._close(current, at, None, out)
        out.append(Change("metric", metric=N.M_STOPPED, amount=1, attributes={N.STOP_CAUSE: r.cause}))


def _op(kind: str) -> str:
    return N.CHAT if kind == "model_call" else N.EXECUTE_TOOL


def _verdict(e: _Execution) -> str:
    """What recovery does with an unknown execution: a model call is asked again; an action
    follows its replay policy (`safe`: replayed; `never`: a person settles it)."""
    if e.kind == "model_call":
        return "reissue"
    policy = e.span.attributes.get(N.REPLAY_POLICY)
    return "replay" if policy == "safe" else "needs_operator"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()


_HANDLERS: dict[type, Any] = {
    RunStarted: Trace._started, Resumed: Trace._resumed, Intent: Trace._intent,
    ModelCallResult: Trace._model_result, StepCompleted: Trace._step, ActionResult: Trace._action_result,
    GuardCheck: Trace._guard, Resolution: Trace._resolution, ApprovalRequest: Trace._request,
    Decision: Trace._decision, CheckpointAccepted: Trace._accepted, CrashLoopAccepted: Trace._accepted,
    RunFinished: Trace._finished, RunStopped: Trace._stopped,
}


def rebuild(records: Iterable[Record], run_id: str, *, content: bool = False) -> Trace:
    """The whole trace of a run from its log alone, with the recorded times."""
    trace = Trace(run_id, content=content)
    for record in records:
        trace.feed(record)
    trace.finish()
    return trace
