"""What `watch` prints: one line per event in a pipe, a live view on a terminal, then how it ended."""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from polyloop import (
    ActionResult,
    ApprovalRequest,
    Decision,
    Intent,
    ModelCallResult,
    Record,
    Resolution,
    RunFinished,
    RunReport,
    RunStarted,
    StepCompleted,
    WatchEvent,
)

from .inspect_view import STATUS_STYLE
from .paste import place
from .terminal import clip, compact, out, safe, say
from .waits_view import decide_block, settle_block

SHOWN = 60  # characters of an observation or answer in one event line


def _time(at: object) -> str:
    text = str(at or "")
    return text[11:19] if len(text) >= 19 else text


def _tokens(usage: Any) -> str:
    if not isinstance(usage, dict):
        return ""
    return f"  ({usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens)"


def _quoted(value: object) -> str:
    return f"'{clip(value, SHOWN)}'"


def _model_answer(r: ModelCallResult) -> tuple[str, str]:
    if r.error:
        return "model call failed", f"{r.result_id}: {clip(r.error, 200)}"
    output = r.output or {}
    calls = output.get("tool_calls") or ([output["tool_call"]] if output.get("tool_call") else [])
    if calls:
        names = ", ".join(clip(str(c.get("name")), 40) for c in calls)
        return "model answered", f"{r.result_id}: calls {names}{_tokens(r.usage)}"
    return "model answered", f"{r.result_id}: {_quoted(output.get('text') or '')}{_tokens(r.usage)}"


def _intent(r: Intent) -> tuple[str, str]:
    if r.kind == "model_call":
        again = f", attempt {r.attempt}" if r.attempt > 1 else ""
        return "model call", f"{r.result_id} in flight{again}"
    what = "rollback" if r.kind == "rollback" else "action"
    again = f", attempt {r.attempt}" if r.attempt > 1 else ""
    return what, f"{r.result_id} {clip(r.tool, 40)}({clip(compact(r.args), 80)}) in flight [{r.replay}]{again}"


def _step(r: StepCompleted) -> tuple[str, str]:
    if r.calls:
        errors = sum(1 for c in r.calls if c.get("is_error"))
        return "completed", f"{len(r.calls)} tool calls" + (f", {errors} failed" if errors else "")
    if r.result_id is None:
        return "completed", "final answer" if r.observation is None else _quoted(r.observation)
    state = "failed" if r.is_error else "done"
    return "completed", f"{r.result_id} {state}: {_quoted(r.observation or '')}"


def describe(record: Record, step: int | None = None) -> tuple[str | None, str, str]:
    """One record as (step, what, detail): what a line of `watch` says about it."""
    step = step if step is not None else getattr(record, "step", None)
    shown = None if step is None else f"step {step}"
    if isinstance(record, RunStarted):
        target = f" ({clip(record.target, 200)})" if record.target else ""
        return None, "started", f"goal '{clip(record.goal, 120)}'{target}"
    if isinstance(record, Intent):
        return (shown, *_intent(record))
    if isinstance(record, ModelCallResult):
        return (shown, *_model_answer(record))
    if isinstance(record, StepCompleted):
        return (shown, *_step(record))
    if isinstance(record, ActionResult):
        state = "failed" if record.is_error else "done"
        return shown, f"result {state}", f"{record.result_id}: {_quoted(record.observation)}"
    if isinstance(record, ApprovalRequest):
        what = "asks a person" if record.kind == "answer" else "waits for approval"
        return shown, what, f"{record.result_id} {clip(record.tool, 40)}({clip(compact(record.args), 80)})"
    if isinstance(record, Decision):
        return None, "decided", f"{record.id}: {record.decision} by {clip(record.by, 60)}"
    if isinstance(record, Resolution):
        return shown, "resolved", f"{record.result_id}: {record.outcome} by {clip(record.by, 60)}"
    if isinstance(record, RunFinished):
        return None, "finished", f"{record.reason} after {record.steps} steps"
    return None, record.TAG.replace("_", " "), ""


def event_line(event: WatchEvent) -> Text | None:
    """The line of one event (None for an event a line does not show)."""
    text = Text()
    if event.kind == "waiting":
        text.append("waiting for the run to start …", style="dim")
    elif event.kind == "held":
        text.append("held", style="cyan")
        text.append(f" by {event.holder}")
    elif event.kind == "released":
        text.append("released", style="dim")
        text.append(f" by {event.holder}")
    elif event.kind == "record" and event.record is not None:
        step, what, detail = describe(event.record, event.step)
        text.append(f"{_time(getattr(event.record, 'at', ''))}  ", style="dim")
        if step:
            text.append(f"{step}  ", style="bold")
        style = "bold red" if "failed" in what else "yellow" if "waits" in what or "asks" in what else "green"
        text.append(what, style=style if what in ("finished", "completed") or style != "green" else "")
        if detail:
            text.append("  ")
            text.append_text(safe(detail))
    else:
        return None
    return text


def plain(event: WatchEvent) -> None:
    """One line per event on stdout, flushed (a pipe, a file, a CI log)."""
    line = event_line(event)
    if line is not None:
        say(out(), line)


class LiveView:
    """A terminal view redrawn on every event: the last events, and what is in flight or waits."""

    ROWS = 15

    def __init__(self, run_id: str, where: str) -> None:
        self._run_id = run_id
        self._where = place(where)
        self._lines: deque[Text] = deque(maxlen=self.ROWS)
        self._earlier = 0
        self._holder: str | None = None
        self._in_flight: tuple[Intent, ...] = ()
        self._live = Live(console=out(), auto_refresh=False, transient=False)

    def __enter__(self) -> LiveView:
        self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._live.__exit__(None, None, None)

    def show(self, event: WatchEvent) -> None:
        if event.kind in ("held", "released"):
            self._holder = event.holder if event.kind == "held" else None
        if event.kind == "record":
            self._in_flight = event.in_flight
        elif event.kind == "released":
            self._in_flight = ()  # nothing is under way any more: the ending says what is unknown
        line = event_line(event)
        if line is not None:
            if len(self._lines) == self.ROWS:
                self._earlier += 1
            self._lines.append(line)
        self._live.update(self._render(), refresh=True)

    def _render(self) -> Group:
        head = Text()
        head.append("watching ", style="bold")
        head.append(safe(self._run_id, "bold cyan"))
        head.append(f"  in {self._where}  ", style="dim")
        head.append(f"held by {self._holder}" if self._holder else "not held", style="cyan" if self._holder else "dim")
        rows: list[Text] = [head]
        if self._earlier:
            rows.append(Text(f"… {self._earlier} earlier events", style="dim"))
        rows.extend(self._lines)
        for intent in self._in_flight:
            step, what, detail = describe(intent)
            now = Text("now       ", style="bold yellow")
            now.append_text(safe(f"{step}  {what}  {detail}"))
            rows.append(now)
        return Group(*rows)


def backlog_note(console: Console, skipped: int, run_id: str) -> None:
    """How many earlier records a watch left out of its first lines."""
    say(console, (f"… {skipped} earlier records (polyloop inspect {run_id} --all lists every step)", "dim"))


def ending(report: RunReport, where: str) -> None:
    """How the run ended, why, and the commands for whatever waits for a person."""
    console = out()
    style = STATUS_STYLE.get(report.status, "bold")
    say(console, ("run ", "bold"), (report.run_id, "bold cyan"), " ", (report.status, style), f": {clip(report.reason, 2000)}")
    if report.status == "finished":
        return
    say(console, ("next ", "bold"), clip(report.next, 2000))
    rec = report.recovery
    if rec is not None and rec.blocking:
        settle_block(console, report.run_id, rec.blocking, where)
    if rec is not None and rec.waiting_requests():
        decide_block(console, report.run_id, rec.waiting_requests(), where)
