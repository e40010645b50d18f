"""`polyloop inspect`: what a run's log says, and what resume would do next."""

from __future__ import annotations

import asyncio

import typer

from polyloop import JsonlStore, inspect_run

from . import options, render
from .errors import Scope, failures
from .resume import RunId


def command(run_id: RunId, directory: options.Directory = None, json: options.Json = False) -> None:
    """Show run ID: every step's model call and action, and what resume would do next.

    Each execution is shown in its state: done (intent and result), unknown
    (intent, no result: the process stopped in between), superseded (an
    unknown attempt a later one replaced) or resolved (an operator said what
    happened), with the tool's replay policy (`safe` or `never`), tokens
    spent and re-spent, operators' resolutions, the run's status
    (finished, needs_operator, resumable, corrupt, active), why it stopped,
    and - for an unknown `never` action - the exact mark-resolved commands.
    Nothing is written: inspect never changes a log.

    Exit: 0 whenever the log could be read, whatever the run's status (read
    `status` from --json); 2 unknown or unsafe run id.

    \b
    Example:
      polyloop inspect demo
      polyloop inspect demo --json | jq -r .status
    """
    where = options.directory(directory)
    with failures(Scope(json=json, directory=where, run_id=run_id)):
        report = asyncio.run(inspect_run(JsonlStore(where), run_id))
        if json:
            render.print_json(report.to_json())
        else:
            render.inspect_report(report, where)
    raise typer.Exit(0)
