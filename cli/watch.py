"""`polyloop watch` (and `inspect --follow`): follow a run live until it finishes or stops."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated, Any

import orjson
import typer

from polyloop import RunNotFoundError, RunReport, WatchEvent, encode_record, watch_run
from polyloop.stores import open_store

from . import options, terminal, watch_view
from .errors import BadInput, CHECKPOINT_INVALID, FAILURE, NEEDS_OPERATOR, UNAVAILABLE, failures, result_code
from .scope import Scope

from .documents import SCHEMA  # of each `watch --json` line (docs/reference/json.md)
BACKLOG = 10  # records already in the log that the first lines show (--all: every one)

Wait = Annotated[
    bool,
    typer.Option("--wait", help="If the run has no log yet, wait for it to start instead of failing (exit 2)."),
]


def command(
    run_id: options.RunId,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    wait: Wait = False,
    all_records: Annotated[
        bool, typer.Option("--all", help="Show every record already in the log (the default shows the last 10).")
    ] = False,
    json: Annotated[
        bool, typer.Option("--json", help="One JSON document per line: each event, then how the run ended.")
    ] = False,
) -> None:
    """Follow run ID live: each model call, action and step as it lands, until it ends.

    Shows the last records already in the log, then each new one as it is
    written: model calls and what the model answered, actions with their
    replay policy while in flight and their outcome once recorded, steps,
    requests for a person, and who holds the run. It ends when the run
    finishes, or stops (its process or worker is gone, or it waits for a
    person), with the run's status as `inspect` gives it and the commands
    for whatever waits. On a terminal the view is redrawn in place; in a
    pipe or a file each event is one line, flushed as it happens. The log
    is polled (JSONL: from the last complete line; PostgreSQL: by row
    position), never locked: watching never slows or stops the run.

    Exit: 0 the run finished (final answer or step budget); 1 it finished
    in an error, stopped unfinished (resume continues it) or its log is
    corrupt; 2 unknown run id (without --wait); 3 it waits for a person; 4
    its checkpoint is no longer valid; 5 it stopped because its model stayed
    unavailable (resume tries again); 130 interrupted (Ctrl-C; the run
    itself goes on).

    \b
    Example:
      polyloop watch demo
      polyloop watch demo --wait --store postgresql://postgres@127.0.0.1/test
    """
    raise typer.Exit(follow(run_id, directory, store_url, wait=wait, all_records=all_records, json=json))


def follow(
    run_id: str, directory: str | None, store_url: str | None, *, wait: bool, all_records: bool, json: bool
) -> int:
    """Watch the run; the exit code of how it ended (shared with `inspect --follow`)."""
    with failures(Scope(json=json, json_lines=True, run_id=run_id)) as scope:
        scope.directory = where = options.where(directory, store_url)
        live = not json and sys.stdout.isatty()
        try:
            report = asyncio.run(_watch(where, run_id, wait=wait, backlog=None if all_records else BACKLOG,
                                        live=live, json=json))
        except RunNotFoundError as exc:
            raise BadInput(f"{exc} (--wait waits for it to start)") from exc
        return ending_code(report)
    return FAILURE  # pragma: no cover - failures() always raises typer.Exit


async def _watch(where: str, run_id: str, *, wait: bool, backlog: int | None, live: bool, json: bool) -> RunReport:
    async with open_store(where) as store:
        events = watch_run(store, run_id, wait=wait)
        if json:
            return await _json_lines(events)
        if live:
            with watch_view.LiveView(run_id, where) as view:
                report = await _shown(events, view.show, backlog, run_id)
        else:
            report = await _shown(events, watch_view.plain, backlog, run_id)
        watch_view.ending(report, where)
        return report


async def _shown(events: Any, show: Any, backlog: int | None, run_id: str) -> RunReport:
    """Show each event (of the backlog, only the last `backlog` records); the report of the end."""
    held: list[WatchEvent] = []
    async for event in events:
        if event.kind == "record" and event.backlog:
            held.append(event)
            continue
        if held:
            _show_backlog(held, show, backlog, run_id)
            held = []
        if event.kind == "end":
            assert event.report is not None
            return event.report
        show(event)
    raise AssertionError("watch_run ends with an end event")  # pragma: no cover


def _show_backlog(held: list[WatchEvent], show: Any, backlog: int | None, run_id: str) -> None:
    if backlog is not None and len(held) > backlog:
        watch_view.backlog_note(terminal.out(), len(held) - backlog, run_id)
        held = held[-backlog:]
    for event in held:
        show(event)


async def _json_lines(events: Any) -> RunReport:
    async for event in events:
        if event.kind == "end":
            assert event.report is not None
            doc = event.report.to_json()
            terminal.print_json({"schema": SCHEMA, "event": "end", "code": ending_code(event.report), "report": doc}, lines=True)
            return event.report
        terminal.print_json(event_json(event), lines=True)
    raise AssertionError("watch_run ends with an end event")  # pragma: no cover


def event_json(event: WatchEvent) -> dict[str, Any]:
    """One event of `watch --json` (docs/reference/json.md)."""
    doc: dict[str, Any] = {"schema": SCHEMA, "event": event.kind}
    if event.kind == "record" and event.record is not None:
        doc.update(index=event.index, backlog=event.backlog, record=orjson.loads(encode_record(event.record)),
                   in_flight=[i.result_id for i in event.in_flight])
    if event.kind in ("held", "released"):
        doc["holder"] = event.holder
    return doc


def ending_code(report: RunReport) -> int:
    """The exit code of a watch that saw the run end as `report` says."""
    if report.status == "finished":
        rec = report.recovery
        return result_code(rec.finished.reason) if rec is not None and rec.finished is not None else FAILURE
    if report.refusal is not None:
        return CHECKPOINT_INVALID
    if report.status == "needs_operator":
        return NEEDS_OPERATOR
    rec = report.recovery
    if report.status == "resumable" and rec is not None and rec.stopped is not None:
        return UNAVAILABLE  # stopped on an outage: `resume` tries again
    return FAILURE
