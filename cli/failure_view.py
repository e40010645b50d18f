"""How a failed command reads: one line on stderr (a JSON error too with --json),
or the stop of a run that needs a person, with the commands that settle it."""

from __future__ import annotations

import traceback
from typing import Any

from rich.text import Text

from polyloop import AlertError, ApprovalRequiredError, CrashLoopError, ModelUnavailableError, NeedsOperatorError

from .documents import emit, error_doc
from .paste import resume_command
from .scope import Scope
from .terminal import clip, err, safe_text, say
from .waits_view import alert_stop, needs_operator, waits_stop


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
        doc = error_doc(type(exc).__name__, code, message)
        emit((scope.document(doc["error"]) if scope.document is not None else None) or doc, lines=scope.json_lines)
    if isinstance(exc, ApprovalRequiredError):
        waits_stop(exc.run_id, exc.requests, scope.directory)
        return
    if isinstance(exc, ModelUnavailableError):
        say(console, ("polyloop: stopped: ", "bold yellow"), clip(message, 10_000), ": ",
            (resume_command(exc.run_id, scope.directory), "cyan"))
        return
    if isinstance(exc, CrashLoopError):
        say(console, ("polyloop: stopped: ", "bold yellow"), clip(message, 10_000))
        return
    if isinstance(exc, AlertError):
        alert_stop(exc.run_id, exc.executions, scope.directory)
        return
    if isinstance(exc, NeedsOperatorError):
        needs_operator(exc.run_id, exc.executions, scope.directory)
        return
    say(console, ("polyloop: error: ", "bold red"), clip(message, 10_000))


def usage_error(exc: Any, *, json: bool) -> None:
    """A bad command line, as one line on stderr (and as JSON with --json)."""
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "polyloop"
    message = exc.format_message()
    hint = f" (see `{path} --help`)" if ctx is not None else ""
    if json:
        emit(error_doc("UsageError", 2, message))
    say(err(), (f"{path}: error: ", "bold red"), clip(message, 10_000), hint)
