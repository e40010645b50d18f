"""The console's routes, and the checks every request passes before any page or decision.

Every response carries a strict Content-Security-Policy (scripts and styles
only from the console itself, no inline script, no framing), `nosniff`, no
referrer (the token URL never leaks) and `no-store`. Every request must
name this console as its `Host` (a page of another site resolving its name
to 127.0.0.1 — DNS rebinding — is refused), carry a session cookie (opened
by the token URL), and every state-changing request must carry the
session's CSRF token **and** an `Origin` that is this console's own.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import acts, live, pages
from .access import COOKIE, Session
from .console import Console

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
MAX_FORM = 1 << 20  # bytes: a form larger than this is refused


class SecurityHeaders:
    """Pure ASGI middleware: the security headers on every response (pages, static files, events)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, sending)


Handler = Callable[[Request, Console, Session], Awaitable[Response]]


def guarded(console: Console, handler: Handler, *, writes: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """`handler` behind the checks: Host, session, and for `writes` the Origin and the CSRF token."""

    async def endpoint(request: Request) -> Response:
        if not console.host_ok(request.headers.get("host", "")):
            return console.page("refused.html", 421, title="Wrong host", why=(
                "this console answers only to its own address (127.0.0.1 or localhost and its port)"))
        token = request.query_params.get("token")
        if token is not None and request.method == "GET":
            return _sign_in(request, console, token)
        session = console.gate.session(request.cookies.get(COOKIE))
        if session is None:
            return console.page("signin.html", 401, title="Sign in")
        if writes:
            refused = await _write_refusal(request, console, session)
            if refused is not None:
                return refused
        return await handler(request, console, session)

    return endpoint


def _sign_in(request: Request, console: Console, token: str) -> Response:
    sid = console.gate.sign_in(token)
    if sid is None:
        return console.page("signin.html", 403, title="Sign in", wrong=True)
    response = RedirectResponse(request.url.path, status_code=303)  # the token leaves the address bar
    response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    return response


async def _write_refusal(request: Request, console: Console, session: Session) -> Response | None:
    """Why this state-changing request is refused (a page), or None when it may go on."""
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    if origin != own:
        return console.page("refused.html", 403, title="Refused", why=(
            f"the request comes from {origin or 'a page that does not say where it is'}, not from this console "
            f"({own}): nothing was written"))
    if not session.can_decide:
        return console.page("refused.html", 403, title="Read-only", why=(
            "this session is read-only: it sees everything and can decide nothing; nothing was written"))
    form = await read_form(request)
    if form is None:
        return console.page("refused.html", 413, title="Refused", why="the form is too large: nothing was written")
    request.state.form = form
    if not hmac.compare_digest(form.get("csrf", "").encode(), session.csrf.encode()):
        return console.page("refused.html", 403, title="Refused", why=(
            "the form does not carry this session's CSRF token (it was drawn for another session, or "
            "by another site): nothing was written; reload the page"))
    return None


async def read_form(request: Request) -> dict[str, str] | None:
    """An `application/x-www-form-urlencoded` body as a dict (last value wins), None when too large.

    Parsed here with the standard library, so the console needs no multipart parser: its forms
    post nothing else."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            return None
    pairs = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[-1] for k, v in pairs.items()}


def build(console: Console) -> ASGIApp:
    """The ASGI application: pages, decisions, events, static files, behind the checks."""
    routes = [
        Route("/", guarded(console, pages.runs)),
        Route("/runs/{run_id}", guarded(console, pages.run)),
        Route("/runs/{run_id}/decide", guarded(console, acts.decide, writes=True), methods=["POST"]),
        Route("/events", guarded(console, live.runs_events)),
        Route("/runs/{run_id}/events", guarded(console, live.run_events)),
        Mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static"),
    ]
    return SecurityHeaders(Starlette(routes=routes))
