"""`polyloop approve`, `deny` and `answer`: a person decides a tool call that waits (log format 1.2)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import orjson
import typer

from polyloop import Recovery, RunReport
from polyloop.for_cli import decide
from polyloop.stores import open_store

from . import documents, options, waits_view
from .complete import waiting_ids
from .errors import BadInput, failures
from .scope import Scope

RequestId = Annotated[
    str,
    typer.Argument(
        metavar="REQUEST_ID",
        help="What waits: the id of an approval request or a question, e.g. s3-a1 (see `polyloop inspect`).",
        show_default=False,
        autocompletion=waiting_ids,
    ),
]
Reason = Annotated[
    str,
    typer.Option("--reason", metavar="TEXT", help="Why you decided so (recorded). Required.", show_default=False),
]
ExpectSha = Annotated[
    str | None,
    typer.Option(
        "--expect-sha256",
        metavar="HEX",
        help="Refuse unless the request's arguments hash to this (the args sha256 `inspect` shows): "
        "decide exactly what you reviewed.",
        show_default=False,
    ),
]


def approve_command(
    run_id: options.RunId,
    request_id: RequestId,
    reason: Reason,
    by: options.By = None,
    args: Annotated[
        str | None,
        typer.Option("--args", metavar="JSON", help="Run these arguments (a JSON object) instead of the "
                     "model's; recorded as edited.", show_default=False),
    ] = None,
    expect_sha256: ExpectSha = None,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    json: options.Json = False,
) -> None:
    """Approve REQUEST_ID of run ID: resume then runs the tool call, intent first.

    The decision is written as a durable `decision` record: who (--by), when,
    why (--reason) and the SHA-256 of the exact arguments approved. With
    --args the action runs with your edited arguments instead (recorded as
    such; checked against the tool's schema on resume, before anything runs).
    Under the run's lock: of two deciders at once exactly one is recorded.

    It then prints what resume will do, as `polyloop inspect` says it: if
    an input, the logic version or a product changed since the run started,
    that resume refuses (exit 4) and how to accept the change.

    Exit: 0 recorded; 2 refused - REQUEST_ID is not a request the run waits
    for (unknown, already decided, a question), the run is unknown, finished
    or held by a live process, --expect-sha256 differs, --args is not a
    JSON object, or --reason or --by is blank (only whitespace or control
    characters). Nothing is written when it refuses.

    \b
    Example:
      polyloop approve demo s2-a1 --reason "amount checked with finance"
      polyloop approve demo s2-a1 --reason "cap it" --args '{"amount": 100, "to": "acme"}'
    """
    with failures(Scope(json=json, run_id=run_id)) as scope:
        scope.directory = where = options.where(directory, store_url)
        _text(reason, "--reason", by)
        edited = _json_object(args) if args is not None else None
        recovery, report = asyncio.run(_run(where, "approved", run_id, request_id, reason=reason, by=by, args=edited,
                                            expect_sha256=expect_sha256))
        _show(json, run_id, request_id, recovery, report, where)
    raise typer.Exit(0)


def deny_command(
    run_id: options.RunId,
    request_id: RequestId,
    reason: Reason,
    by: options.By = None,
    expect_sha256: ExpectSha = None,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    json: options.Json = False,
) -> None:
    """Deny REQUEST_ID of run ID: nothing of the tool call ever runs.

    The decision is written as a durable `decision` record (who, when, why).
    On resume the model reads "denied by NAME: REASON" as the call's
    observation, and the run goes on.

    Exit: 0 recorded; 2 refused (as for `approve`). Nothing is written when it refuses.

    \b
    Example:
      polyloop deny demo s2-a1 --reason "not to this account"
    """
    with failures(Scope(json=json, run_id=run_id)) as scope:
        scope.directory = where = options.where(directory, store_url)
        _text(reason, "--reason", by)
        recovery, report = asyncio.run(_run(where, "denied", run_id, request_id, reason=reason, by=by,
                                            expect_sha256=expect_sha256))
        _show(json, run_id, request_id, recovery, report, where)
    raise typer.Exit(0)


def answer_command(
    run_id: options.RunId,
    request_id: RequestId,
    text: Annotated[str, typer.Argument(metavar="TEXT", help="The answer the model reads.", show_default=False)],
    by: options.By = None,
    reason: Annotated[
        str | None,
        typer.Option("--reason", metavar="TEXT", help="An optional note (recorded).", show_default=False),
    ] = None,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    json: options.Json = False,
) -> None:
    """Answer REQUEST_ID, a question the model asked with `ask_human` in run ID.

    The answer is written as a durable `decision` record (who, when, the
    text). On resume the model reads TEXT as the question's observation. It
    is asked once: after any later crash the recorded answer is reused.

    Exit: 0 recorded; 2 refused - REQUEST_ID is not a question the run waits
    for (unknown, already answered, an approval), the run is unknown, finished
    or held by a live process, or --reason or --by is given blank. Nothing is
    written when it refuses.

    \b
    Example:
      polyloop answer demo s3-a1 "use the staging account"
    """
    with failures(Scope(json=json, run_id=run_id)) as scope:
        scope.directory = where = options.where(directory, store_url)
        _text(text, "TEXT", by)
        options.utf8(reason, "--reason")
        recovery, report = asyncio.run(_run(where, "answered", run_id, request_id, answer=text, by=by, reason=reason))
        _show(json, run_id, request_id, recovery, report, where)
    raise typer.Exit(0)


async def _run(where: str, kind: str, run_id: str, request_id: str, **kwargs: Any) -> tuple[Recovery, RunReport]:
    async with open_store(where) as store:
        settled = await decide(store, run_id, request_id, kind, **kwargs)
        # The next line is inspect's, from the log read once: the planner's move judged
        # against the checkpoint, as resume judges it.
        return settled.recovery, await settled.report(store)


def _show(json: bool, run_id: str, request_id: str, recovery: Recovery, report: RunReport, where: str) -> None:
    if not json:
        waits_view.decided(run_id, request_id, recovery, report, where)
        return
    r = recovery.request_of(request_id)
    d = r.decision if r is not None else None
    assert d is not None
    command = {"approved": "approve", "denied": "deny"}.get(d.decision, "answer")
    documents.settled(command, report, id=request_id, decision=d.decision, by=d.by, reason=d.reason)


def _text(value: str, flag: str, by: str | None) -> None:
    # Only what argv alone can get wrong; a blank --reason or --by is the library's to refuse.
    options.utf8(value, flag)
    options.utf8(by, "--by")


def _json_object(text: str) -> dict[str, Any]:
    options.utf8(text, "--args")
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadInput(f"--args is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadInput(f"--args must be a JSON object, not {type(value).__name__}")
    return value
