"""A tool that passes its idempotency key to an external service.

After a crash between "the service charged the card" and "PolyLoop
recorded the result", nobody can tell from the log whether the charge
happened. PolyLoop gives every action an idempotency key that is the same
on every replay of that action (`ctx.idempotency_key`). Pass it to any
service that de-duplicates by key — most payment APIs take an
`Idempotency-Key` header — and a replay gets the first charge back instead
of making a second one.

That is what makes this tool safe to replay, so it declares
`replay="safe"`: after a crash, `resume` runs it again and the service
answers with the charge it already made. The declaration is the tool
author's claim, not something PolyLoop checks: without the key (or with a
service that ignores it) this tool would have to keep the default,
`never`, and stop for an operator. Even then, pass the key: an operator
who cannot tell and answers `--not-executed` is then protected too.

Run it (no network; the "payments service" is a tiny HTTP server on
127.0.0.1 started by this script)::

    python examples/idempotent_api.py

It runs the agent in a child process that charges a card and is then
killed with SIGKILL before PolyLoop can record the result, resumes the run,
and shows the service's ledger: two requests with the same key, one charge.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from polyloop import (
    Agent,
    JsonlStore,
    ScriptedModel,
    ToolContext,
    default_directory,
    inspect_run,
    new_run_id,
    tool,
)

PAYMENTS_URL_ENV = "PAYMENTS_URL"
CRASH_ENV = "PAYMENTS_DEMO_CRASH"


# -- the external service --------------------------------------------------------


class PaymentsService:
    """A toy payments API on 127.0.0.1 that de-duplicates by `Idempotency-Key`.

    `POST /charges` with `{"customer", "amount_cents"}` creates a charge
    (201); the same key again returns the first charge (200, header
    `Idempotent-Replayed: true`) and charges nothing. `GET /charges` lists
    the charges. It serves at most `lifetime` seconds.
    """

    def __init__(self, *, lifetime: float = 60.0) -> None:
        self.charges: list[dict[str, Any]] = []
        self.requests: list[str | None] = []  # the Idempotency-Key of every POST
        self.lifetime = lifetime
        self._by_key: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start the service first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def charge(self, key: str | None, customer: str, amount_cents: int) -> tuple[dict[str, Any], bool]:
        with self._lock:
            self.requests.append(key)
            if key is not None and key in self._by_key:
                return self._by_key[key], True
            made = {"id": f"ch_{next(self._ids)}", "customer": customer, "amount_cents": amount_cents}
            self.charges.append(made)
            if key is not None:
                self._by_key[key] = made
            return made, False

    def start(self) -> PaymentsService:
        service = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 5

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with service._lock:
                    self._reply(200, {"charges": list(service.charges)})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                made, replayed = service.charge(
                    self.headers.get("idempotency-key"), str(body["customer"]), int(body["amount_cents"])
                )
                self._reply(200 if replayed else 201, made, replayed)

            def _reply(self, status: int, doc: Any, replayed: bool = False) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                if replayed:
                    self.send_header("idempotent-replayed", "true")
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.timeout = 0.05
        self._thread = threading.Thread(target=self._serve, name="payments", daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        assert self._httpd is not None
        deadline = time.monotonic() + self.lifetime
        while not self._stop.is_set() and time.monotonic() < deadline:
            self._httpd.handle_request()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._httpd is not None:
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> PaymentsService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the agent ---------------------------------------------------------------------


@tool(replay="safe")  # safe ONLY because the service de-duplicates by the key below
def charge_card(customer: str, amount_cents: int, ctx: ToolContext) -> str:
    """Charge a customer's card on file (amount in cents)."""
    request = urllib.request.Request(
        f"{os.environ[PAYMENTS_URL_ENV]}/charges",
        data=json.dumps({"customer": customer, "amount_cents": amount_cents}).encode(),
        headers={"content-type": "application/json", "Idempotency-Key": ctx.idempotency_key},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        made = json.load(response)
        replayed = response.headers.get("idempotent-replayed") == "true"
    print(
        f"  step {ctx.step} attempt {ctx.attempt}: charge_card -> {made['id']}"
        + (" (the service recognised the key: nothing charged again)" if replayed else ""),
        file=sys.stderr,
        flush=True,
    )
    if os.environ.get(CRASH_ENV) and ctx.attempt == 1:
        print("  ...and the process dies before PolyLoop records the result (SIGKILL)", file=sys.stderr, flush=True)
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
    return f"charge {made['id']}: {made['amount_cents']} cents to {made['customer']}"


agent = Agent(
    model=ScriptedModel(
        [
            {"text": "Charge Alice for the order.", "tool": "charge_card", "args": {"customer": "alice", "amount_cents": 1250}},
            {"final": "Charged alice 12.50 for her order."},
        ]
    ),
    tools=[charge_card],
)

GOAL = "charge alice for order 1042"


# -- the walkthrough ---------------------------------------------------------------


def _child(run_id: str, directory: str) -> int:
    """Run the agent in this (child) process; the crash switch may kill it."""
    store = JsonlStore(directory)
    result = asyncio.run(agent.run(GOAL, run_id=run_id, store=store, target=f"{Path(__file__).resolve()}:agent", new=True))
    print(result.text)
    return 0


async def _walkthrough(service: PaymentsService, run_id: str, directory: str) -> int:
    env = {**os.environ, PAYMENTS_URL_ENV: service.url, CRASH_ENV: "1"}
    print(f"1. run {run_id} in a child process; it charges the card, then is killed", flush=True)
    child = subprocess.run(
        [sys.executable, __file__, "--child", run_id, "--dir", directory], env=env, timeout=60
    )
    print(f"   child exit code: {child.returncode}  (-9 = SIGKILL)", flush=True)

    store = JsonlStore(directory)
    report = await inspect_run(store, run_id)
    unknown = [e for e in report.recovery.executions if e.state == "unknown"] if report.recovery else []
    for e in unknown:
        print(f"2. the log: {e.tool} {e.result_id} is unknown (intent, no result); replay={e.replay}, "
              f"idempotency key {e.idempotency_key}", flush=True)
    print(f"   next: {report.next}", flush=True)

    print("3. resume: the safe action is replayed with the same key", flush=True)
    os.environ[PAYMENTS_URL_ENV] = service.url
    result = await agent.run(run_id=run_id, store=store)
    print(f"   {result.reason}: {result.text}", flush=True)

    keys = set(service.requests)
    print(
        f"4. the payments service got {len(service.requests)} charge requests "
        f"with {len(keys)} idempotency key and made {len(service.charges)} charge: {service.charges}",
        flush=True,
    )
    return 0 if len(service.charges) == 1 and result.reason == "final_answer" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Show an idempotency key preventing a double charge after a crash.")
    parser.add_argument("--dir", default=None, help="where run logs go (default: $POLYLOOP_DIR or ./runs)")
    parser.add_argument("--run-id", default=None)
    parser.add_argument("--child", metavar="RUN_ID", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    directory = args.dir or default_directory()
    if args.child:
        return _child(args.child, directory)
    with PaymentsService() as service:
        return asyncio.run(_walkthrough(service, args.run_id or new_run_id(), directory))


if __name__ == "__main__":
    raise SystemExit(main())
