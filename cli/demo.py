"""`polyloop demo`: run the demo agent that ships with PolyLoop."""

from __future__ import annotations

from typing import Annotated

import typer

from polyloop.examples.demo import CRASH_ENV, GOAL

from . import options, paste, run
from .terminal import err, say

TARGET = "polyloop.examples.demo:agent"

Goal = Annotated[
    str | None,
    typer.Option("--goal", metavar="TEXT", help=f"What the run is for (default: {GOAL!r}).", show_default=False),
]


def command(
    goal: Goal = None,
    run_id: run.NewRunId = None,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
) -> None:
    """Run the demo agent that ships with PolyLoop: no network, no API key.

    The same as `polyloop run polyloop.examples.demo:agent`: a scripted model
    and four real tools that list, read and write files and run a shell
    command in ./demo-workspace/ID/ (or $POLYLOOP_DEMO_DIR/ID/). The reads are
    `replay="safe"`; write_file and run_shell keep the default, `never`.
    Works from any directory; resume from the same one. The goal defaults to
    "write up the notes", the run id to a new sortable id.

    With POLYLOOP_DEMO_CRASH=1 set, write_file kills its own process with
    SIGKILL right after writing its file and before PolyLoop records the
    result (=run_shell: the shell command instead): then inspect the run,
    settle the write with mark-resolved, and resume it.

    Exit codes as for `polyloop run`.

    \b
    Example:
      polyloop demo
      POLYLOOP_DEMO_CRASH=1 polyloop demo --run-id crash-1
    """
    try:
        run.command(TARGET, goal=GOAL if goal is None else goal, run_id=run_id, directory=directory,
                    store_url=store_url)
    except typer.Exit as done:
        if done.exit_code == 0:
            where = paste.dir_flag(options.where(directory, store_url))
            say(err(), ("next: ", "dim"), f"crash it on purpose and recover it: {CRASH_ENV}=1 polyloop demo{where}")
        raise
