"""`polyloop resume`: continue a run after a crash."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from polyloop import RunResult, resume_run
from polyloop.stores import open_store

from . import alerts, options, render
from .errors import Scope, failures, result_code

RunId = Annotated[str, typer.Argument(metavar="ID", help="The run id.", show_default=False)]


def command(run_id: RunId, directory: options.Directory = None, store_url: options.StoreUrl = None) -> None:
    """Continue run ID where it stopped, re-importing the target recorded at its start.

    Done executions are skipped and their recorded results reused (no model
    call or tool call is repeated), unanswered model calls are re-issued as
    new attempts, unknown `safe` actions are replayed, and operators'
    resolutions are honoured. An unknown `never` action stops the run (exit 3)
    with the exact `polyloop mark-resolved` commands that settle it, unless
    its tool declares `reconcile`, which settles it by asking the world. A
    failed verification prints an ALERT line; one that no rollback undid
    stops the run (exit 3) too. A
    finished run is reported, not re-run; a corrupt log is refused. Before
    anything runs, every intermediate product the run referenced is checked
    (present, same size and SHA-256): a missing or altered one refuses the
    resume (exit 4), naming it.

    Exit: 0 finished, 1 the run ended in an error (or the log is corrupt, or
    the model call failed: resume again once fixed), 2 unknown run id, bad
    input, or the run is held by a live process, 3 needs an operator, 4 a
    product the run referenced is missing or altered, 130 interrupted.

    \b
    Example:
      polyloop resume demo
    """
    with failures(Scope(run_id=run_id, resumable=True)) as scope:
        scope.directory = where = options.where(directory, store_url)
        since = alerts.now()
        try:
            result = asyncio.run(_resume(where, run_id))
        finally:
            alerts.warn_since(where, run_id, since)
        render.run_result(result, already=result.already_finished)
    raise typer.Exit(result_code(result.reason))


async def _resume(where: str, run_id: str) -> RunResult:
    async with open_store(where) as store:
        return await resume_run(run_id, store=store, on_resume=lambda step: render.resume_begins(run_id, step))
