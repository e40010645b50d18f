"""`polyloop verify`: check every log in a directory for corruption (for CI)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from polyloop import verify_logs

from . import options, render
from .errors import FAILURE, OK, BadInput, Scope, failures


def command(
    directory: Annotated[
        str,
        typer.Argument(metavar="DIR", help="The directory to check (searched recursively).", show_default=False),
    ],
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

    A torn tail (the last write of a crashed process, cut off) is a normal
    crash artefact: it is reported but does not fail unless --strict.
    Corruption (a state no correct writer produces) is reported with its file
    and line. Work is spread over the machine's cores; a progress bar shows
    on a terminal. Nothing is modified.

    Exit: 0 no corruption, 1 corruption found (or a torn tail with
    --strict), 2 DIR is not a directory.

    \b
    Example:
      polyloop verify runs/ --json > verify.json
    """
    with failures(Scope(json=json, directory=directory)):
        show = not json and sys.stderr.isatty()
        try:
            with render.verify_progress(show) as progress:
                report = verify_logs(directory, workers=workers, progress=progress)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise BadInput(f"cannot verify {directory}: {exc}") from exc
        if json:
            render.print_json(report.to_json())
        else:
            render.verify_report(report, strict=strict)
    raise typer.Exit(FAILURE if report.failed(strict=strict) else OK)
