"""`polyloop run`: start a new run of an agent target."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from polyloop import (
    Agent,
    JsonlStore,
    RunExistsError,
    RunResult,
    check_run_id,
    load_target,
    new_run_id,
    run_target,
)
from polyloop.stores import open_store

from . import alerts, documents, options, outage_view, paste, run_view, telemetry
from .errors import failures, result_code
from .scope import Scope


Target = Annotated[
    str,
    typer.Argument(
        metavar="TARGET",
        help="The agent: `path/to/file.py:name` or `module.path:name`, naming an "
        "Agent or a zero-argument callable returning one.",
        show_default=False,
    ),
]

Goal = Annotated[
    str | None,
    typer.Option(
        "--goal",
        metavar="TEXT",
        help="What the run is for: the first user message (default: empty, for agents "
        "whose system prompt or script says it all).",
        show_default=False,
    ),
]

NewRunId = Annotated[
    str | None,
    typer.Option(
        "--run-id",
        metavar="ID",
        help="The run id: letters, digits, '.', '_', '-'. Default: a new sortable id.",
        show_default=False,
    ),
]

MaxSteps = Annotated[
    int | None,
    typer.Option(
        "--max-steps",
        metavar="N",
        min=1,
        max=1_000_000_000,  # the library's bound too
        help="The step budget, 1 to 1,000,000,000 (default: the agent's).",
        show_default=False,
    ),
]


def command(
    target: Target,
    goal: Goal = None,
    run_id: NewRunId = None,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    max_steps: MaxSteps = None,
    input_files: options.Inputs = None,
    json: options.Json = False,
    otel: telemetry.Otel = False,
) -> None:
    """Start a new run of the agent at TARGET, with its log in DIR/ID.jsonl.

    Prints the run id first (keep it: resume, inspect and mark-resolved need
    only the id), then the final answer. The target and its arguments are
    recorded in the log, so `polyloop resume ID` can continue the run after a
    crash. A run id that already has a log is refused: continue that run
    with `polyloop resume`. Each `--input NAME=PATH` (a file or a directory)
    is fingerprinted (SHA-256) with the agent's logic version and
    configuration; resume refuses (exit 4) when any of them changed.

    Exit: 0 finished (final answer, or step budget spent), 1 the run ended in
    an error, 2 bad input (target, id, flags), 3 an unknown `never` action
    or an alert (a failed verification no rollback undid) needs an operator
    (the mark-resolved commands are printed), 5 stopped, resumable: the model
    stayed unavailable past the run's retry budget (resume it later), 130
    interrupted (the run stays resumable). Every failed verification also prints an ALERT line on stderr.
    With --json, stdout is one document: the run as `inspect --json` shows
    it once the command ends (also when it stopped or failed), with
    `exit_code` and `error`; everything else goes to stderr. --otel sends
    the run's spans and metrics to OpenTelemetry (its trace context is
    recorded in the log, so a resume continues the same trace).

    \b
    Example:
      polyloop run examples/demo.py:agent --run-id demo --goal "write up the notes"
      polyloop run agent.py:agent --goal "review it" --input contract=data/contract.pdf
    """
    with failures(Scope(json=json, resumable=True)) as scope:
        scope.directory = where = options.where(directory, store_url)
        rid = check_run_id(run_id) if run_id is not None else new_run_id()
        options.utf8(target, "TARGET")
        options.utf8(goal, "--goal")
        given = options.inputs(input_files)
        if not options.is_url(where) and JsonlStore(where).exists(rid):
            raise RunExistsError(rid)  # before the target is imported and an id announced
        agent = load_target(target)  # fail on a bad target before announcing a run id
        scope.run_id = rid
        if json:
            documents.on_failure(scope, "run", where, rid)
        log = JsonlStore(where).path(rid) if not options.is_url(where) else f"{paste.place(where)} run {rid}"
        with documents.quiet(json), outage_view.notices(), telemetry.telemetry(otel) as traced:
            run_view.run_begins(rid, log)
            result = asyncio.run(_run(where, target, goal or "", rid, max_steps, agent, given, traced))
            run_view.run_result(result)
        documents.ran(json, "run", where, result, code := result_code(result.reason))
    raise typer.Exit(code)


async def _run(
    where: str, target: str, goal: str, run_id: str, max_steps: int | None, agent: Agent, inputs: dict[str, str] | None,
    traced: telemetry.Wrap,
) -> RunResult:
    async with open_store(where) as store:
        return await run_target(
            target, goal=goal, store=traced(store), run_id=run_id, max_steps=max_steps, agent=agent, inputs=inputs,
            on_alert=alerts.AlertLines(),
        )
