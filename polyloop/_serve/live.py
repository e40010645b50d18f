"""Server-sent events: the pages learn that what they show has moved, and redraw.

A run page follows its run's log through the store's follow seam (what
`polyloop watch` reads: only what is new, never a lock), and says `moved`
with the log's new length whenever records land past the length the page
was drawn from, or `corrupt` when a log the page was drawn from soundly is
no longer sound (a page drawn from a corrupt log never reloads). The runs
page is told `moved` when the list `polyloop ls` would print changes. A
comment line every few seconds keeps the connection open through proxies;
the browser reconnects by itself.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from polyloop import CorruptLogError, InvalidRunIdError, PolyLoopError, RunSummary, list_runs
from polyloop.stores._follow import follower

from .access import Session
from .console import Console
from .filters import chosen

POLL = 0.3  # seconds between looks at a run's log
LIST_POLL = 2.0  # seconds between looks at the runs
KEEPALIVE = 15.0


def _stream(events: AsyncIterator[str]) -> Response:
    return StreamingResponse(events, media_type="text/event-stream", headers={"X-Accel-Buffering": "no"})


async def run_events(request: Request, console: Console, session: Session) -> Response:
    """`moved` (data: the log's length) each time records land in the run's log after `seen`."""
    run_id = request.path_params["run_id"]
    try:
        seen = int(request.query_params.get("seen", "0"))
    except ValueError:
        seen = 0
    drawn_corrupt = request.query_params.get("drawn") == "corrupt"

    try:
        tail = follower(console.store, run_id)
    except InvalidRunIdError as exc:
        return console.page("refused.html", 404, title="No such run", why=str(exc), session=session)

    async def events() -> AsyncIterator[str]:
        count, quiet, read = 0, 0.0, False
        yield "retry: 1000\n\n"
        while not await request.is_disconnected():
            try:
                if not drawn_corrupt:
                    count += len(await tail.more())
                    read = True
            except CorruptLogError:
                # The page was drawn from a sound log, so it became corrupt since, even before this
                # stream's first look: the page redraws to say so. A page drawn from a corrupt log
                # reads it no more and never reloads (that would be a loop).
                yield "event: moved\ndata: corrupt\n\n"
                return
            except PolyLoopError:
                pass  # unreadable for a moment: its length is unknown, so nothing is said
            if read and count != seen:
                seen_now = count
                yield f"event: moved\ndata: {seen_now}\n\n"
                return  # the page redraws and opens a new stream from its new length
            quiet += POLL
            if quiet >= KEEPALIVE:
                quiet = 0.0
                yield ": still here\n\n"
            await asyncio.sleep(POLL)

    return _stream(events())


def runs_seen(found: Sequence[RunSummary]) -> str:
    """A short digest of the runs' list as a page draws it (status, steps, last activity, what waits)."""
    shown = repr([(s.run_id, s.status, s.steps, s.updated, s.waiting) for s in found])
    return hashlib.blake2b(shown.encode(), digest_size=8).hexdigest()


async def runs_events(request: Request, console: Console, session: Session) -> Response:
    """`moved` as soon as the runs' list differs from the one the page was drawn from (`seen`).

    The page passes the digest of what it drew, so a run that appears between
    the page's drawing and this stream's first look still moves the page.
    """
    q = request.query_params
    seen = q.get("seen")

    def snapshot() -> str:
        return runs_seen(list_runs(console.where, workers=1, **chosen(q)))

    async def events() -> AsyncIterator[str]:
        yield "retry: 2000\n\n"
        try:
            drawn = seen or await asyncio.to_thread(snapshot)
        except Exception:  # noqa: BLE001 - the page itself says what is wrong with the filter or the store
            return
        while not await request.is_disconnected():
            try:
                now = await asyncio.to_thread(snapshot)
            except Exception:  # noqa: BLE001 - a store unavailable for a moment: look again
                now = drawn
            if now != drawn:
                yield "event: moved\ndata: runs\n\n"
                return
            await asyncio.sleep(LIST_POLL)

    return _stream(events())
