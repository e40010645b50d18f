"""What `polyloop inspect` prints: the run, its steps, who settled what, and what comes next."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from polyloop import Execution, ModelCallResult, Recovery, RunReport, StepView

from .terminal import SHOWN_PROBLEMS, clip, compact, more_problems, out, safe, safe_text, say
from .waits_view import decide_block, settle_block


_STATE_STYLE = {
    "done": "green", "unknown": "bold red", "superseded": "dim", "resolved": "yellow",
    "pending": "cyan", "alert": "bold red", "rolled_back": "yellow",
}


STATUS_STYLE = {
    "finished": "bold green",
    "needs_operator": "bold red",
    "resumable": "bold yellow",
    "corrupt": "bold red",
    "active": "bold cyan",
}


def why(report: RunReport) -> str:
    """One sentence: why the run finished or stopped."""
    rec = report.recovery
    if report.status == "finished" and rec is not None and rec.finished is not None:
        f = rec.finished
        steps = f"{f.steps} step" + ("" if f.steps == 1 else "s")
        if f.reason == "final_answer":
            return f"It finished with a final answer after {steps}."
        if f.reason == "max_steps":
            return f"It finished because the step budget was spent ({steps}, no final answer)."
        if f.reason == "cancelled":
            return f"It was cancelled after {steps} by {f.by}: {f.why}."
        if f.reason == "tool_failures":
            return f"It ended after {steps} because a tool spent its failure budget: {f.error}."
        return f"It finished with an error after {steps}: {f.error}."
    reason = report.reason
    if report.status == "corrupt":
        return f"It cannot be resumed: {reason}."
    if report.status == "active":
        return f"It is running: {reason}."
    if reason.startswith("stopped "):  # "stopped on an outage: ..." (log format 1.3)
        return f"It {reason}."
    return f"It stopped: {reason}."


def _tokens(usage: Any) -> str:
    if not isinstance(usage, dict):
        return ""
    return safe_text(f"{usage.get('input_tokens', 0)}+{usage.get('output_tokens', 0)}", one_line=True)


def _decision(e: Execution) -> Text:
    """What a model call decided (or why it failed)."""
    if e.error:
        return Text(f"failed: {clip(e.error, 120)}", style="red")
    output = getattr(e.result, "output", None)
    if not isinstance(output, dict):
        return Text("no answer recorded", style="dim")
    call = output.get("tool_call")
    if call is None:
        return Text.assemble(("final answer: ", "bold"), clip(output.get("text") or "", 120))
    calls = output.get("tool_calls") or [call]
    text = Text("→ ")
    for k, c in enumerate(calls[:8]):  # an answer with dozens of calls stays one readable cell
        if k:
            text.append(", ")
        text.append(clip(c.get("name"), 40), style="bold")
        text.append(f"({clip(compact(c.get('args')), 80 if len(calls) == 1 else 40)})")
    if len(calls) > 8:
        text.append(f", ... ({len(calls)} calls)")
    return text


def _guards_line(g: dict[str, Any]) -> str:
    """A tool's recorded guards in a few words: `precondition, verify, rollback compensate`."""
    parts = [name for name in ("precondition", "verify") if g.get(name)]
    if g.get("rollback"):
        parts.append(f"rollback {g['rollback']}")
    elif g.get("verify"):
        parts.append("no rollback (a failed verification stops the run)")
    parts += [name for name in ("reconcile", "irreversible") if g.get(name)]
    return ", ".join(parts) or "none"


def _mcp_line(t: dict[str, Any]) -> str:
    """An MCP tool's effective policy and where it came from (`config.tools[].mcp`, log format 1.4)."""
    m = t["mcp"]
    approval = f", approval {t['approval']}" if t.get("approval") else ""
    trust = "trusted" if m.get("trusted") else "untrusted"
    return f"replay {t.get('replay')}{approval} from {m.get('policy')} ({m.get('why')}); server {m.get('server')} ({trust})"


def _guard_notes(e: Execution) -> Text:
    """What a guarded action's guards said (log format 1.1), for the steps table."""
    notes = Text()
    for label, check in (("precondition", e.precondition), ("verify", e.verification)):
        if check is not None:
            mark = "ok" if check.passed else f"FAILED: {clip(check.reason or 'False', 80)}"
            notes.append(f" [{label} {mark}]", style="" if check.passed else "bold red")
    if e.verification is not None and not e.verification.passed:
        notes.append(f" [rollback: {e.verification.rollback or 'none'}]", style="yellow")
    if e.reconcile_check is not None:
        notes.append(f" [reconcile could not tell: {clip(e.reconcile_check.reason, 80)}]", style="bold red")
    return notes


def _outcome(e: Execution) -> Text:
    """What an action produced, or who settled it."""
    text = _settled(e)
    if e.guards:
        text.append_text(_guard_notes(e))
    return text


def _settled(e: Execution) -> Text:
    if e.reconciled is not None and e.resolution is None:
        r = e.reconciled
        text = Text.assemble(("reconcile: ", "yellow"), clip(r.outcome, 20))
        if r.observation is not None:
            text.append(f"; {clip(r.observation, 120)}")
        return text
    if e.resolution is not None:
        r = e.resolution
        text = Text.assemble(("operator: ", "yellow"), clip(r.outcome, 20))
        if r.observation is not None:
            text.append(f"; {clip(r.observation, 120)}")
        return text
    seen = e.observed
    if seen is not None:
        return Text(f"= {clip(seen[0], 120)}", style="red" if seen[1] else "")
    if e.state == "unknown":
        return Text("no result: did it happen?", style="bold red")
    return Text("—", style="dim")


LAST_STEPS = 20  # what `inspect` shows by default; --all or --steps for the rest


def _steps_table(views: Sequence[Any]) -> Table:
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold", padding=(0, 1))
    for name in ("step", "id", "state", "replay", "tokens"):
        table.add_column(name, no_wrap=True)
    table.add_column("decision / observation", overflow="fold")
    for view in views:
        first = True
        rollbacks = [r for a in view.actions for r in a.rollbacks]
        for e in sorted((*view.model_calls, *view.actions, *rollbacks), key=lambda x: x.index):
            action = e.kind != "model_call"
            table.add_row(
                str(view.step) if first else "",
                safe(e.result_id),
                safe(e.state, _STATE_STYLE.get(e.state, "")),
                safe(e.replay or "") if action else Text(""),
                Text("") if action else Text(_tokens(getattr(e.result, "usage", None)), style="dim"),
                _outcome(e) if action else _decision(e),
            )
            first = False
        done = view.completed
        if done is not None and done.result_id is None and done.observation is not None:
            # A step without an action that still told the model something (an unknown tool).
            table.add_row("", "", "", "", "", Text(f"= {clip(done.observation, 120)}", style="red"))
        for c in (done.calls or ()) if done is not None else ():
            if c["result_id"] is None:  # a call of several refused before any intent
                note = Text(f"{clip(c['tool'], 60)} = {clip(c['observation'], 120)}", style="red")
                table.add_row("", "", "", "", "", note)
    return table


def inspect_report(
    report: RunReport, directory: str | None, *, steps: tuple[int, int] | None = None
) -> None:
    """The human rendering of `polyloop inspect`.

    `steps` is the range of steps to list (first, last; inclusive); None lists
    the last `LAST_STEPS` (everything that waits is always shown below them).
    """
    console = out()
    rec = report.recovery
    _head(console, report)
    if rec is not None and rec.steps:
        _steps(console, rec, steps)
    if rec is not None and rec.resolutions:
        _resolutions(console, rec)
    if rec is not None and rec.requests:
        _people(console, rec)
    if rec is not None:
        _checkpoint_lines(console, report)
    if report.artifacts:
        _artifacts(console, report)
    if report.problems:
        console.print()
        say(console, ("problems", "bold red"))
        for p in report.problems[:SHOWN_PROBLEMS]:
            say(console, "  ", clip(str(p), 400))
        more_problems(console, len(report.problems))
    _next(console, report, directory)


def _field(console: Console, name: str, *value: str | tuple[str, str] | Text) -> None:
    say(console, (f"{name:<10}", "bold"), *value)


def _head(console: Console, report: RunReport) -> None:
    """The run, its status and why, and what its first record says."""
    rec = report.recovery
    _field(console, "run", (report.run_id, "bold cyan"))
    _field(console, "status", (report.status, STATUS_STYLE.get(report.status, "")), f" — {clip(why(report), 10_000)}")
    if report.holder:
        _field(console, "held by", report.holder)
    if rec is not None:
        _field(console, "target", clip(rec.started.target or "(none recorded: started from Python)", 400))
        _field(console, "goal", clip(rec.started.goal, 400))
        finished = rec.finished.at if rec.finished else "—"
        _field(console, "started", clip(rec.started.at, 40), ("   finished ", "bold"), clip(finished, 40))
        budget = f" of at most {rec.max_steps}" if rec.max_steps else ""
        _field(console, "steps", f"{rec.completed_steps} completed{budget}")
        t = report.tokens or {}
        _field(
            console,
            "tokens",
            f"{t['input']} in, {t['output']} out; re-spent {t['respent_input']} in, "
            f"{t['respent_output']} out ({t['reissued_calls']} re-issued calls)",
        )
        if rec.finished is not None and rec.finished.result is not None:
            _field(console, "answer", clip(rec.finished.result, 400))
        guarded = [t for t in rec.started.config.get("tools") or [] if isinstance(t.get("guards"), dict)]
        for t in guarded:
            _field(console, "guards", (clip(t["name"], 60), "bold"), f" {clip(_guards_line(t['guards']), 300)}")
        for t in rec.started.config.get("tools") or []:
            if isinstance(t.get("mcp"), dict):  # log format 1.4: a tool from an MCP server
                _field(console, "mcp tool", (clip(t["name"], 60), "bold"), f" {clip(_mcp_line(t), 300)}")
    if report.torn_line is not None:
        _field(
            console,
            "torn tail",
            f"from line {report.torn_line}: a write cut off by a crash; readers ignore it "
            "(resume cuts it off before appending)",
        )


def _steps(console: Console, rec: Any, steps: tuple[int, int] | None) -> None:
    """The steps table: the range asked for, else the last `LAST_STEPS`."""
    total = len(rec.steps)
    first, last = steps if steps is not None else (max(1, total - LAST_STEPS + 1), total)
    shown = rec.steps[max(0, first - 1) : max(0, last)]
    console.print()
    if first > 1 and shown:
        say(console, (f"… steps 1 to {first - 1} not shown (--all, or --steps FROM-TO)", "dim"))
    if shown:
        console.print(_steps_table(shown))
    else:
        say(console, (f"no steps in {first}-{last}: the run has {total}", "dim"))
    if last < total and shown:
        say(console, (f"… steps {last + 1} to {total} not shown (--all, or --steps FROM-TO)", "dim"))


def _resolutions(console: Console, rec: Any) -> None:
    """Who settled which unknown action, how and why."""
    console.print()
    say(console, ("resolutions", "bold"))
    for r in rec.resolutions:
        who = "the tool's reconcile" if r.source == "reconcile" else clip(r.by, 60)
        parts: list[str | tuple[str, str]] = [
            "  ",
            (clip(r.result_id, 40), "bold"),
            " ",
            (clip(r.outcome, 20), "yellow"),
            f" by {who} at {clip(r.at, 40)}",
        ]
        if r.reason:
            parts.append(f"; reason: {clip(r.reason, 200)}")
        if r.observation is not None:
            parts.append(f"; observation: {clip(r.observation, 200)}")
        say(console, *parts)


def _people(console: Console, rec: Any) -> None:
    """The requests that waited for a person, and how each was decided."""
    console.print()
    say(console, ("people", "bold"))
    for r in rec.requests:
        d = r.decision
        parts: list[str | tuple[str, str]] = ["  ", (clip(r.result_id, 40), "bold"), f" {clip(r.tool, 60)} "]
        if d is None:
            parts.append(("waits for " + ("an answer" if r.kind == "answer" else "approval"), "yellow"))
        else:
            parts += [(d.decision, "yellow"), f" by {clip(d.by, 60)} at {clip(d.at, 40)}"]
            if d.reason:
                parts.append(f"; reason: {clip(d.reason, 200)}")
            if d.args is not None:
                parts.append(f"; edited args: {clip(compact(d.args), 200)}")
            if d.answer is not None:
                parts.append(f"; answer: {clip(d.answer, 200)}")
        say(console, *parts)


def _artifacts(console: Console, report: RunReport) -> None:
    """The run's products and the judgement on each (a few; --json lists all)."""
    console.print()
    say(console, ("products", "bold"))
    for a in report.artifacts[:SHOWN_PROBLEMS]:
        r = a.ref
        style = {"ok": "green", "unsettled": "yellow"}.get(a.state, "bold red")
        say(
            console, "  ", (f"{a.state:<9}", style), " ", (clip(r.name, 200), "bold"),
            f"  {clip(r.path, 400)}  {r.size} bytes  sha256 {clip(r.sha256, 64)[:16]}…  by {clip(r.result_id, 40)}",
        )
    if len(report.artifacts) > SHOWN_PROBLEMS:
        hidden = len(report.artifacts) - SHOWN_PROBLEMS
        say(console, (f"          … and {hidden} more products (--json lists them all)", "dim"))


def _next(console: Console, report: RunReport, directory: str | None) -> None:
    """What resume would do next, and the commands for whatever waits for a person."""
    rec = report.recovery
    console.print()
    say(console, ("next      ", "bold"), clip(report.next, 10_000))
    if rec is not None and rec.blocking and report.status != "finished":
        say(console, ("settle    ", "bold"), "decide whether it happened, then run one of:")
        settle_block(console, report.run_id, rec.blocking, directory)
    if rec is not None and report.status != "finished" and rec.waiting_requests():
        say(console, ("decide    ", "bold"), "nothing of it has run; run one of:")
        decide_block(console, report.run_id, rec.waiting_requests(), directory)


def _difference(d: dict[str, Any]) -> str:
    """One checkpoint difference: `{what} {name}: {recorded} -> {now}` (hashes shortened)."""

    def short(v: Any) -> str:
        return "none" if v is None else (str(v)[:12] + "…" if len(str(v)) > 40 else repr(v))

    name = f" {d.get('name')!r}" if d.get("name") else ""
    where = f" ({d['path']})" if d.get("path") else ""
    return f"{d.get('what')}{name}{where}: {short(d.get('recorded'))} recorded, {short(d.get('now'))} now"


def _checkpoint_lines(console: Console, report: RunReport) -> None:
    """Validity, overrides and retry budgets (log format 1.2) of `inspect`."""
    rec = report.recovery
    assert rec is not None
    v = report.validity
    if v is not None:
        console.print()
        if v["valid"] is None:
            say(console, ("validity  ", "bold"), ("not checked", "yellow"), f": {clip(v['not_checked'], 400)}")
        elif v["valid"]:
            say(console, ("validity  ", "bold"), ("valid", "green"), ": inputs, logic version and configuration unchanged")
        else:
            say(console, ("validity  ", "bold"), ("not valid", "bold red"), ": resume refuses (exit 4):")
            for d in v["differences"]:
                say(console, "  ", clip(_difference(d), 400))
    if rec.overrides:
        console.print()
        say(console, ("overrides", "bold"))
        for o in rec.overrides:
            if o.TAG == "checkpoint_accepted":
                what = "accepted " + "; ".join(_difference(d) for d in o.differences)
            else:
                what = f"lifted a crash loop of {o.resumes} resumes without progress"
            say(console, "  ", (clip(o.by, 60), "bold"), f" at {clip(o.at, 40)} {clip(what, 600)}",
                  f"; reason: {clip(o.reason, 200)}")
    b = rec.budgets
    if b is not None and (b.max_resumes is not None or b.limits or b.resumes):
        limit = f" of {b.max_resumes}" if b.max_resumes is not None else " (no budget)"
        spent = [f"{b.idle_resumes}{limit} resumes without progress ({b.resumes} resumes in all)"]
        failing = [t for t in sorted(b.streaks) if b.streaks[t]]
        for tool in failing:
            lim = b.limits.get(tool)
            spent.append(f"{clip(tool, 60)} failed {b.streaks[tool]}" + (f" of {lim}" if lim else "") + " in a row")
        if not failing:
            spent.append("no tool failing")
        open_step = rec.steps[rec.completed_steps] if len(rec.steps) > rec.completed_steps else None
        if rec.finished is None and open_step is not None and open_step.output is None and open_step.model_calls:
            spent.append(_model_attempts(rec, open_step))
        field_line = "; ".join(spent)
        say(console, ("budgets   ", "bold"), field_line)


def _model_attempts(rec: Recovery, step: StepView) -> str:
    """The open step's model call attempts against its budget; transient ones (an outage) apart."""
    transient = sum(1 for c in step.model_calls if isinstance(c.result, ModelCallResult) and c.result.transient)
    used = len(step.model_calls) - transient
    outage = f" (and {transient} failed transiently: an outage never ends a run)" if transient else ""
    return f"{used} of {rec.max_attempts} model call attempts of step {step.step}{outage}"
