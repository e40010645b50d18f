"""All terminal output of the command line, and the one gate untrusted text passes.

A log holds whatever a model or a tool produced. Everything read from a log,
an exception message or a path passes through `safe_text` before it reaches
a terminal, and is printed as a rich `Text` (never parsed as markup), so
`[red]`, `[/x]`, ESC sequences and bidi overrides are shown, inert, as
written. `--json` output is written with the standard `json` module with
ASCII escapes and never goes through rich.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
import traceback
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from polyloop import (
    AlertError,
    ApprovalRequiredError,
    CrashLoopError,
    Execution,
    NeedsOperatorError,
    Recovery,
    RunReport,
    RunResult,
    RunSummary,
    VerifyReport,
    default_directory,
)
from polyloop.stores import redact_url, store_kind

if TYPE_CHECKING:
    from .errors import Scope

# Control (Cc), format (Cf: bidi overrides, zero-width joiners), surrogates
# (Cs: unprintable) and line/paragraph separators (Zl, Zp).
_UNSAFE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
CLIP = 160
SHOWN_PROBLEMS = 5  # per log in a human rendering; --json lists every one


def safe_text(value: object, *, one_line: bool = False) -> str:
    """`value` as text that cannot drive a terminal.

    Characters of Unicode categories Cc, Cf, Cs, Zl and Zp become visible
    escapes (`\\x1b`, `\\u202e`, `\\r`); newline and tab are kept, unless
    `one_line` asks for them as `\\n` and `\\t` too.
    """
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text  # fast path: isprintable() is False for every unsafe category
    parts = []
    for ch in text:
        if ch in "\n\t" and not one_line:
            parts.append(ch)
        elif ch in _NAMED:
            parts.append(_NAMED[ch])
        elif unicodedata.category(ch) in _UNSAFE:
            code = ord(ch)
            if code <= 0xFF:
                parts.append(f"\\x{code:02x}")
            elif code <= 0xFFFF:
                parts.append(f"\\u{code:04x}")
            else:
                parts.append(f"\\U{code:08x}")
        else:
            parts.append(ch)
    return "".join(parts)


def clip(value: object, limit: int = CLIP) -> str:
    """Untrusted text, made safe and cut to `limit` characters on one line."""
    text = safe_text(value, one_line=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _t(value: object, style: str = "") -> Text:
    return Text(safe_text(value), style=style)


class OutputClosed(Exception):
    """Whoever read our output stopped reading (`polyloop ls | head -3`): end quietly."""


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich raises SystemExit(1) here, which would read as a sys.exit() of the agent's code.
        silence_stdout()
        raise OutputClosed


def console(stream: TextIO, **options: Any) -> Console:
    """A rich console for our output: no markup, no emoji, a closed pipe ends us quietly."""
    return _Console(file=stream, markup=False, emoji=False, highlight=False, **options)


def _console(stream: TextIO) -> Console:
    width = None
    if not stream.isatty() and "COLUMNS" not in os.environ:
        width = 100
    return console(stream, width=width, soft_wrap=False)


def out() -> Console:
    return _console(sys.stdout)


def err() -> Console:
    return _console(sys.stderr)


def _line(console: Console, *parts: str | tuple[str, str] | Text) -> None:
    text = Text()
    for part in parts:
        if isinstance(part, Text):
            text.append_text(part)
        elif isinstance(part, tuple):
            text.append(safe_text(part[0]), style=part[1])
        else:
            text.append(safe_text(part))
    console.print(text, soft_wrap=True)
    console.file.flush()


def _more(console: Console, total: int) -> None:
    if total > SHOWN_PROBLEMS:
        _line(console, (f"          … and {total - SHOWN_PROBLEMS} more problems (--json lists them all)", "dim"))


def print_json(doc: Any, *, lines: bool = False) -> None:
    """Write one JSON document to stdout (never through rich), all ASCII.

    Non-ASCII characters are written as `\\uXXXX` escapes, so bidi overrides
    and C1 controls from a log cannot reach a terminal raw. orjson keeps a
    100,000-step `inspect --json` fast. `lines`: on one line, for a command
    whose stdout is a stream of JSON lines (`polyloop worker --json`).
    """
    text = orjson.dumps(doc, option=0 if lines else orjson.OPT_INDENT_2, default=str).decode()
    if not text.isascii():
        text = _NON_ASCII.sub(_json_escape, text)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


# -- commands an operator can paste ------------------------------------------


def dir_flag(directory: str | None) -> str:
    """` --dir DIR` (or ` --store URL`) when that is not where commands look by default."""
    if directory is None:
        return ""
    default = os.environ.get("POLYLOOP_STORE") or default_directory()
    if store_kind(directory) == "postgresql":
        if directory == default:
            return ""
        # Never a secret in a command to paste (a terminal, a CI log): the
        # reader supplies it the way libpq does (PGPASSWORD, ~/.pgpass); store_note says so.
        shown = place(directory)
        if shown != directory:
            _secrets_left_out.append(shown)
        return f" --store {shlex.quote(shown)}"
    if Path(directory) == Path(default):
        return ""
    return f" --dir {shlex.quote(directory)}"


def place(where: str) -> str:
    """Where runs live, for a message: a directory as given, a database URL without its secrets."""
    return redact_url(where)


_secrets_left_out: list[str] = []  # store URLs a command printed without their secrets


def store_note() -> None:
    """Once a command is done: if it printed a store URL without its secrets, say where they come from."""
    if _secrets_left_out:
        _secrets_left_out.clear()
        _line(
            err(),
            ("polyloop: note: ", "dim"),
            "the commands printed leave the store URL's password out (it is never printed): give it "
            "with PGPASSWORD or ~/.pgpass, or put the URL in $POLYLOOP_STORE and leave --store out",
        )


def resume_command(run_id: str, directory: str | None) -> str:
    return f"polyloop resume {shlex.quote(run_id)}{dir_flag(directory)}"


def settle_commands(run_id: str, e: Execution, directory: str | None) -> list[str]:
    """The exact `mark-resolved` commands that settle an unknown execution."""
    base = f"polyloop mark-resolved {shlex.quote(run_id)} {shlex.quote(e.result_id)}"
    where = dir_flag(directory)
    return [
        f"{base} --executed{where}",
        f"{base} --not-executed{where}",
    ]


def _settle_block(console: Console, run_id: str, blocking: Sequence[Execution], directory: str | None) -> None:
    for e in blocking:
        _line(
            console,
            "  ",
            (clip(e.tool, 60), "bold"),
            f"({clip(_compact(e.args), 60)})  step {e.step}, result id {e.result_id}, "
            f"idempotency key {e.idempotency_key}",
        )
        executed, not_executed = settle_commands(run_id, e, directory)
        width = len(not_executed)
        if e.state == "alert":
            said = ("  # the effect stands (add --observation TEXT)", "  # it has no effect: the model is told so")
        else:
            said = ("  # it happened (add --observation TEXT: what it returned)",
                    "  # it did not happen: resume runs it again")
        _line(console, "    ", (executed.ljust(width), "cyan"), (said[0], "dim"))
        _line(console, "    ", (not_executed, "cyan"), (said[1], "dim"))
    _line(console, "  then: ", (resume_command(run_id, directory), "cyan"))


def decide_commands(run_id: str, kind: str, request_id: str, directory: str | None) -> list[tuple[str, str]]:
    """The exact commands that decide a waiting request (`approval` or `answer`), each with what it means."""
    rid, where = f"{shlex.quote(run_id)} {shlex.quote(request_id)}", dir_flag(directory)
    if kind == "answer":
        return [(f"polyloop answer {rid} TEXT{where}", "the model reads TEXT as the answer")]
    return [
        (f"polyloop approve {rid} --reason TEXT{where}", "run it (add --args JSON to run edited arguments)"),
        (f"polyloop deny {rid} --reason TEXT{where}", "never run it: the model reads the denial"),
    ]


def _decide_block(console: Console, run_id: str, requests: Sequence[Any], directory: str | None) -> None:
    for r in requests:
        if r.kind == "answer":
            what = f"asks: {clip(r.args.get('question', ''), 300)}"
        else:
            why = f" ({clip(r.request.reason, 120)})" if r.request.reason else ""
            what = f"({clip(_compact(r.args), 200)}) waits for approval{why}"
        _line(console, "  ", (clip(r.tool, 60), "bold"), f" {what}")
        _line(console, "    ", (f"step {r.step}, id {clip(r.result_id, 40)}, args sha256 {r.request.args_sha256}", "dim"))
        commands = decide_commands(run_id, r.kind, r.result_id, directory)
        width = max(len(c) for c, _ in commands)
        for command, meaning in commands:
            _line(console, "    ", (command.ljust(width), "cyan"), (f"  # {meaning}", "dim"))
    _line(console, "  then: ", (resume_command(run_id, directory), "cyan"))


def waits_stop(run_id: str, requests: Sequence[Any], directory: str | None) -> None:
    """The run stopped because tool calls wait for a person: say so, and how to decide each."""
    console = err()
    _line(
        console,
        ("polyloop: stopped: ", "bold yellow"),
        f"run {run_id} waits for a person. Nothing of the call below has run; it is recorded, "
        "and resume goes on once it is decided:",
    )
    _decide_block(console, run_id, requests, directory)


def decided(run_id: str, request_id: str, recovery: Recovery, report: RunReport, directory: str | None) -> None:
    """approve, deny or answer recorded a decision: say which, and (as inspect says it) what comes next."""
    console = out()
    r = recovery.request_of(request_id)
    d = r.decision if r is not None else None
    assert d is not None
    edited = " with edited arguments" if d.args is not None else ""
    _line(console, (f"{d.decision} ", "bold green"), f"{request_id} of run {run_id}{edited} (by {clip(d.by, 60)})")
    _line(console, ("next     ", "bold"), clip(report.next, 10_000))
    waiting = recovery.waiting_requests()
    if waiting:
        _decide_block(console, run_id, waiting, directory)
        return
    _resume_line(console, run_id, report, directory)


def _resume_line(console: Console, run_id: str, report: RunReport, directory: str | None) -> None:
    """After a settlement: the resume to run, unless resume would refuse (the next line says how to accept)."""
    if report.refusal is None:
        _line(console, ("run      ", "bold"), (resume_command(run_id, directory), "cyan"))


# -- failures ----------------------------------------------------------------


def _error_doc(kind: str, code: int, message: str) -> dict[str, Any]:
    """The --json form of a failure (the message is exact: JSON escaping makes it safe)."""
    return {"error": {"type": kind, "message": message, "exit_code": code}}


def failure(
    exc: BaseException, code: int, scope: Scope, *, kind: str, show_traceback: bool
) -> None:
    """Report a failed command: one line on stderr, and a JSON error too in --json mode.

    `kind` is `interrupted`, `unexpected` (a bug: exit 1 with a hint) or `expected`.
    """
    console = err()
    if show_traceback:
        console.print(Text(safe_text("".join(traceback.format_exception(exc)))), soft_wrap=True)
    if kind == "interrupted":
        message = "interrupted"
        if scope.run_id and scope.resumable:
            message += (
                f"; run {scope.run_id} stays resumable: "
                f"{resume_command(scope.run_id, scope.directory)}"
            )
    elif kind == "unexpected":
        message = f"internal error: {type(exc).__name__}: {exc}"
        if not show_traceback:
            message += " (run `polyloop --debug ...` for the traceback)"
    else:
        message = str(exc)
    if scope.json:
        print_json(_error_doc(type(exc).__name__, code, message), lines=scope.json_lines)
    if isinstance(exc, ApprovalRequiredError):
        waits_stop(exc.run_id, exc.requests, scope.directory)
        return
    if isinstance(exc, CrashLoopError):
        _line(console, ("polyloop: stopped: ", "bold yellow"), clip(message, 10_000))
        return
    if isinstance(exc, AlertError):
        alert_stop(exc.run_id, exc.executions, scope.directory)
        return
    if isinstance(exc, NeedsOperatorError):
        needs_operator(exc.run_id, exc.executions, scope.directory)
        return
    _line(console, ("polyloop: error: ", "bold red"), clip(message, 10_000))


def needs_operator(run_id: str, blocking: Sequence[Execution], directory: str | None) -> None:
    """The run stopped at unknown `never` actions: say so, and how to settle each."""
    console = err()
    _line(
        console,
        ("polyloop: stopped: ", "bold yellow"),
        f"run {run_id} needs an operator. The outcome of the action below is unknown "
        "(the process stopped after its intent and before its result), and its tool "
        "is `never` replay, so resume will not guess. Check whether it happened, then:",
    )
    _settle_block(console, run_id, blocking, directory)


def alert_stop(run_id: str, blocking: Sequence[Execution], directory: str | None) -> None:
    """The run stopped at a failed verification nothing undid: say so, and how to settle it."""
    console = err()
    e = blocking[0]
    ver = e.verification
    why = ver.reason if ver is not None and ver.reason else "it returned False"
    _line(
        console,
        ("polyloop: stopped: ", "bold yellow"),
        f"run {run_id} needs an operator. The verification of the action below failed "
        f"({clip(why, 400)}) and no rollback undid it; the state is left for investigation. "
        "Check the world, then:",
    )
    base = f"polyloop mark-resolved {shlex.quote(run_id)} {shlex.quote(e.result_id)}{dir_flag(directory)}"
    _line(console, "  ", (clip(e.tool, 60), "bold"), f"({clip(_compact(e.args), 60)})  step {e.step}, "
          f"result id {e.result_id}, idempotency key {e.idempotency_key}")
    _line(console, "    ", (f"{base} --executed", "cyan"), ("  # the effect stands (add --observation TEXT)", "dim"))
    _line(console, "    ", (f"{base} --not-executed", "cyan"), ("  # it has no effect: the model is told so", "dim"))
    _line(console, "  then: ", (resume_command(run_id, directory), "cyan"))


def alerts(found: Sequence[tuple[str, str, str]]) -> None:
    """One warning line on stderr per alert a command's run raised: (result id, tool, why)."""
    console = err()
    for rid, tool, why in found:
        _line(console, ("polyloop: ALERT: ", "bold red"),
              f"{clip(tool, 60)} ({clip(rid, 40)}): {clip(why, 400)}")


def usage_error(exc: Any, *, json: bool) -> None:
    """A bad command line, as one line on stderr (and as JSON with --json)."""
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "polyloop"
    message = exc.format_message()
    hint = f" (see `{path} --help`)" if ctx is not None else ""
    if json:
        print_json(_error_doc("UsageError", 2, message))
    _line(err(), (f"{path}: error: ", "bold red"), clip(message, 10_000), hint)


# -- run and resume ----------------------------------------------------------


def run_begins(run_id: str, log: Path | str) -> None:
    """Printed before the run starts, so the id is known even if the process dies."""
    _line(out(), ("run ", "bold"), (run_id, "bold cyan"), f"  (log: {place(str(log))})")


def resume_begins(run_id: str, next_step: str) -> None:
    """Printed as a resume continues a run: what it does first."""
    _line(err(), ("resuming ", "bold"), run_id, f": {next_step}")


def run_result(result: RunResult, *, already: bool = False) -> None:
    """How a run ended: the final answer on stdout; an error on stderr."""
    verb = "had already finished" if already else "finished"
    steps = f"{result.steps} step" + ("" if result.steps == 1 else "s")
    if result.reason == "final_answer":
        _line(out(), (f"{verb}: ", "bold green"), f"final answer after {steps}")
        out().print(_t(result.text or ""), soft_wrap=True)
    elif result.reason == "max_steps":
        _line(
            out(),
            (f"{verb}: ", "bold yellow"),
            f"the step budget was spent after {steps}, without a final answer",
        )
    elif result.reason == "tool_failures":
        _line(
            err(),
            ("polyloop: error: ", "bold red"),
            f"run {result.run_id} {verb} after {steps}, stopped by its failure budget: {clip(result.error, 10_000)}",
        )
    else:
        _line(
            err(),
            ("polyloop: error: ", "bold red"),
            f"run {result.run_id} {verb} with an error after {steps}: {clip(result.error, 10_000)}",
        )


# -- inspect -----------------------------------------------------------------

_STATE_STYLE = {
    "done": "green", "unknown": "bold red", "superseded": "dim", "resolved": "yellow",
    "pending": "cyan", "alert": "bold red", "rolled_back": "yellow",
}
_STATUS_STYLE = {
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
        if f.reason == "tool_failures":
            return f"It ended after {steps} because a tool spent its failure budget: {f.error}."
        return f"It finished with an error after {steps}: {f.error}."
    reason = report.reason
    if report.status == "corrupt":
        return f"It cannot be resumed: {reason}."
    if report.status == "active":
        return f"It is running: {reason}."
    return f"It stopped: {reason}."


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


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
        text.append(f"({clip(_compact(c.get('args')), 80 if len(calls) == 1 else 40)})")
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
                _t(e.result_id),
                _t(e.state, _STATE_STYLE.get(e.state, "")),
                _t(e.replay or "") if action else Text(""),
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

    def field(name: str, *value: str | tuple[str, str] | Text) -> None:
        _line(console, (f"{name:<10}", "bold"), *value)

    field("run", (report.run_id, "bold cyan"))
    field("status", (report.status, _STATUS_STYLE.get(report.status, "")), f" — {clip(why(report), 10_000)}")
    if report.holder:
        field("held by", report.holder)
    if rec is not None:
        field("target", clip(rec.started.target or "(none recorded: started from Python)", 400))
        field("goal", clip(rec.started.goal, 400))
        finished = rec.finished.at if rec.finished else "—"
        field("started", clip(rec.started.at, 40), ("   finished ", "bold"), clip(finished, 40))
        budget = f" of at most {rec.max_steps}" if rec.max_steps else ""
        field("steps", f"{rec.completed_steps} completed{budget}")
        t = report.tokens or {}
        field(
            "tokens",
            f"{t['input']} in, {t['output']} out; re-spent {t['respent_input']} in, "
            f"{t['respent_output']} out ({t['reissued_calls']} re-issued calls)",
        )
        if rec.finished is not None and rec.finished.result is not None:
            field("answer", clip(rec.finished.result, 400))
        guarded = [t for t in rec.started.config.get("tools") or [] if isinstance(t.get("guards"), dict)]
        for t in guarded:
            field("guards", (clip(t["name"], 60), "bold"), f" {clip(_guards_line(t['guards']), 300)}")
    if report.torn_line is not None:
        field(
            "torn tail",
            f"from line {report.torn_line}: a write cut off by a crash; readers ignore it "
            "(resume cuts it off before appending)",
        )
    if rec is not None and rec.steps:
        total = len(rec.steps)
        first, last = steps if steps is not None else (max(1, total - LAST_STEPS + 1), total)
        shown = rec.steps[max(0, first - 1) : max(0, last)]
        console.print()
        if first > 1 and shown:
            _line(console, (f"… steps 1 to {first - 1} not shown (--all, or --steps FROM-TO)", "dim"))
        if shown:
            console.print(_steps_table(shown))
        else:
            _line(console, (f"no steps in {first}-{last}: the run has {total}", "dim"))
        if last < total and shown:
            _line(console, (f"… steps {last + 1} to {total} not shown (--all, or --steps FROM-TO)", "dim"))
    if rec is not None and rec.resolutions:
        console.print()
        _line(console, ("resolutions", "bold"))
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
            _line(console, *parts)
    if rec is not None and rec.requests:
        console.print()
        _line(console, ("people", "bold"))
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
                    parts.append(f"; edited args: {clip(_compact(d.args), 200)}")
                if d.answer is not None:
                    parts.append(f"; answer: {clip(d.answer, 200)}")
            _line(console, *parts)
    if rec is not None:
        _checkpoint_lines(console, report)
    if report.artifacts:
        console.print()
        _line(console, ("products", "bold"))
        for a in report.artifacts[:SHOWN_PROBLEMS]:
            r = a.ref
            style = {"ok": "green", "unsettled": "yellow"}.get(a.state, "bold red")
            _line(
                console, "  ", (f"{a.state:<9}", style), " ", (clip(r.name, 200), "bold"),
                f"  {clip(r.path, 400)}  {r.size} bytes  sha256 {clip(r.sha256, 64)[:16]}…  by {clip(r.result_id, 40)}",
            )
        if len(report.artifacts) > SHOWN_PROBLEMS:
            hidden = len(report.artifacts) - SHOWN_PROBLEMS
            _line(console, (f"          … and {hidden} more products (--json lists them all)", "dim"))
    if report.problems:
        console.print()
        _line(console, ("problems", "bold red"))
        for p in report.problems[:SHOWN_PROBLEMS]:
            _line(console, "  ", clip(str(p), 400))
        _more(console, len(report.problems))
    console.print()
    _line(console, ("next      ", "bold"), clip(report.next, 10_000))
    if rec is not None and rec.blocking and report.status != "finished":
        _line(console, ("settle    ", "bold"), "decide whether it happened, then run one of:")
        _settle_block(console, report.run_id, rec.blocking, directory)
    if rec is not None and report.status != "finished" and rec.waiting_requests():
        _line(console, ("decide    ", "bold"), "nothing of it has run; run one of:")
        _decide_block(console, report.run_id, rec.waiting_requests(), directory)


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
            _line(console, ("validity  ", "bold"), ("not checked", "yellow"), f": {clip(v['not_checked'], 400)}")
        elif v["valid"]:
            _line(console, ("validity  ", "bold"), ("valid", "green"), ": inputs, logic version and configuration unchanged")
        else:
            _line(console, ("validity  ", "bold"), ("not valid", "bold red"), ": resume refuses (exit 4):")
            for d in v["differences"]:
                _line(console, "  ", clip(_difference(d), 400))
    if rec.overrides:
        console.print()
        _line(console, ("overrides", "bold"))
        for o in rec.overrides:
            if o.TAG == "checkpoint_accepted":
                what = "accepted " + "; ".join(_difference(d) for d in o.differences)
            else:
                what = f"lifted a crash loop of {o.resumes} resumes without progress"
            _line(console, "  ", (clip(o.by, 60), "bold"), f" at {clip(o.at, 40)} {clip(what, 600)}",
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
            spent.append(f"{len(open_step.model_calls)} of {rec.max_attempts} model call attempts of step {open_step.step}")
        field_line = "; ".join(spent)
        _line(console, ("budgets   ", "bold"), field_line)


# -- mark-resolved -----------------------------------------------------------


def resolved(
    run_id: str, result_id: str, executed: bool, recovery: Recovery, report: RunReport, directory: str | None
) -> None:
    """mark-resolved recorded a resolution: say which, and (as inspect says it) what comes next."""
    console = out()
    outcome = "executed" if executed else "not executed"
    by = recovery.resolutions[-1].by if recovery.resolutions else ""
    _line(console, ("resolved ", "bold green"), f"{result_id} of run {run_id} as {outcome} (by {clip(by, 60)})")
    _line(console, ("next     ", "bold"), clip(report.next, 10_000))
    if recovery.blocking:
        _settle_block(console, run_id, recovery.blocking, directory)
        return
    _resume_line(console, run_id, report, directory)


# -- verify ------------------------------------------------------------------


def verify_report(report: VerifyReport, *, strict: bool) -> None:
    console = out()
    for f in report.files:
        if f.status == "ok":
            continue
        style = "bold red" if f.status in ("corrupt", "bad_product") or strict else "yellow"
        for i, (line, message) in enumerate((f.problems or ((None, ""),))[:SHOWN_PROBLEMS]):
            where = f"line {line}: " if line is not None else ""
            rule = f" (rule {f.rule(i)})" if f.rule(i) is not None else ""
            _line(console, (f"{f.status:<9}", style), " ", clip(f.path, 400), "  ",
                  clip(f"{where}{message}{rule}", 400))
        _more(console, len(f.problems))
    s = report.summary
    total = len(report.files)
    verdict = ("FAIL", "bold red") if report.failed(strict=strict) else ("OK", "bold green")
    _line(
        console,
        verdict,
        f"  {total} log{'' if total == 1 else 's'} checked: {s['ok']} ok, "
        f"{s['torn_tail']} torn tail{'' if s['torn_tail'] == 1 else 's'}, {s['corrupt']} corrupt",
        f", {s['bad_product']} with a missing or altered product" if s["bad_product"] else "",
        " (torn tails fail with --strict)" if strict and s["torn_tail"] else "",
    )


def _worker_bar(label: str) -> Progress:
    """A transient progress bar on stderr for work spread over worker processes.

    No refresh thread: the work forks worker processes, and forking while
    another thread holds a lock is how children deadlock.
    """
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        console=console(sys.stderr),
        transient=True,
        auto_refresh=False,
    )


@contextmanager
def verify_progress(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr (only when `enabled`), as a `verify_logs` callback."""
    if not enabled:
        yield None
        return
    progress = _worker_bar("verifying")
    task = progress.add_task("verify", total=None)

    def advance(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)
        progress.refresh()

    with progress:
        yield advance


# -- ls ----------------------------------------------------------------------

LS_REASON = 100  # characters of a reason in a line of `ls`; --json has the whole
_LS_HEADER = ("RUN", "STATUS", "WAITS FOR", "STEPS", "UPDATED", "REASON")


def _waits(kinds: Sequence[str]) -> str:
    counts = {k: kinds.count(k) for k in kinds}
    return ", ".join(k if n == 1 else f"{k} x{n}" for k, n in counts.items()) or "-"


def _when(updated: str | None) -> str:
    """A record's ISO time as `2026-12-01T08:36:03Z` (to the second, UTC)."""
    if updated is None:
        return "-"
    moment = datetime.fromisoformat(updated)
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def ls_report(runs: Sequence[RunSummary], directory: str, statuses: Sequence[str]) -> None:
    """`polyloop ls`: one aligned line per run, then how many of each status."""
    console = out()
    if not runs:
        which = f" with status {' or '.join(statuses)}" if statuses else ""
        _line(console, f"no runs{which} in {directory}")
        return
    rows = [
        (clip(s.run_id, 60), s.status, clip(_waits(s.waiting), 40), str(s.steps), _when(s.updated), clip(s.reason, LS_REASON))
        for s in runs
    ]
    widths = [max(len(r[i]) for r in [_LS_HEADER, *rows]) for i in range(5)]
    table = Text()
    cells = [h.rjust(w) if h == "STEPS" else h.ljust(w) for h, w in zip(_LS_HEADER, widths)]
    table.append("  ".join([*cells, _LS_HEADER[-1]]) + "\n", style="bold")
    for run, status, waits, steps, when, reason in rows:
        table.append(run.ljust(widths[0]) + "  ")
        table.append(status.ljust(widths[1]), style=_STATUS_STYLE.get(status, ""))
        table.append(f"  {waits.ljust(widths[2])}  {steps.rjust(widths[3])}  {when.ljust(widths[4])}  {reason}\n")
    counts = {status: 0 for status in _STATUS_STYLE}  # in the order of the statuses
    for s in runs:
        counts[s.status] += 1
    tally = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    table.append(f"{len(runs)} run{'' if len(runs) == 1 else 's'}: {tally}", style="dim")
    console.print(table, soft_wrap=True)
    console.file.flush()


@contextmanager
def ls_progress(enabled: bool, *, after: float = 0.3) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr for `list_runs`, shown only once it has taken `after` seconds."""
    if not enabled:
        yield None
        return
    progress = _worker_bar("reading runs")
    task = progress.add_task("ls", total=None)
    start = time.monotonic()
    shown = False

    def advance(done: int, total: int) -> None:
        nonlocal shown
        if not shown:
            if done >= total or time.monotonic() - start < after:
                return
            progress.start()
            shown = True
        progress.update(task, completed=done, total=total)
        progress.refresh()

    try:
        yield advance
    finally:
        if shown:
            progress.stop()
