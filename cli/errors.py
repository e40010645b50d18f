"""Exit codes, and the one place where failures become them.

    0    success: the run finished (final answer or step budget); verify found no corruption
    1    failure: the run ended in an error, a tool spent its failure budget, or it was
         cancelled (`polyloop cancel`, while this process ran it); the model
         call failed; the store failed;
         the log is corrupt (so resume refuses); verify found corruption
    2    bad usage or bad input: unknown or unsafe run id, a run id that exists for `run`,
         a target that cannot be loaded, mark-resolved on an execution that is not an
         open unknown, approve/deny/answer on a request the run does not wait for (or a
         hash that differs), a run held by another live process, bad flags, a batch that
         cannot start (no goals file, an unsafe name, already running), a store URL of a
         scheme PolyLoop does not serve (mysql://, sqlite://, postgresql+psycopg://)
    3    the run stopped and needs an operator (an unknown `never` execution or rollback,
         an alert: a failed verification that no rollback undid, or a tool call that waits
         for a person's approval or answer)
         an alert: a failed verification that no rollback undid, or a crash loop)
    4    the checkpoint is no longer valid: an input, the logic version, the agent's
         configuration or an intermediate product changed since the run started
    5    stopped, resumable: a dependency was unavailable (the model endpoint kept failing
         transiently past the run's retry budget); resume tries again
    6    refused, conflict: `export` or `import` found other content under a run's id where
         it was to go (nothing was written over it)
    130  interrupted (Ctrl-C); the run stays resumable

Every command body runs inside `failures()`, which maps the exception to its
code with `exit_code()` and hands the rendering to `failure_view`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator

import typer

from polyloop import (
    BatchError,
    CheckpointError,
    CorruptLogError,
    DecisionError,
    InvalidInputError,
    InvalidRunIdError,
    ModelCallError,
    ModelUnavailableError,
    NeedsOperatorError,
    PolyLoopError,
    ResolutionError,
    RunActiveError,
    RunExistsError,
    RunMismatchError,
    RunNotFoundError,
    StoreError,
    StoreUrlError,
    TargetError,
)

from polyloop.for_cli import commands

from . import failure_view, paste, terminal
from .scope import Scope

try:  # typer >= 0.20 vendors click; older typers use click itself
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import ClickException, UsageError

OK = 0
FAILURE = 1
USAGE = 2
NEEDS_OPERATOR = 3
CHECKPOINT_INVALID = 4
UNAVAILABLE = 5
CONFLICT = 6
INTERRUPTED = 130


class BadInput(Exception):
    """Input the command line itself rejects (a missing directory, an unreadable file)."""


# First match wins, so subclasses come before their bases.
_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (NeedsOperatorError, NEEDS_OPERATOR),
    (CheckpointError, CHECKPOINT_INVALID),
    (CorruptLogError, FAILURE),  # and SchemaVersionError
    (ModelCallError, FAILURE),
    (ModelUnavailableError, UNAVAILABLE),
    (StoreError, FAILURE),
    (StoreUrlError, USAGE),  # a store URL of another scheme (mysql://...): nothing was opened
    (InvalidRunIdError, USAGE),
    (InvalidInputError, USAGE),
    (RunNotFoundError, USAGE),
    (RunExistsError, USAGE),
    # Another live process holds the run: the request is wrong *right now*;
    # retrying once the holder is gone is the fix, as for any bad input.
    (RunActiveError, USAGE),
    (RunMismatchError, USAGE),
    (ResolutionError, USAGE),
    (DecisionError, USAGE),
    (TargetError, USAGE),
    (BatchError, USAGE),  # a batch that cannot start: nothing ran
    (BadInput, USAGE),
    (UsageError, USAGE),
    (KeyboardInterrupt, INTERRUPTED),
    (asyncio.CancelledError, INTERRUPTED),
    (PolyLoopError, FAILURE),
)

_RESULT_CODES = {
    "final_answer": OK,
    # The step budget is part of the agent's design: the run finished as
    # configured, so scripts see success. `inspect` tells the two apart.
    "max_steps": OK,
    "error": FAILURE,
    "tool_failures": FAILURE,  # a tool spent its failure budget: the run ended unfinished
    "cancelled": FAILURE,  # a person ended it (`polyloop cancel`): unfinished, on purpose
}


def exit_code(exc: BaseException) -> int:
    """The exit code for a failure (1 for anything unexpected)."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return FAILURE


def result_code(reason: str) -> int:
    """The exit code for a run that finished with `reason`."""
    return _RESULT_CODES.get(reason, FAILURE)


_debug = False
interruption_reported = False  # a command already said it was interrupted


def set_debug(on: bool) -> None:
    """Show tracebacks of failures (`polyloop --debug` or `POLYLOOP_DEBUG=1`)."""
    global _debug
    _debug = on or os.environ.get("POLYLOOP_DEBUG", "") not in ("", "0")


@contextlib.contextmanager
def failures(scope: Scope) -> Iterator[Scope]:
    """Run a command body; turn anything it raises into a rendered message and an exit code."""
    try:
        with commands.serving(commands.DEFAULT):  # until options.where says where runs live
            yield scope
    except (typer.Exit, ClickException, GeneratorExit):
        raise
    except (terminal.OutputClosed, BrokenPipeError):
        # The reader went away (`polyloop ls | head`): nothing to say, and no one to say it to.
        terminal.silence_stdout()
        raise typer.Exit(FAILURE) from None
    except SystemExit as exc:
        # Only our own code picks the exit code: user code (an agent, a tool,
        # a model) calling sys.exit() is a failure like any other.
        failure = PolyLoopError(f"the agent's code called sys.exit({exc.code!r})")
        failure_view.failure(failure, FAILURE, scope, kind="expected", show_traceback=_debug)
        raise typer.Exit(FAILURE) from None
    except BaseException as exc:  # KeyboardInterrupt too: it becomes 130
        code = exit_code(exc)
        if code == INTERRUPTED:
            global interruption_reported
            interruption_reported = True
            kind = "interrupted"
        elif isinstance(exc, PolyLoopError | BadInput):
            kind = "expected"
        else:
            kind = "unexpected"
        failure_view.failure(exc, code, scope, kind=kind, show_traceback=_debug)
        raise typer.Exit(code) from None
    finally:
        paste.store_note()


def usage_failure(exc: ClickException, *, json: bool) -> int:
    """Render an error of the argument parser; return its exit code (always 2)."""
    failure_view.usage_error(exc, json=json)
    return USAGE


def stream_safe() -> None:
    """Never crash printing a character the terminal's encoding lacks."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            with contextlib.suppress(Exception):
                reconfigure(errors="backslashreplace")
