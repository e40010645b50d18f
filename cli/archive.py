"""`polyloop archive`: move runs, whole and verified, into another run directory."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from polyloop import ArchiveReport, archive

from . import options
from .errors import FAILURE, OK, failures
from .paste import place
from .scope import Scope
from . import documents
from .terminal import err, out, safe_text, say

RunIds = Annotated[
    list[str] | None,
    typer.Argument(metavar="[RUN]...", help="The runs to archive (any status but held by a live process).",
                   show_default=False),
]


def command(
    run_ids: RunIds = None,
    to: Annotated[
        str,
        typer.Option("--to", metavar="DIR", help="The archive: a run directory (created if missing), on the "
                     "same file system as --dir. Required.", show_default=False),
    ] = ...,  # type: ignore[assignment]
    finished: Annotated[
        bool, typer.Option("--finished", help="Archive every finished run (instead of naming runs)."),
    ] = False,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", metavar="DURATION", help="With --finished: only runs whose last record "
                     "is older than DURATION (e.g. 7d, 12h, 1h30m).", show_default=False),
    ] = None,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    json: options.Json = False,
) -> None:
    """Move runs out of the way, whole: log, products, lock file - verified first, never a live one.

    Name the runs (RUN...), or give --finished (with --older-than to keep
    recent ones). Each run's log is verified first: a corrupt one is
    refused and stays. A run a live process holds is refused and stays. A
    named run is archived whatever its status; an unfinished one stays
    resumable from the archive (`polyloop resume RUN --dir DIR`).

    From a directory, each run moves with one atomic rename of its log
    (its products staged beside it first): a crash at any moment leaves
    every run whole in exactly one of the two directories, and the next
    archive into DIR finishes what it cut short. DIR must be on the same
    file system. From --store postgresql://..., each run is exported to
    DIR/RUN.jsonl and deleted from the database in one transaction. DIR
    is an ordinary run directory: verify, ls, inspect work on it.

    Exit: 0 every run chosen was archived (or none was chosen); 1 some
    run was refused (held, corrupt, already in DIR) or the store failed;
    2 bad usage - no RUN and no --finished (or both), --older-than
    without --finished or not a duration, a named run that does not
    exist, DIR on another file system or the run directory itself.

    \b
    Example:
      polyloop archive --finished --older-than 7d --to /srv/runs-archive
      polyloop archive notes-2 notes-3 --to /srv/runs-archive --json
    """
    with failures(Scope(json=json)) as scope:
        scope.directory = where = options.where(directory, store_url)
        options.utf8(to, "--to")
        report = asyncio.run(archive(where, to=to, run_ids=run_ids or None, finished=finished,
                                     older_than=older_than))
        if json:
            documents.emit(report.to_json())
        else:
            _say(report, where)
    raise typer.Exit(FAILURE if report.failed else OK)


def _say(report: ArchiveReport, where: str) -> None:
    to = safe_text(place(report.to), one_line=True)
    for run_id in report.swept:
        say(err(), ("finished: ", "dim"), f"the archive of {safe_text(run_id, one_line=True)} a crash had cut short")
    for r in report.runs:
        run = safe_text(r.run_id, one_line=True)
        if r.outcome == "archived":
            state = "" if r.finished else " (unfinished: it stays resumable there)"
            say(out(), ("archived ", "bold green"), f"{run} to {to}{state}")
        else:
            say(err(), ("refused ", "bold red"), f"{run}: {safe_text(r.reason, one_line=True)}; it stays in "
                f"{safe_text(place(where), one_line=True)}")
    done = sum(r.outcome == "archived" for r in report.runs)
    say(err(), (f"{done} of {len(report.runs)} run{'' if len(report.runs) == 1 else 's'} archived to {to}", "dim"))
