"""`polyloop submit`: queue a run on a PostgreSQL store for `polyloop worker` to run."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from polyloop.stores import open_store, submit

from . import documents, options
from .errors import BadInput, failures
from .scope import Scope

if TYPE_CHECKING:  # psycopg is imported only when a PostgreSQL store is used
    from polyloop.stores import PostgresStore

StoreUrl = Annotated[
    str | None,
    typer.Option(
        "--store",
        metavar="URL",
        help="The PostgreSQL store: postgresql://user@host:port/dbname. Default: $POLYLOOP_STORE.",
        show_default=False,
    ),
]


# Every command takes --dir; the queue's commands take it to say why a directory will not do.
QueueDir = Annotated[str | None, typer.Option("--dir", metavar="DIR", hidden=True)]


def postgres_store(
    url: str | None, *, directory: str | None = None, lease: float | None = None, connections: int = 8
) -> PostgresStore:
    """The PostgresStore `--store` (or $POLYLOOP_STORE) names; BadInput for anything else."""
    if directory is not None:
        raise BadInput(
            f"the queue lives in PostgreSQL, and --dir {directory} names a directory: give --store "
            "postgresql://... (on one machine, `polyloop batch` runs many runs from a directory)"
        )
    url = url or os.environ.get("POLYLOOP_STORE") or ""
    if not url:
        raise BadInput("give the PostgreSQL store: --store postgresql://... (or set POLYLOOP_STORE)")
    if not options.is_url(options.checked(url)):  # another scheme:// is refused as such
        raise BadInput(f"the queue needs a PostgreSQL store (postgresql://...), not {url!r}")
    store = open_store(url)  # a clear StoreError when the postgres extra is missing
    if lease is not None:
        store = type(store)(url, lease=lease, max_connections=connections)
    return store  # type: ignore[return-value]


def command(
    target: Annotated[
        str,
        typer.Argument(
            metavar="TARGET",
            help="The agent: `path/to/file.py:name` or `module.path:name`; every worker must "
            "be able to import it (a file path is recorded absolute).",
            show_default=False,
        ),
    ],
    goal: Annotated[
        str,
        typer.Option("--goal", metavar="TEXT", help="What the run is for: the first user message.", show_default=False),
    ] = "",
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id", metavar="ID",
            help="The run id: letters, digits, '.', '_', '-'. Default: a new sortable id.",
            show_default=False,
        ),
    ] = None,
    store_url: StoreUrl = None,
    directory: QueueDir = None,
    json: options.Json = False,
) -> None:
    """Queue a new run of the agent at TARGET on a PostgreSQL store; prints its run id.

    A `polyloop worker` on any machine that shares the store claims it, runs
    it, and another worker takes it over if that worker dies. The target is
    imported once here, so a typo fails now.

    Exit: 0 queued, 1 the store failed, 2 bad input (target, id, a run id
    the store already knows, no --store). With --json, stdout is one
    document: `{"schema", "command", "run_id", "status": "queued", "exit_code", "error"}`.

    \b
    Example:
      polyloop submit examples/demo.py:agent --goal "write up the notes" --store postgresql://postgres@127.0.0.1/test
    """
    with failures(Scope(json=json)) as scope:
        options.utf8(target, "TARGET")
        options.utf8(goal, "--goal")
        store = postgres_store(store_url, directory=directory)
        scope.run_id = run_id

        async def queue() -> str:
            async with store:
                return await submit(store, target, goal=goal, run_id=run_id)

        with documents.quiet(json):  # what the agent's module prints as it is imported
            rid = asyncio.run(queue())
    if json:
        documents.emit({"command": "submit", "run_id": rid, "status": "queued", "exit_code": 0, "error": None})
    else:
        sys.stdout.write(rid + "\n")
