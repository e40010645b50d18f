"""`polyloop export` and `polyloop import`: move runs between a store and a directory of JSONL logs."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from polyloop.for_cli import TransferReport, export_runs, import_runs

from . import documents, options
from .errors import CONFLICT, FAILURE, OK, failures
from .paste import place
from .scope import Scope
from .terminal import err, out, safe_text, say


def export_command(
    run_ids: Annotated[
        list[str], typer.Argument(metavar="RUN...", help="The runs to export (any status but held by a live process).",
                                  show_default=False),
    ],
    to: Annotated[
        str, typer.Option("--to", metavar="DIR", help="Where to write them (created if missing). Required.",
                          show_default=False),
    ] = ...,  # type: ignore[assignment]
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    json: options.Json = False,
) -> None:
    """Write runs of a store as JSONL logs, with their products, into DIR.

    Each run becomes DIR/RUN.jsonl (the records, one a line, as the JSONL
    store writes them) and DIR/RUN.artifacts/NAME for every product its
    log references: what `polyloop verify` accepts and `--dir DIR` reads.
    The products are written and fsync'd first, then the log. The store is
    left as it was. A run a live process holds, a corrupt log, or a product
    missing or altered in the store is refused.
    Files already in DIR with the same bytes are the same export (unchanged); other
    bytes under a run's name are a conflict: the run is refused, nothing is
    written over them. `polyloop import DIR --store URL` loads them elsewhere.

    Exit: 0 every run was exported; 6 some run was refused as a conflict
    (DIR holds other content under its name) and none for another reason;
    1 some run was refused (held, corrupt, a bad product) or the store
    failed; 2 bad usage - a run that does not exist, an unsafe run id, DIR
    cannot be made.

    \b
    Example:
      polyloop export notes-2 notes-3 --store postgresql://postgres@127.0.0.1/test --to moved/
    """
    with failures(Scope(json=json)) as scope:
        scope.directory = where = options.where(directory, store_url)
        options.utf8(to, "--to")
        report = asyncio.run(export_runs(where, run_ids, to=to))
        _show(report, json)
    raise typer.Exit(_code(report))


def import_command(
    directories: Annotated[
        list[str], typer.Argument(metavar="DIR...", help="Directories of JSONL logs (searched recursively), "
                                  "as `polyloop export` writes them.", show_default=False),
    ],
    store_url: options.StoreUrl = None,
    json: options.Json = False,
) -> None:
    """Load verified JSONL logs, with their products, into a PostgreSQL store under the same run ids.

    Every *.jsonl log under each DIR is verified first: a corrupt log or a
    missing or altered product is refused (a torn tail, a crash's cut-off
    last write, is dropped as every reader drops it). Each run is loaded
    whole in one transaction: its records exactly as written, its products
    (RUN.artifacts/ beside the log), nobody holding it. It then resumes
    there as it would have where it came from (`polyloop resume RUN
    --store URL`): done steps stay done, unknown actions stay unknown. A run
    id the database already has with the same records and products is left
    unchanged (importing twice is harmless); with other content it is
    refused as a conflict and nothing is written.

    Exit: 0 every run was imported or was there already; 6 some run was
    refused as a conflict (its id exists with other content) and none for
    another reason; 1 some run was refused (corrupt, a bad product, held)
    or the store failed; 2 bad usage - the store is not a PostgreSQL URL,
    a DIR is not a directory.

    \b
    Example:
      polyloop import moved/ --store postgresql://postgres@127.0.0.1/test --json
    """
    with failures(Scope(json=json)) as scope:
        scope.directory = where = options.where(None, store_url)
        report = asyncio.run(import_runs(directories, store_spec=where))
        _show(report, json)
    raise typer.Exit(_code(report))


def _code(report: TransferReport) -> int:
    if not report.failed:
        return OK
    return CONFLICT if report.conflicted else FAILURE


def _show(report: TransferReport, json: bool) -> None:
    if json:
        documents.emit(report.to_json())
        return
    to = safe_text(place(report.to), one_line=True)
    moved = 0
    for r in report.runs:
        run = safe_text(r.run_id, one_line=True)
        products = f" with {r.products} product{'' if r.products == 1 else 's'}" if r.products else ""
        if r.outcome == "refused":
            say(err(), ("refused ", "bold red"), f"{run}: {safe_text(r.reason, one_line=True)}")
        elif r.outcome == "unchanged":
            moved += 1
            say(out(), ("unchanged ", "bold"), f"{run}: {to} has it already")
        else:
            moved += 1
            say(out(), (f"{r.outcome} ", "bold green"), f"{run} to {to}{products}")
    n = len(report.runs)
    say(err(), (f"{moved} of {n} run{'' if n == 1 else 's'} {report.action}ed to {to}", "dim"))
