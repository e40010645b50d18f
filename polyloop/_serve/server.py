"""The `polyloop serve` process: bind, say where to sign in (once), serve until stopped."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable

import uvicorn

from polyloop.stores import open_store
from polyloop.stores._url import redact_url, store_kind

from .access import Gate, Operator, read_users
from .app import build
from .console import Console, templates
from .setup import Options, is_loopback


def serve(options: Options, say: Callable[[str], None]) -> None:
    """Serve the console until interrupted; `say` prints the lines a person reads (the sign-in URL once)."""
    users = read_users(options.users) if options.users else None
    token = None if users else secrets.token_urlsafe(32)
    family = socket.AF_INET6 if ":" in options.host.strip("[]") else socket.AF_INET
    sock = _listening(family, options.host.strip("[]"), options.port)
    try:
        _serve_on(sock, family, options, token, users, say)
    finally:
        sock.close()


def _listening(family: socket.AddressFamily, host: str, port: int) -> socket.socket:
    """A socket bound to `host:port` (closed again when it cannot be)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _serve_on(sock: socket.socket, family: socket.AddressFamily, options: Options, token: str | None,
              users: list[Operator] | None, say: Callable[[str], None]) -> None:
    port = sock.getsockname()[1]
    console = Console(where=options.where, store=open_store(options.where),
                      gate=Gate(token=token, users=users, read_only=options.read_only),
                      allow_remote=options.allow_remote, port=port, templates=templates())
    shown = f"[{options.host.strip('[]')}]" if family == socket.AF_INET6 else options.host
    base = f"http://{'127.0.0.1' if options.host in ('0.0.0.0', '::') else shown}:{port}/"
    shown_store = redact_url(options.where) if store_kind(options.where) == "postgresql" else options.where
    say(f"polyloop console for {shown_store} on {base}" + (" (read-only)" if options.read_only else ""))
    if not is_loopback(options.host):
        say("reachable from other machines: put TLS in front of it (a reverse proxy), tokens travel in clear here")
    if token is not None:
        say(f"open (once; it holds the only token): {base}?token={token}")
    else:
        say(f"operators sign in with {base}?token=THEIR_TOKEN ({len(users or [])} in {options.users})")
    config = uvicorn.Config(build(console), log_level="warning", access_log=False, timeout_graceful_shutdown=1,
                            lifespan="off", server_header=False)
    uvicorn.Server(config).run(sockets=[sock])
