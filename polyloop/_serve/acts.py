"""The console's decisions: each one library call, bound to what the person saw.

A form carries what it was drawn from: the request's args hash
(`expect_sha256`) and the log's length (`seen`). The library refuses, under
the run's lock, a decision on arguments other than the ones shown, or on
something the log changed since (another tab, the command line, another
operator decided first; the run finished): `DecisionError` /
`ResolutionError` with what happened, shown to the person. Nothing here
re-implements a decision: `decide`, `resolve` and `cancel` are what
`polyloop approve`, `deny`, `answer`, `mark-resolved` and `cancel` run;
`accept_changes` writes what `polyloop resume --accept-changes` writes, from
the same computation of the changes, bound to the changes the form listed
(their SHA-256) and the log position.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from polyloop import InvalidInputError, PolyLoopError, RunActiveError, cancel
from polyloop._log import commands
from polyloop._log.records import CheckpointAccepted
from polyloop._operate.accept import accept_changes
from polyloop._operate.decide import decide as decide_request
from polyloop._operate.resolve import resolve
from polyloop._run.validity import explain
from polyloop.stores._place import place_of

from .access import Session
from .console import Console

ACTIONS = ("approve", "approve_edited", "deny", "answer", "executed", "not_executed", "cancel", "accept_changes")


class _Bad(Exception):
    """The form itself is wrong (a missing field, arguments that are not a JSON object)."""


class _Nothing(Exception):
    """The decision had nothing left to act on (a cancel of a run that had finished): nothing was written."""


async def decide(request: Request, console: Console, session: Session) -> Response:
    """Carry out the form's `action` on run `run_id`; a page with what was recorded, or why nothing was."""
    run_id = request.path_params["run_id"]
    form: dict[str, str] = request.state.form
    action = form.get("action", "")
    target = form.get("id", "")
    try:
        if action not in ACTIONS:
            raise _Bad(f"no action {action!r}")
        said = await _carry_out(console, session, run_id, action, form)
    except (_Bad, InvalidInputError) as exc:
        return console.page("refused.html", 400, title="Refused", why=f"{exc}: nothing was written",
                            session=session, run_id=run_id)
    except _Nothing as exc:
        return console.page("refused.html", 409, title="Refused", why=f"{exc}. Nothing was written.",
                            session=session, run_id=run_id)
    except RunActiveError as exc:
        return console.page("refused.html", 409, title="Refused", why=f"{exc}: nothing was written",
                            session=session, run_id=run_id)
    except PolyLoopError as exc:
        return console.page("refused.html", 409, title="Refused", why=f"{exc}. Nothing was written.",
                            session=session, run_id=run_id)
    return console.page("done.html", title="Recorded", session=session, run_id=run_id, target=target, **said)


async def _carry_out(
    console: Console, session: Session, run_id: str, action: str, form: dict[str, str]
) -> dict[str, Any]:
    """The one library call `action` is; what to tell the person."""
    by = session.who.name  # None: the library's default, the OS user@host of whoever started the console
    reason = form.get("reason") or None
    if action == "cancel":
        outcome = await cancel(console.store, run_id, reason=reason or "", by=by)
        if outcome.outcome == "already_finished":
            raise _Nothing(f"nothing to cancel: run {run_id} had already finished ({outcome.reason}, "
                           f"{outcome.steps} steps)")
        if outcome.outcome == "requested":
            return {"what": "cancel requested", "by": outcome.by, "next": None, "recorded": (
                f"asked of the process that holds it ({outcome.holder or 'another process'}); it ends as "
                "cancelled at its next safe point, before its next model call")}
        return {"what": "cancel: cancelled", "by": outcome.by, "next": None}
    if action == "accept_changes":
        return await _accept(console, run_id, form, reason=reason, by=by)
    target, seen = _field(form, "id"), _seen(form)
    if action in ("executed", "not_executed"):
        settled = await resolve(console.store, run_id, target, executed=action == "executed", seen=seen,
                                observation=form.get("observation") if action == "executed" else None,
                                reason=reason, by=by)
    else:
        kind = {"approve": "approved", "approve_edited": "approved", "deny": "denied", "answer": "answered"}[action]
        settled = await decide_request(
            console.store, run_id, target, kind, reason=reason, by=by, seen=seen,  # type: ignore[arg-type]
            args=_edited(form) if action == "approve_edited" else None,
            answer=form.get("answer") if kind == "answered" else None,
            expect_sha256=_field(form, "sha256") if kind != "answered" else None)
    report = await settled.report(console.store)
    last = settled.records[-1]
    return {"what": f"{action.replace('_', ' ')} {target}", "by": getattr(last, "by", None), "next": report.next}


async def _accept(console: Console, run_id: str, form: dict[str, str], *, reason: str | None,
                  by: str | None) -> dict[str, Any]:
    """Accept the run's changed checkpoint on the record, as the form showed it; the resume command next."""
    settled = await accept_changes(console.store, run_id, reason=reason or "", by=by, seen=_seen(form),
                                   expect_sha256=_field(form, "sha256"))
    record = settled.records[-1]
    assert isinstance(record, CheckpointAccepted)
    report = await settled.report(console.store)
    changes = "; ".join(explain(d) for d in record.differences)
    return {"what": "accept changes", "by": record.by, "next": report.next,
            "resume": commands.resume(run_id, place_of(console.where)),
            "recorded": f"checkpoint_accepted of {len(record.differences)} change(s) written to the log, "
                        f"with the reason {record.reason!r}: {changes}. Nothing ran: the next resume compares "
                        "against them and continues without --accept-changes"}


def _field(form: dict[str, str], name: str) -> str:
    value = form.get(name, "")
    if not value:
        raise _Bad(f"the form has no {name}")
    return value


def _seen(form: dict[str, str]) -> int:
    seen = _field(form, "seen")
    if not (seen.isascii() and seen.isdigit()):
        raise _Bad(f"the form's log position {seen!r} is not a count of records")
    return int(seen)


def _edited(form: dict[str, str]) -> dict[str, Any]:
    try:
        args = orjson.loads(_field(form, "args"))
    except orjson.JSONDecodeError as exc:
        raise _Bad(f"the edited arguments are not JSON ({exc})") from None
    if not isinstance(args, dict):
        raise _Bad("the edited arguments must be a JSON object")
    return args
