"""`polyloop serve`: the browser console for the people who decide (the `serve` extra)."""

from __future__ import annotations

import signal
import sys
from typing import Annotated

import typer

from polyloop.for_cli import ROLES, ServeOptions, UsersFileError, add_user, is_loopback, serve_console

from . import options
from .errors import BadInput, failures
from .scope import Scope


class _Terminated(Exception):
    """SIGTERM (systemd, Kubernetes, `kill`): the console was asked to stop."""


def _terminated(signum: int, frame: object) -> None:
    raise _Terminated()


EXTRA = "polyloop serve needs the serve extra: pip install 'polyloop[serve]' (starlette, jinja2, uvicorn)"


def command(
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    host: Annotated[str, typer.Option("--host", metavar="HOST", help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", metavar="PORT", help="The port (0: any free port).", min=0,
                                      max=65535)] = 8765,
    allow_remote: Annotated[bool, typer.Option(
        "--allow-remote", help="Allow a --host other machines can reach (put TLS in front of it).")] = False,
    users: Annotated[str | None, typer.Option(
        "--users", metavar="FILE", help="Named operators with hashed tokens (`NAME ROLE HASH` lines); each "
        "decision records the operator's name. Default: one token, generated and printed once.",
        show_default=False)] = None,
    read_only: Annotated[bool, typer.Option(
        "--read-only", help="Everyone sees everything and can decide nothing.")] = False,
    add: Annotated[str | None, typer.Option(
        "--add-user", metavar="NAME", help="Add operator NAME to --users FILE, print their token once, and exit "
        "(with --read-only: a read-only operator).", show_default=False)] = None,
) -> None:
    """Serve a web console: the runs, each run's steps, and forms to decide what waits.

    The same library calls as the command line, on a JSONL directory or a
    PostgreSQL store: approve (as the model asked, or with edited
    arguments), deny, answer, mark-resolved (executed or not) and cancel.
    Each form carries the args hash and the log position it was drawn
    from: if the request changed or someone decided first (another tab,
    the command line, another operator), the decision is refused with what
    happened, and nothing is written. Pages follow the runs live.

    Access needs a token: by default one is generated and printed once, in
    the URL to open; with --users FILE each operator has their own (stored
    hashed; add one with --add-user NAME) and decisions record their name.
    The token URL opens a session cookie (HttpOnly, SameSite=Strict); every
    decision needs the session's CSRF token and this console's Origin.
    Listens on 127.0.0.1 unless --allow-remote.

    Exit: 0 stopped by SIGTERM (systemd, Kubernetes) or user added; 130
    interrupted (Ctrl-C); either way open requests end first. 2 bad usage: a --host others can
    reach without --allow-remote, an unreadable or malformed users file,
    the port in use, the serve extra not installed.

    \b
    Example:
      polyloop serve --dir runs
      polyloop serve --users operators.txt --add-user ann
      polyloop serve --store postgresql://postgres@127.0.0.1/test --users operators.txt --port 9000
    """
    with failures(Scope()) as scope:
        if add is not None:
            _add(users, add, "read-only" if read_only else ROLES[0])
            raise typer.Exit(0)
        scope.directory = where = options.where(directory, store_url)
        if not is_loopback(host) and not allow_remote:
            raise BadInput(f"--host {host} can be reached from other machines: add --allow-remote "
                           "(and put TLS in front of it), or listen on 127.0.0.1")
        chosen = ServeOptions(where=where, host=host, port=port, allow_remote=allow_remote, users=users,
                              read_only=read_only)
        # The server stops gracefully on either signal, then raises it again: SIGTERM here, as
        # `_Terminated` (a stop asked for: 0), SIGINT as KeyboardInterrupt (interrupted: 130).
        previous = signal.signal(signal.SIGTERM, _terminated)
        try:
            serve_console(chosen, _say)
        except KeyboardInterrupt:
            _say("polyloop console stopped")
            raise typer.Exit(130) from None
        except _Terminated:
            _say("polyloop console stopped")
        except ImportError as exc:
            raise BadInput(f"{EXTRA} ({exc})") from None
        except UsersFileError as exc:
            raise BadInput(str(exc)) from None
        except OSError as exc:
            raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        finally:
            signal.signal(signal.SIGTERM, previous)
    raise typer.Exit(0)


def _add(users: str | None, name: str, role: str) -> None:
    if users is None:
        raise BadInput("--add-user needs --users FILE: the file to add the operator to")
    try:
        token = add_user(users, name, role)
    except UsersFileError as exc:
        raise BadInput(str(exc)) from None
    _say(f"added {name} ({role}) to {users}; their token (shown once, stored hashed): {token}")


def _say(line: str) -> None:
    print(line, flush=True)
    sys.stdout.flush()
