"""The console's pages: the runs (what `polyloop ls` lists) and a run (what `polyloop inspect` says, with forms)."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from polyloop import (
    InvalidInputError, InvalidRunIdError, PolyLoopError, RunNotFoundError, RunReport, StoreError, inspect_run,
    list_runs,
)
from polyloop._log import commands
from polyloop._log.who import settled_by
from polyloop._operate.accept import changes_sha256, pending_changes
from polyloop._run.validity import explain
from polyloop.stores._place import place_of

from .access import Session
from .console import Console
from .filters import STATUSES, BadFilter, chosen, shown
from .live import runs_seen
from .views import run_view, runs_view


async def runs(request: Request, console: Console, session: Session) -> Response:
    """The runs, most recent activity first, with `ls`'s filters: `status`, `since`, `target`, `batch`, `limit`."""
    q = request.query_params
    try:
        found = await asyncio.to_thread(list_runs, console.where, workers=1, **chosen(q))
    except (BadFilter, InvalidInputError, ValueError) as exc:
        return console.page("refused.html", 400, title="Bad filter", why=str(exc), session=session)
    except (StoreError, OSError) as exc:
        return console.page("refused.html", 503, title="Store unavailable", why=str(exc), session=session)
    return console.page("runs.html", title="Runs", rows=runs_view(found), session=session, statuses=STATUSES,
                        filters=shown(q),
                        events="/events?" + urlencode([*((k, v) for k, v in q.multi_items() if k != "seen"),
                                                       ("seen", runs_seen(found))]))


async def run(request: Request, console: Console, session: Session) -> Response:
    """One run: its steps and executions, what waits (with the forms to decide it), what resume would do."""
    run_id = request.path_params["run_id"]
    try:
        report = await inspect_run(console.store, run_id, validity=True)
    except (InvalidRunIdError, RunNotFoundError) as exc:
        return console.page("refused.html", 404, title="No such run", why=str(exc), session=session)
    except StoreError as exc:
        return console.page("refused.html", 503, title="Store unavailable", why=str(exc), session=session)
    accept = await _acceptance(console, report) if session.can_decide else None
    return console.page("run.html", title=f"Run {run_id}", session=session, run_id=run_id, accept=accept,
                        by=session.who.name or settled_by(None),
                        events=f"/runs/{run_id}/events?seen={len(report.records)}"
                               + ("&drawn=corrupt" if report.status == "corrupt" else ""),
                        commands=_commands(console, run_id), **run_view(report.to_json(), len(report.records)))


async def _acceptance(console: Console, report: RunReport) -> dict[str, Any] | None:
    """The "Accept these changes" form of a stopped run resume refuses for changes: what it accepts, or why not.

    The changes listed are the ones `accept_changes` computes (resume's own computation), and the
    form carries their SHA-256: what the person accepts is what the page showed, or nothing."""
    validity = report.validity or {}
    if report.status not in ("resumable", "needs_operator") or not (report.refusal or validity.get("differences")):
        return None
    try:
        changes = await pending_changes(console.store, report.run_id, report.records)  # the log the page shows
    except PolyLoopError as exc:
        return {"changes": [], "why": str(exc)}
    return {"changes": [explain(d) for d in changes], "sha256": changes_sha256(changes)}


def _commands(console: Console, run_id: str) -> dict[str, Any]:
    """The commands a person pastes for what the console does not do (resume, lift a crash loop) or also does."""
    place = place_of(console.where)
    return {"resume": commands.resume(run_id, place), "accept": commands.accept_changes(run_id, place),
            "crash_loop": commands.accept_crash_loop(run_id, place), "inspect": commands.inspect(run_id, place)}
