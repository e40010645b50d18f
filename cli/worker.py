"""`polyloop worker`: claim queued runs from a PostgreSQL store and run them."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Annotated

import typer

from polyloop.stores import Worker, WorkerEvent

from . import options, render
from .errors import Scope, failures
from .submit import QueueDir, StoreUrl, postgres_store

_STYLE = {
    "claim": "bold cyan",
    "takeover": "bold magenta",
    "finish": "bold green",
    "parked": "bold yellow",
    "failed": "bold red",
    "lost": "bold red",
    "error": "bold red",
    "released": "bold",
}


def _printer(as_json: bool):
    def show(event: WorkerEvent) -> None:
        if as_json:
            sys.stdout.write(json.dumps(event.to_json(), ensure_ascii=True) + "\n")
            sys.stdout.flush()
            return
        parts: list[str | tuple[str, str]] = [(f"{event.event:<9}", _STYLE.get(event.event, ""))]
        if event.run_id:
            parts.append(f" {event.run_id}")
        if event.epoch is not None:
            parts.append((f"  epoch {event.epoch}", "dim"))
        if event.detail:
            parts.append(f"  {render.clip(event.detail, 400)}")
        render._line(render.out(), *parts)

    return show


def command(
    store_url: StoreUrl = None,
    directory: QueueDir = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", metavar="N", min=1, help="How many runs to run at once.")
    ] = 1,
    lease: Annotated[
        float,
        typer.Option(
            "--lease", metavar="SECONDS", min=0.5,
            help="How long a lease lasts unrenewed: a dead worker's runs are taken over after about this long.",
        ),
    ] = 15.0,
    poll: Annotated[
        float, typer.Option("--poll", metavar="SECONDS", min=0.01, help="How often to look at the queue when idle.")
    ] = 1.0,
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Exit once no run is queued or running.")
    ] = False,
    as_json: options.Json = False,
) -> None:
    """Claim queued runs from a PostgreSQL store, run them, and take over runs of dead workers.

    Prints one line per claim, takeover, finish, parked run (it needs an
    operator: settle it with `polyloop mark-resolved`, then a worker claims
    it again), failure and release; with --json one JSON object per line.
    SIGTERM or Ctrl-C stops it cleanly: it claims nothing more, lets each
    run go before its next model or tool call and releases its lease, so
    another worker continues at once. A second signal stops it at once.

    Exit: 0 stopped cleanly, 1 the store failed at start, 2 bad input.

    \b
    Example:
      polyloop worker --store postgresql://postgres@127.0.0.1/test --concurrency 4
    """
    with failures(Scope(json=as_json)):
        # A connection per run at most, plus renewals and the queue's look.
        store = postgres_store(store_url, directory=directory, lease=lease, connections=max(8, concurrency + 2))
        worker = Worker(store, concurrency=concurrency, poll=poll, on_event=_printer(as_json), until_idle=until_idle)
        asyncio.run(_work(worker))


async def _work(worker: Worker) -> None:
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        worker.stop(now=signals > 1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        async with worker.store:
            await worker.run()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
