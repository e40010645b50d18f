"""`polyloop worker`: claim queued runs from a PostgreSQL store and run them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Annotated, Any

import typer

from polyloop.for_cli import keep_file, serve_port, write_state
from polyloop.stores import Worker, WorkerEvent

from . import documents, errors, paste, telemetry, terminal
from .errors import INTERRUPTED, BadInput, failures
from .scope import Scope
from .submit import QueueDir, StoreUrl, postgres_store

_STYLE = {
    "claim": "bold cyan",
    "takeover": "bold magenta",
    "finish": "bold green",
    "parked": "bold yellow",
    "failed": "bold red",
    "lost": "bold red",
    "unavailable": "bold yellow",
    "error": "bold red",
    "released": "bold",
    "recovered": "bold green",
    "warning": "yellow",
}
_NAME_WIDTH = 9  # the longest event name but `unavailable` (which overflows by two)

Json = Annotated[
    bool,
    typer.Option("--json", help="Print one JSON object per line on stdout, one per event (JSON lines), instead of the rendering."),
]


Health = Annotated[
    str | None,
    typer.Option("--health", metavar="FILE", help="Keep FILE fresh (rewritten every 2 s, removed on exit) "
                 "with the worker's state as JSON, for a liveness probe that checks its age.", show_default=False),
]
Port = Annotated[
    int | None,
    typer.Option("--port", metavar="N", min=1, max=65535, help="Answer HTTP GET on port N (every interface) "
                 "with the worker's state as JSON, for a liveness probe.", show_default=False),
]
Grace = Annotated[
    float,
    typer.Option("--grace", metavar="SECONDS", min=0.0, help="After SIGTERM, how long runs may take to reach "
                 "their next call before the worker lets them go sooner, as on a second signal."),
]


def _printer(as_json: bool, url: str):
    hint: list[str] = []

    def parked_hint() -> str:
        # The commands a parked run's detail names read the default store; say how to reach this one.
        if not hint:  # made when first printed: it may leave a password out, which store_note explains
            flag = paste.dir_flag(url)
            hint.append(f"  (run them with{flag}; once settled, a worker continues the run)" if flag else
                        "  (once settled, a worker continues the run)")
        return hint[0]

    def show(event: WorkerEvent) -> None:
        if as_json:
            documents.emit(event.to_json(), lines=True)
            sys.stdout.flush()
            return
        # Every line's second column starts at the same place: the run id, or
        # for a worker-wide event (`ready`, `error`...) its detail.
        parts: list[str | tuple[str, str]] = [(f"{event.event:<{_NAME_WIDTH}}", _STYLE.get(event.event, ""))]
        gap = " "
        if event.run_id:
            parts.append(f" {event.run_id}")
            gap = "  "
        if event.epoch is not None:
            parts.append((f"  epoch {event.epoch}", "dim"))
        if event.detail:
            parts.append(f"{gap}{terminal.clip(event.detail, 400)}")
        if event.event == "parked":
            parts.append((parked_hint(), "dim"))
        terminal.say(terminal.out(), *parts)
        paste.store_note()  # at once, not when the worker exits: it may run for days

    return show

Concurrency = Annotated[int, typer.Option("--concurrency", metavar="N", min=1, help="How many runs to run at once.")]
Lease = Annotated[
    float,
    typer.Option(
        "--lease", metavar="SECONDS", min=0.5,
        help="How long a lease lasts unrenewed: a dead worker's runs are taken over after about this long.",
    ),
]
Poll = Annotated[float, typer.Option("--poll", metavar="SECONDS", min=0.01, help="How often to look at the queue when idle.")]
UntilIdle = Annotated[
    bool, typer.Option(
        "--until-idle",
        help="Exit once no run is queued or running (by any worker; a dead worker's runs once taken over).",
    )
]


def command(
    store_url: StoreUrl = None,
    directory: QueueDir = None,
    concurrency: Concurrency = 1,
    lease: Lease = 15.0,
    poll: Poll = 1.0,
    until_idle: UntilIdle = False,
    health: Health = None,
    port: Port = None,
    grace: Grace = 30.0,
    as_json: Json = False,
    otel: telemetry.Otel = False,
) -> None:
    """Claim queued runs from a PostgreSQL store, run them, and take over runs of dead workers.

    Prints one line per claim, takeover, finish, parked run (it needs an
    operator: settle it with `polyloop mark-resolved`, then a worker claims
    it again), run stopped because its model stayed unavailable (it stays
    queued; this worker claims it again after a pause, any other worker at
    once), failure and release; with --json one JSON object per line
    (JSON lines: {"event", "run_id", "epoch", "detail"}). While the store
    cannot be reached it says so once, looks again less and less often (up
    to 10 polls, at most 30 s apart) and says when it answers again.

    SIGTERM or Ctrl-C stops it cleanly: it claims nothing more, lets each
    run go before its next model or tool call and releases its lease, so
    another worker continues at once. A second signal (or --grace seconds
    after the first) stops it sooner: a run in a model call or a wait goes
    at once (the call is asked again on resume), a run in a tool call goes
    once that call's result is recorded - never between a tool call's
    intent and its result. A third signal stops it at once (a tool call in
    flight becomes an unknown execution). The leases are always released.

    --health FILE and --port N serve liveness probes from the worker's own
    event loop: {"status", "pid", "holder", "running", "claims", "takeovers",
    "lost", "finished", "released", "claim_p50_ms", "since_loop_s"}.

    --otel traces every run it runs (the trace a run started continues) and
    sends the worker's metrics: takeovers, fenced rejections, claim latency,
    queue depth.

    --until-idle waits for runs held by other workers too, and for the lease
    of a dead worker to lapse (its runs are then taken over), so it exits
    only once nothing is queued.

    Exit: 0 stopped cleanly (SIGTERM, or --until-idle found nothing left),
    1 the store failed at start, 2 bad input, 130 interrupted (SIGINT,
    Ctrl-C), after releasing every lease.

    \b
    Example:
      polyloop worker --store postgresql://postgres@127.0.0.1/test --concurrency 4
      polyloop worker --store postgresql://postgres@127.0.0.1/test --port 8321 --grace 20
    """
    with failures(Scope(json=as_json, json_lines=True)):
        # A connection per run at most, plus renewals and the queue's look.
        store = postgres_store(store_url, directory=directory, lease=lease, connections=max(8, concurrency + 2))
        show = _printer(as_json, store_url or os.environ.get("POLYLOOP_STORE") or "")
        with telemetry.telemetry(otel) as traced:

            def on_event(event: WorkerEvent) -> None:
                traced.worker_event(event, worker)
                show(event)

            worker = Worker(store, concurrency=concurrency, poll=poll, on_event=on_event, until_idle=until_idle,
                            observe=traced)
            with _driver_warnings(show):
                received = asyncio.run(_work(worker, grace=grace, health=health, port=port, sample=traced.sampler))
    if signal.SIGINT in received:
        sys.stderr.write("polyloop: interrupted; every lease this worker held was released\n")
        errors.interruption_reported = True
        raise typer.Exit(INTERRUPTED)


async def _work(worker: Worker, *, grace: float, health: str | None, port: int | None,
                sample: Callable[[Any], Awaitable[None]] | None = None) -> set[int]:
    """Run the worker until it stops; return the signals that stopped it. `sample(store)` runs
    beside it while the store is open (the queue depth of --otel's metrics)."""
    loop = asyncio.get_running_loop()
    received: set[int] = set()
    signals = [0]

    def on_signal(sig: int) -> None:
        signals[0] += 1
        worker.stop(now=signals[0] > 1)
        if signals[0] == 1:
            loop.call_later(grace, lambda: signals[0] == 1 and worker.stop(now=True))
        received.add(sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    probes: list[asyncio.Task[None]] = []
    server = None
    try:
        if health:
            try:
                write_state(worker, health)  # a path that cannot be kept is refused before any claim
            except OSError as exc:
                raise BadInput(f"cannot keep the health file {health}: {_why(exc)}") from None
            probes.append(asyncio.create_task(keep_file(worker, health)))
        if port:
            try:
                server = await serve_port(worker, port)
            except OSError as exc:
                raise BadInput(f"cannot answer liveness probes on --port {port}: {_why(exc)}") from None
        async with worker.store:
            sampling = asyncio.create_task(sample(worker.store)) if sample is not None else None
            try:
                await worker.run()
            finally:
                if sampling is not None:
                    sampling.cancel()
                    await asyncio.gather(sampling, return_exceptions=True)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        for task in probes:
            task.cancel()
        await asyncio.gather(*probes, return_exceptions=True)
        if server is not None:
            server.close()
    return received


def _why(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc)


class _DriverLog(logging.Handler):
    def __init__(self, show: Callable[[WorkerEvent], None]) -> None:
        super().__init__(logging.WARNING)
        self._show = show

    def emit(self, record: logging.LogRecord) -> None:
        lines = record.getMessage().strip().splitlines() or [""]
        self._show(WorkerEvent("warning", None, detail=f"psycopg: {lines[0].strip()}"))


@contextlib.contextmanager
def _driver_warnings(show: Callable[[WorkerEvent], None]) -> Iterator[None]:
    """psycopg's own warnings (`query cancellation failed: ...` while the server is away) as `warning` events.

    Left alone they reach stderr raw, several lines each, through logging's
    last-resort handler, in the middle of the worker's own output.
    """
    logger = logging.getLogger("psycopg")
    handler = _DriverLog(show)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
