"""`polyloop resume`: continue a run after a crash."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated

import typer

from polyloop import RunResult, resume_run
from polyloop.stores import open_store

from . import alerts, documents, options, outage_view, run_view, telemetry
from .errors import failures, result_code
from .scope import Scope



def command(
    run_id: options.RunId,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    input_files: options.Inputs = None,
    accept_changes: Annotated[
        bool,
        typer.Option(
            "--accept-changes",
            help="Accept, on the record, every change of the run's inputs, logic version or "
            "configuration since it started, and continue (needs --reason).",
        ),
    ] = False,
    accept_crash_loop: Annotated[
        bool,
        typer.Option(
            "--accept-crash-loop",
            help="Lift, on the record, the stop of a run resumed too often without progress "
            "(needs --reason).",
        ),
    ] = False,
    reason: Annotated[
        str | None,
        typer.Option("--reason", metavar="TEXT", help="Why you accept (written to the log).", show_default=False),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option("--by", metavar="NAME", help="Who accepts. Default: user@host.", show_default=False),
    ] = None,
    json: options.Json = False,
    otel: telemetry.Otel = False,
) -> None:
    """Continue run ID where it stopped, re-importing the target recorded at its start.

    Done executions are skipped and their recorded results reused (no model
    call or tool call is repeated), unanswered model calls are re-issued as
    new attempts, unknown `safe` actions are replayed, and operators'
    resolutions are honoured. An unknown `never` action stops the run (exit 3)
    with the exact `polyloop mark-resolved` commands that settle it, unless
    its tool declares `reconcile`, which settles it by asking the world. A
    failed verification prints an ALERT line; one that no rollback undid
    stops the run (exit 3) too. A finished run is reported, not re-run; a
    corrupt log is refused.

    Before anything runs, the run's inputs (re-read from the paths recorded
    at its start, or the --input given now), logic version and agent
    configuration, and every intermediate product it referenced, are compared
    with what the log recorded: any change
    refuses the resume (exit 4) naming it; start over under a new run id,
    or continue with --accept-changes --reason TEXT (written to the log). A
    run resumed its crash-loop budget of times without completing a step
    stops (exit 3) until --accept-crash-loop --reason TEXT lifts it. A run of your own loop (polyloop.durable)
    resumes by calling its entry point, `function(run_id=..., store=..., goal=...)`: the loop runs again
    against its log, and a call that differs from what the log records is refused (exit 4) before it runs.

    Exit: 0 finished, 1 the run ended in an error or a tool spent its
    failure budget (or the log is corrupt, or the model call failed: resume
    again once fixed), 2 unknown run id, bad input, or the run is held by a
    live process, 3 needs an operator (or a crash loop), 4 the checkpoint is
    no longer valid (an input, the logic, the configuration or a product), 5
    stopped, resumable: the model stayed unavailable past the retry budget,
    130 interrupted. --otel: the resume's spans continue the run's trace. --json: one document on stdout, the run as `inspect
    --json` shows it once the command ends, with `exit_code` and `error`.

    \b
    Example:
      polyloop resume demo
      polyloop resume demo --accept-changes --reason "contract v2 is the one to use"
    """
    with failures(Scope(json=json, run_id=run_id, resumable=True)) as scope:
        scope.directory = where = options.where(directory, store_url)
        if json:
            documents.on_failure(scope, "resume", where, run_id)
        options.utf8(reason, "--reason"), options.utf8(by, "--by")
        resume = ResumeAsked(options.inputs(input_files), accept_changes, accept_crash_loop, reason, by)
        with documents.quiet(json), outage_view.notices(), telemetry.telemetry(otel) as traced:
            result = asyncio.run(_resume(where, run_id, resume, alerts.AlertLines(), traced))
            run_view.run_result(result, already=result.already_finished)
        documents.ran(json, "resume", where, result, code := result_code(result.reason))
    raise typer.Exit(code)


@dataclass(frozen=True, slots=True)
class ResumeAsked:
    """What the command line asks of this resume besides the run id."""

    inputs: dict[str, str] | None
    accept_changes: bool
    accept_crash_loop: bool
    reason: str | None
    by: str | None


async def _resume(
    where: str, run_id: str, asked: ResumeAsked, on_alert: alerts.AlertLines, traced: telemetry.Wrap
) -> RunResult:
    async with open_store(where) as store:
        return await resume_run(
            run_id,
            store=traced(store),
            on_resume=lambda step: run_view.resume_begins(run_id, step),
            inputs=asked.inputs,
            accept_changes=asked.accept_changes,
            accept_crash_loop=asked.accept_crash_loop,
            reason=asked.reason,
            by=asked.by,
            on_alert=on_alert,
        )
