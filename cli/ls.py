"""`polyloop ls`: the runs of a directory or database, what each waits for, most recent first."""

from __future__ import annotations

import enum
import sys
from typing import Annotated

import typer

from polyloop import list_runs

from . import documents, logs_view, options, paste
from .errors import BadInput, failures
from .scope import Scope


class Status(str, enum.Enum):
    """The statuses of `inspect --json`, as `--status` takes them."""

    finished = "finished"
    needs_operator = "needs_operator"
    resumable = "resumable"
    corrupt = "corrupt"
    active = "active"


Since = Annotated[
    str | None,
    typer.Option("--since", metavar="DURATION", help="Only runs active within DURATION (e.g. 90s, 15m, "
                 "2h, 7d, 1h30m): their last record is no older.", show_default=False),
]
Limit = Annotated[
    int | None,
    typer.Option("--limit", metavar="N", min=0, help="Show at most N runs (the most recent).", show_default=False),
]
Batch = Annotated[
    str | None,
    typer.Option("--batch", metavar="NAME", help="Only the runs of batch NAME (`polyloop batch --name`).",
                 show_default=False),
]
Target = Annotated[
    str | None,
    typer.Option("--target", metavar="TARGET", help="Only runs of this agent target: as recorded, a path "
                 "ending it (examples/demo.py:agent), or a shell pattern ('*demo.py:*').", show_default=False),
]


def command(
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    status: Annotated[
        list[Status] | None,
        typer.Option(
            "--status",
            metavar="STATUS",
            help="Show only runs with this status (repeat for several): finished, "
            "needs_operator, resumable, corrupt or active.",
            show_default=False,
        ),
    ] = None,
    since: Since = None,
    limit: Limit = None,
    batch: Batch = None,
    target: Target = None,
    json: options.Json = False,
) -> None:
    """List the runs of DIR: status, what each waits for, steps, last activity.

    One line per run, most recent activity first (the time of the log's
    last record, UTC): the run id, its status as `polyloop inspect` gives it
    (finished, needs_operator, resumable, corrupt, active), the kinds of
    what waits for a person (e.g. unknown: an action to settle with
    mark-resolved), completed steps, and why it finished or stopped - for
    a run that ended in an error, the error itself (the provider's words);
    for a cancelled one, who cancelled it and why. Every
    run is judged as `inspect` judges it; logs are read on all cores, with a
    progress bar on a terminal when it takes more than a moment. Read-only:
    no lock is taken and nothing is written. A *.jsonl entry that cannot be
    a run's log (an unsafe file name, a FIFO, a directory, an unreadable
    file) is listed as corrupt, with a reason that starts `not a run log:`.

    With --store postgresql://... it lists every run of the database that
    has a log, judged the same way (one query lists them; their logs are
    read in chunks over one connection).

    --since, --batch, --target and --limit narrow the list (they combine);
    --batch reads only the batch's runs.

    Exit: 0 whenever DIR (or the database) could be read, whatever the
    runs' statuses; 1 the database cannot be reached or failed; 2 DIR does
    not exist (or is not a directory), a --status is unknown, --since is
    not a duration, or there is no batch NAME.

    \b
    Example:
      polyloop ls --status needs_operator
      polyloop ls --since 2h --target examples/demo.py:agent --limit 20
      polyloop ls --batch nightly --status resumable
      polyloop ls --json | jq -r '.[] | select(.waiting != []) | .run_id'
      polyloop ls --store postgresql://postgres@127.0.0.1/test
    """
    wanted = [s.value for s in status or []]
    with failures(Scope(json=json)) as scope:
        scope.directory = where = options.where(directory, store_url)
        show = not json and sys.stderr.isatty()
        try:
            with logs_view.ls_progress(show) as progress:
                runs = list_runs(where, statuses=wanted or None, progress=progress, since=since, limit=limit,
                                 batch=batch, target=target)
        except OSError as exc:
            raise BadInput(f"cannot list runs in {paste.place(where)}: {exc.strerror or exc}") from exc
        if json:
            documents.emit_each([s.to_json() for s in runs])
        else:
            logs_view.ls_report(runs, paste.place(where), wanted)
    raise typer.Exit(0)
