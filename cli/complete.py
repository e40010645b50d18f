"""Shell completion of run ids and of what waits in a run, read from the store the command line names.

Typer calls these when a shell asks (`polyloop --install-completion`; see
docs/how-to/watch-and-check.md). They see the options typed so far
(`--dir`, `--store`, else `$POLYLOOP_STORE`, `$POLYLOOP_DIR`, `./runs`), must
answer within a moment, and never fail: a missing directory, an unreachable
database or a corrupt log completes nothing rather than print a traceback
into the shell's prompt. A PostgreSQL store is asked with a short connect
timeout and never has its schema created by a completion.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from polyloop import default_directory, inspect_run
from polyloop.stores import open_store, store_kind

TIMEOUT = 2.0  # seconds a completion may wait for the store before it completes nothing

# What each settling command takes, by the `kind` of `inspect --json`'s `waiting`.
_KINDS = {
    "mark-resolved": {"unknown", "alert"},
    "approve": {"approval"},
    "deny": {"approval"},
    "answer": {"answer"},
}


def run_ids(ctx: Any, incomplete: str) -> list[str]:
    """The run ids of the store that start with `incomplete` (none if the store cannot be read)."""
    try:
        return [r for r in _ask(_run_ids(_where(ctx))) if r.startswith(incomplete)]
    except Exception:  # a completion never fails; it completes nothing
        return []


def waiting_ids(ctx: Any, incomplete: str) -> list[tuple[str, str]]:
    """The ids of what waits in the run typed before (for the command's kinds), with what each is."""
    try:
        run_id = ctx.params.get("run_id")
        if not run_id:
            return []
        kinds = _KINDS.get(ctx.info_name or "", set())
        waiting = _ask(_waiting(_where(ctx), run_id))
        return [
            (w["id"], f"{w['kind']}: {w.get('tool') or ''}".strip())
            for w in waiting
            if str(w["id"]).startswith(incomplete) and (not kinds or w["kind"] in kinds)
        ]
    except Exception:  # a completion never fails; it completes nothing
        return []


def _where(ctx: Any) -> str:
    # The precedence of `options.where` (which builds its arguments with these callbacks).
    params = ctx.params
    return (params.get("store_url") or params.get("directory") or os.environ.get("POLYLOOP_STORE")
            or default_directory())


def _ask(work: Any) -> Any:
    return asyncio.run(asyncio.wait_for(work, TIMEOUT))


def _store(where: str) -> Any:
    if store_kind(where) == "postgresql":
        from polyloop.stores import PostgresStore  # psycopg only when a database is named

        return PostgresStore(where, create=False, connect_timeout=TIMEOUT, max_connections=1)
    return open_store(where)


async def _run_ids(where: str) -> list[str]:
    async with _store(where) as store:
        # Both stores open_store makes list their runs (a directory scan; one query).
        return list(await store.list_runs())


async def _waiting(where: str, run_id: str) -> list[dict[str, Any]]:
    async with _store(where) as store:
        return (await inspect_run(store, run_id)).waiting
