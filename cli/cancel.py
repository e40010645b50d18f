"""`polyloop cancel`: end a run on the record, or ask its live holder to (log format 1.3)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from polyloop import CancelOutcome, cancel
from polyloop.stores import open_store

from . import options
from .errors import FAILURE, OK, failures
from .paste import inspect_command
from .scope import Scope
from . import documents
from .terminal import err, out, safe_text, say

Reason = Annotated[
    str,
    typer.Option("--reason", metavar="TEXT", help="Why the run is cancelled (recorded). Required.",
                 show_default=False),
]


def command(
    run_id: options.RunId,
    reason: Reason,
    by: options.By = None,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="When a live process holds the run, wait until it has stopped."),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", metavar="SECONDS", min=0, help="With --wait, give up after SECONDS "
                     "(exit 1; the request to stop stays).", show_default=False),
    ] = None,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    json: options.Json = False,
) -> None:
    """End run ID for good, on the record: a `run_finished` of reason `cancelled`.

    A run nobody holds - it stopped resumable, or waits for a person - is
    ended now, under its lock, with a durable `run_finished` naming who
    (--by) and why (--reason). A run a live process holds (`polyloop run`,
    `resume`, a batch or a worker) is asked to stop instead: it ends the
    same way at its next safe point, before its next model call - never
    inside a tool call. With --wait the command waits until it has (and
    ends the run itself should the holder stop first). Cancelling settles
    nothing: an execution whose outcome is unknown stays unknown.

    Exit: 0 the run has ended as cancelled, or was asked to stop, or had
    already finished (nothing to cancel: said on stderr, outcome
    `already_finished` in --json; nothing is written); 1 --wait ran out of
    --timeout, the log is corrupt or the store failed; 2 the run is
    unknown, or --reason or --by is blank.

    \b
    Example:
      polyloop cancel notes-2 --reason "superseded by notes-3"
      polyloop cancel notes-2 --reason "wrong goal" --by alice --wait --timeout 60
    """
    with failures(Scope(run_id=run_id, json=json)) as scope:
        scope.directory = where = options.where(directory, store_url)
        options.utf8(reason, "--reason")
        options.utf8(by, "--by")
        done = asyncio.run(_cancel(where, run_id, reason, by, wait, timeout))
        if json:
            documents.emit(done.to_json())
        else:
            _say(done, where)
    raise typer.Exit(FAILURE if wait and done.outcome == "requested" else OK)


async def _cancel(where: str, run_id: str, reason: str, by: str | None, wait: bool,
                  timeout: float | None) -> CancelOutcome:
    async with open_store(where) as store:
        return await cancel(store, run_id, reason=reason, by=by, wait=wait, timeout=timeout)


def _say(done: CancelOutcome, where: str) -> None:
    run = safe_text(done.run_id, one_line=True)
    if done.outcome == "cancelled":
        steps = f"{done.steps} step" + ("" if done.steps == 1 else "s")
        say(out(), ("cancelled: ", "bold yellow"), f"run {run} ended after {steps}, cancelled by "
            f"{safe_text(done.by, one_line=True)}: {safe_text(done.why, one_line=True)}")
    elif done.outcome == "requested":
        holder = safe_text(done.holder or "another process", one_line=True)
        say(out(), ("asked to stop: ", "bold yellow"), f"run {run} is held by {holder}; it ends as cancelled "
            "at its next safe point (before its next model call)")
        say(err(), f"follow it with: {inspect_command(done.run_id, where)}")
    else:
        say(err(), ("nothing to cancel: ", "bold"), f"run {run} had already finished "
            f"({safe_text(done.reason, one_line=True)}, {done.steps} steps)")

