"""`polyloop mark-resolved`: an operator settles an unknown `never` action, an alert or an unknown rollback."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated

import typer

from polyloop import Recovery, RunReport
from polyloop.for_cli import read_regular, resolve  # the library's one refusal of a FIFO, device or socket
from polyloop.stores import open_store

from . import documents, options, waits_view
from .complete import waiting_ids
from .errors import BadInput, failures
from .scope import Scope


ResultId = Annotated[
    str,
    typer.Argument(
        metavar="RESULT_ID",
        help="What waits: an unknown action or rollback, or an alert, e.g. s3-a1 (see `polyloop inspect`).",
        show_default=False,
        autocompletion=waiting_ids,
    ),
]

Executed = Annotated[
    bool, typer.Option("--executed", help="It happened: resume reuses the observation.")
]

NotExecuted = Annotated[
    bool, typer.Option("--not-executed", help="It did not happen: resume runs it again.")
]

Observation = Annotated[
    str | None,
    typer.Option("--observation", metavar="TEXT", help="With --executed: what the action returned (default: empty).", show_default=False),
]

ObservationFile = Annotated[
    Path | None,
    typer.Option(
        "--observation-file",
        metavar="PATH",
        help="With --executed: read the observation from a regular UTF-8 file ('-' for stdin).",
        show_default=False,
    ),
]

Reason = Annotated[
    str,
    typer.Option("--reason", metavar="TEXT", help="Why you decided so (recorded). Required.", show_default=False),
]


def command(
    run_id: options.RunId,
    result_id: ResultId,
    reason: Reason,
    executed: Executed = False,
    not_executed: NotExecuted = False,
    observation: Observation = None,
    observation_file: ObservationFile = None,
    by: options.By = None,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    json: options.Json = False,
) -> None:
    """Settle RESULT_ID, an unknown `never` action, an alert or an unknown rollback of run ID.

    Use it when resume stopped (exit 3) because the process died after an
    action's intent and before its result: PolyLoop cannot know whether the
    action happened, and will not guess. Check the world (did the email go
    out? is the file there?), then record your verdict. It is written as a
    durable `resolution` record with who (--by, default user@host), when and why; the log
    is otherwise left as it is. Then `polyloop resume ID`: with --executed it
    reuses the observation, with --not-executed it runs the action again
    (with the same idempotency key).

    An alert (a guarded action whose verification failed and that no
    rollback undid) is settled the same way: --executed means the effect
    stands, --not-executed that it has none; the action is never run again.
    An unknown rollback (s3-r1): --executed means it undid the action,
    --not-executed that it did not (resume runs the rollback again).

    It then prints what resume will do, as `polyloop inspect` says it (a
    changed input, logic version or product: resume refuses, exit 4).

    Exit: 0 recorded; 2 refused - RESULT_ID is not an unknown action, an
    alert or an unknown rollback of the run waiting for a person, the run is unknown, finished or held by a live
    process, the flags are wrong, --reason is missing, or --reason or --by is given blank
    or as a bare placeholder (TEXT, NAME). With --json, stdout is one
    document: the run as `inspect --json` shows it after, and `settled`. Nothing is written when it refuses.

    \b
    Example:
      polyloop mark-resolved demo s2-a1 --executed --observation "wrote 188 bytes" --reason "the file is there"
      polyloop mark-resolved demo s2-a1 --not-executed --reason "no notes.txt"
    """
    with failures(Scope(json=json, run_id=run_id)) as scope:
        scope.directory = where = options.where(directory, store_url)
        if executed and not_executed:
            raise BadInput("pass --executed or --not-executed, not both")
        if not executed and not not_executed:
            raise BadInput("say what happened: pass --executed or --not-executed")
        if observation is not None and observation_file is not None:
            raise BadInput("pass --observation or --observation-file, not both")
        if not_executed and (observation is not None or observation_file is not None):
            raise BadInput("an observation goes only with --executed")
        options.utf8(observation, "--observation")
        options.utf8(reason, "--reason")
        options.utf8(by, "--by")
        text = _read(observation_file) if observation_file is not None else observation
        recovery, report = asyncio.run(_resolve(where, run_id, result_id, executed, text, reason, by))
        if json:
            r = recovery.resolutions[-1]
            documents.settled("mark-resolved", report, id=result_id, decision=r.outcome, by=r.by, reason=r.reason)
        else:
            waits_view.resolved(run_id, result_id, executed, recovery, report, where)
    raise typer.Exit(0)


async def _resolve(
    where: str, run_id: str, result_id: str, executed: bool, text: str | None, reason: str | None, by: str | None
) -> tuple[Recovery, RunReport]:
    async with open_store(where) as store:
        settled = await resolve(store, run_id, result_id, executed=executed, observation=text, reason=reason, by=by)
        # The next line is inspect's, from the log read once: the planner's move judged
        # against the checkpoint, as resume judges it.
        return settled.recovery, await settled.report(store)


def _read(path: Path) -> str:
    try:
        data = sys.stdin.buffer.read() if str(path) == "-" else read_regular(path)
        return data.decode("utf-8")
    except OSError as exc:
        raise BadInput(f"cannot read the observation file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise BadInput(f"the observation file {path} is not UTF-8: {exc}") from exc
