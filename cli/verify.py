"""`polyloop verify`: check every log in a directory for corruption (for CI)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from polyloop import verify_logs

from . import documents, logs_view, options
from .errors import FAILURE, OK, BadInput, failures
from .scope import Scope


def command(
    directory: Annotated[
        str | None,
        typer.Argument(
            metavar="[DIR]",
            help="The directory to check (searched recursively). Leave it out to give --dir or "
            "--store, or to check $POLYLOOP_STORE, else $POLYLOOP_DIR, else ./runs.",
            show_default=False,
        ),
    ] = None,
    dir_option: options.Directory = None,
    store_url: options.StoreUrl = None,
    json: options.Json = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Fail on torn tails too, not only on corruption.")
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option("--workers", metavar="N", min=1, help="Processes to use (default: one per core).", show_default=False),
    ] = None,
) -> None:
    """Check every *.jsonl log under DIR: decode every line, apply every invariant.

    Intermediate products a log references (in RUN.artifacts/ beside it)
    are checked too: a missing or altered one is reported as bad_product
    and fails the check.

    A torn tail (the last write of a crashed process, cut off) is a normal
    crash artefact: it is reported but does not fail unless --strict.
    Corruption (a state no correct writer produces) is reported with its file
    and line. Work is spread over the machine's cores; a progress bar shows
    on a terminal. Nothing is modified.

    With --store postgresql://... it checks every run in the database
    instead, with the same rules and report.

    Without DIR, --dir or --store it checks $POLYLOOP_STORE, else
    $POLYLOOP_DIR, else ./runs, as every command does.

    Exit: 0 no corruption, 1 corruption or a bad product found (or a torn
    tail with --strict), 2 DIR is not a directory.

    \b
    Example:
      polyloop verify runs/ --json > verify.json
      polyloop verify --store postgresql://postgres@127.0.0.1/test
    """
    with failures(Scope(json=json, directory=directory)) as scope:
        given = [w for w in (directory, dir_option, store_url) if w is not None]
        if len(given) > 1:
            raise BadInput("give one of DIR, --dir and --store")
        where = options.checked(given[0]) if given else options.where(None, None)
        scope.directory = where
        show = not json and sys.stderr.isatty()
        with logs_view.verify_progress(show) as progress:
            try:  # a directory, or a database's URL: the library tells them apart
                report = verify_logs(where, workers=workers, progress=progress)
            except (FileNotFoundError, NotADirectoryError) as exc:
                raise BadInput(f"cannot verify {where}: {exc}") from exc
        if json:
            documents.emit(report.to_json())
        else:
            logs_view.verify_report(report, strict=strict)
    raise typer.Exit(FAILURE if report.failed(strict=strict) else OK)
