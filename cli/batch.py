"""`polyloop batch`: one run per line of a goals file; running it again is the resume."""

from __future__ import annotations

import contextlib
import sys
from typing import Annotated

import typer

from polyloop import BatchInterrupted, BatchReport, BatchRun, run_batch

from . import batch_view, documents, options, paste, telemetry
from .errors import FAILURE, INTERRUPTED, NEEDS_OPERATOR, OK, UNAVAILABLE, BadInput, failures
from .scope import Scope

_CODES = {"finished": OK, "needs_operator": NEEDS_OPERATOR, "failed": FAILURE, "interrupted": INTERRUPTED,
          "unavailable": UNAVAILABLE}


Target = Annotated[
    str,
    typer.Argument(
        metavar="TARGET",
        help="The agent: `path/to/file.py:name` or `module.path:name`.",
        show_default=False,
    ),
]
GoalsFile = Annotated[
    str,
    typer.Argument(
        metavar="GOALS_FILE",
        help="JSONL of {\"goal\": ..., \"run_id\": ...} objects, or one goal per line.",
        show_default=False,
    ),
]
Name = Annotated[
    str | None,
    typer.Option(
        "--name",
        metavar="NAME",
        help="The batch name: run ids are NAME-00001, NAME-00002, ... (line numbers). "
        "Default: the goals file's name without its extension.",
        show_default=False,
    ),
]
Concurrency = Annotated[
    int,
    typer.Option("--concurrency", metavar="N", min=1, help="Runs at a time in each worker process."),
]
Processes = Annotated[
    int | None,
    typer.Option(
        "--processes", metavar="P", min=1, help="Worker processes (default: one per core).", show_default=False
    ),
]
Lease = Annotated[
    float | None,
    typer.Option(
        "--lease", metavar="SECONDS", min=0.5,
        help="With --store postgresql://...: how long a run's lease lasts unrenewed (default 15); "
        "a re-run after a kill waits about this long for the killed batch's runs.",
        show_default=False,
    ),
]


def command(
    target: Target,
    goals_file: GoalsFile,
    name: Name = None,
    concurrency: Concurrency = 16,
    processes: Processes = None,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    lease: Lease = None,
    json: options.Json = False,
    otel: telemetry.Otel = False,
) -> None:
    """Run the agent at TARGET once per line of GOALS_FILE; run it again to resume.

    A file whose first non-blank line starts with `{` is JSONL: each line an
    object with a "goal" and, optionally, a "run_id" and "inputs" (names to
    file or directory paths, as `run --input`; other keys are ignored). Otherwise each non-blank line is one goal. A line without a
    run id runs as NAME-LLLLL (its line number), so the same command again
    is the resume: finished runs are skipped, interrupted ones resumed, runs
    that need an operator stay parked (the settle commands are printed), and
    the rest start. A line that changed since the batch first ran is
    reported, never run against the old run's log; a line that moved
    (deleted, inserted or reordered lines) is not started again under a new
    run id, no new line starts while a recorded line differs, and nothing
    starts with another TARGET than the batch first ran. A bad line is
    reported and the other lines still run. Runs are spread over worker processes; a
    worker that dies is replaced and its runs resumed.

    With --store postgresql://... the runs live in the database: each worker
    process opens its own connections, every run is held through a lease,
    and the batch's manifest is a row of the table polyloop_batches (on a
    directory it is DIR/.batch-NAME.json).

    --otel: every worker process traces its runs (as `run --otel` does).

    Exit: 0 every run finished, 1 some run failed (an error, a bad or
    changed line, a corrupt log, a run held elsewhere) or the database
    cannot be reached, 2 bad usage or bad input (goals file, target, flags;
    nothing ran), 3 no failure, but some run needs an operator, 5 no
    failure and nobody waits, but some run stopped because its model stayed
    unavailable (run the batch again to resume it), 130
    interrupted: the runs under way end the model call or action they are
    in and stop before the next, so every run stays resumable (a second
    Ctrl-C kills them mid-call instead).

    \b
    Example:
      polyloop batch examples/demo.py:agent goals.txt --concurrency 8
      polyloop batch examples/demo.py:agent goals.txt --store postgresql://postgres@127.0.0.1/test
    """
    with failures(Scope(json=json)) as scope:
        scope.directory = where = options.where(directory, store_url)
        telemetry.hand_down(otel)  # the worker processes trace their runs
        if lease is not None and not options.is_url(where):
            raise BadInput("--lease applies to a PostgreSQL store (--store postgresql://...)")
        options.utf8(target, "TARGET")
        options.utf8(goals_file, "GOALS_FILE")
        # With --json, stdout is the one document: whatever the agent's module
        # prints as the batch loads it goes to stderr, as the workers' output does.
        quiet = contextlib.redirect_stdout(sys.stderr) if json else contextlib.nullcontext()
        try:
            with quiet, batch_view.progress(live=sys.stderr.isatty(), plain=not json) as show:
                report = run_batch(
                    target, goals_file, name=name, directory=where,
                    concurrency=concurrency, processes=processes, progress=show,
                    **({"lease": lease} if lease is not None else {}),
                )
        except BatchInterrupted as exc:
            report = exc.report
        # Made only when printed: a command that names the store is what store_note's note is about.
        again = "" if report.outcome == "finished" else paste.batch_command(
            target, goals_file, name, where if (directory or store_url) else None, lease
        )
        if json:
            documents.emit(_json_doc(report, again))
        else:
            batch_view.summary(report, again)
    raise typer.Exit(_CODES[report.outcome])


def _settle(run: BatchRun, directory: str) -> list[tuple[str, str]]:
    """The commands that settle what a parked run waits for, each with what it means."""
    return paste.waiting_commands(str(run.run_id), run.waiting, directory)


def _json_doc(report: BatchReport, again: str) -> dict:
    """The report's document, plus the commands a script can run next (the same as printed)."""
    doc = report.to_json()
    for entry, run in zip(doc["runs"], report.runs, strict=True):
        # `next` is a sentence (or null) as everywhere; the commands are a list of their own.
        entry["commands"] = [command for command, _ in _settle(run, report.directory)]
    doc["next"] = None if report.outcome == "finished" else again
    return doc
