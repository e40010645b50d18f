"""`polyloop inspect`: what a run's log says, and what resume would do next."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from polyloop import RunReport, inspect_run
from polyloop.stores import open_store

from . import documents, inspect_view, options, watch
from .errors import BadInput, failures
from .scope import Scope


def command(
    run_id: options.RunId,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    json: options.Json = False,
    all_steps: Annotated[
        bool, typer.Option("--all", help="List every step (the default lists the last 20).")
    ] = False,
    steps: Annotated[
        str | None,
        typer.Option(
            "--steps",
            metavar="FROM-TO",
            help="List only these steps, e.g. --steps 100-120 (or one step: --steps 7).",
            show_default=False,
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Follow the run live until it ends: the same as `polyloop watch`.")
    ] = False,
) -> None:
    """Show run ID: every step's model call and action, and what resume would do next.

    Each execution is shown in its state: done (intent and result), unknown
    (intent, no result: the process stopped in between), superseded (an
    unknown attempt a later one replaced) or resolved (an operator said what
    happened), with the tool's replay policy (`safe` or `never`), tokens
    spent and re-spent, operators' resolutions, the run's status
    (finished, needs_operator, resumable, corrupt, active), why it stopped,
    and - for an unknown `never` action - the exact mark-resolved commands,
    and every intermediate product the run referenced, checked (ok,
    missing, altered, unsettled).
    The text lists the last 20 steps (--all for every step, --steps FROM-TO
    for a range); whatever waits for a person is always shown. --json holds
    every step. For a stopped run it also shows the checkpoint's validity
    (this imports the recorded target and re-reads the recorded inputs; if
    the target cannot be loaded it says "not checked"), every accepted
    change and lifted crash loop, and how much of the retry budgets the run
    spent. Nothing is written: inspect never changes a log.

    With --follow (-f) it is `polyloop watch ID`: each record as it lands,
    until the run finishes or stops, with watch's exit codes.

    Exit: 0 whenever the log could be read, whatever the run's status (read
    `status` from --json); 2 unknown or unsafe run id.

    \b
    Example:
      polyloop inspect demo
      polyloop inspect demo --json | jq -r .status
    """
    if follow:
        with failures(Scope(json=json, run_id=run_id)):
            if steps is not None:
                raise BadInput("--steps does not go with --follow (--all shows every record so far)")
        raise typer.Exit(watch.follow(run_id, directory, store_url, wait=False, all_records=all_steps, json=json))
    with failures(Scope(json=json, run_id=run_id)) as scope:
        scope.directory = where = options.where(directory, store_url)
        shown = options.step_range(steps, all_steps)
        report = asyncio.run(_inspect(where, run_id))
        if json:
            documents.emit(report.to_json())
        else:
            inspect_view.inspect_report(report, where, steps=shown)
    raise typer.Exit(0)


async def _inspect(where: str, run_id: str) -> RunReport:
    async with open_store(where) as store:
        return await inspect_run(store, run_id, validity=True)
