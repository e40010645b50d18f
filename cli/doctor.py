"""`polyloop doctor`: can runs be kept here (and does the agent import)? One line per check."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from polyloop import DoctorCheck, doctor

from . import documents, options, terminal
from .errors import FAILURE, OK, failures
from .scope import Scope



def command(
    target: Annotated[
        str | None,
        typer.Argument(metavar="[TARGET]", help="An agent to import and check: `path/to/file.py:name` or "
                       "`module:name`.", show_default=False),
    ] = None,
    directory: options.Directory = None,
    store_url: options.StoreUrl = None,
    json: options.Json = False,
) -> None:
    """Check that runs can be kept in the store, and that TARGET imports as an agent.

    One line per check, ✓ or ✗ and what was found: where runs live; a
    durable write there (a directory: a probe file created, written,
    fsynced with its directory, locked as a run lock is, read back and
    removed; PostgreSQL: a probe row committed synchronously and deleted);
    the log format versions of the runs there, and whether this polyloop
    reads them all. On PostgreSQL also: the server is reachable (its
    version), fsync and full_page_writes are on, and the PolyLoop tables'
    version. Nothing a run would see is created or left behind: a missing
    directory or schema is reported, not created. With TARGET, the agent is
    imported (its module's top-level code runs) and checked to be an Agent.

    Exit: 0 every check passed; 1 a check failed; 2 bad usage (a store URL
    of a scheme PolyLoop does not serve, --dir with --store).

    \b
    Example:
      polyloop doctor
      polyloop doctor examples/demo.py:agent --store postgresql://postgres@127.0.0.1/test
    """
    with failures(Scope(json=json)) as scope:
        scope.directory = where = options.where(directory, store_url)
        checks = asyncio.run(doctor(where, target=target))
        passed = all(c.ok for c in checks)
        if json:
            documents.emit({"ok": passed, "checks": [c.to_json() for c in checks]})
        else:
            for check in checks:
                _line(check)
    raise typer.Exit(OK if passed else FAILURE)


def _line(check: DoctorCheck) -> None:
    mark = ("✓", "bold green") if check.ok else ("✗", "bold red")
    terminal.say(terminal.out(), mark, " ", (f"{check.name:<10}", "bold"), " ", terminal.clip(check.detail, 2000))
