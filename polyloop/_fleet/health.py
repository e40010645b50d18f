"""Liveness of a `polyloop worker` for probes: a file it keeps touching, or a tiny HTTP endpoint.

Both are served from the worker's own event loop, so an answer (or a fresh
file) means that loop still turns: a worker wedged in a blocking call stops
answering and the probe fails. The state is one JSON object:
`{"status", "pid", "holder", "running", "claims", "takeovers", "lost",
"finished", "released", "claim_p50_ms", "since_loop_s"}`; `status` is `ok`, or
`stopping` once a signal asked the worker to stop. Standard library only.

* `--health FILE`: the object is written to FILE (temporary file, rename)
  every `EVERY` seconds; a probe checks that FILE is younger than a few
  periods (`test $(( $(date +%s) - $(stat -c %Y FILE) )) -lt 30`). The file
  is removed when the worker exits.
* `--port N`: `GET /` (any path) answers `200` with the object; a request
  that is not a GET gets `405`. Bound to every interface (a probe comes
  from outside a container); it says nothing a queue row does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
from typing import Any

from .queue import Worker

EVERY = 2.0  # seconds between writes of the health file


def state(worker: Worker) -> dict[str, Any]:
    """The worker's liveness and counters, as the probes see them."""
    latencies = list(worker.claim_seconds)
    return {
        "status": "stopping" if worker.stopping else "ok",
        "pid": os.getpid(),
        "holder": worker.store.name,
        "running": worker.running,
        "claims": worker.claims,
        "takeovers": worker.takeovers,
        "lost": worker.lost,
        "finished": worker.finished,
        "released": worker.released,
        "claim_p50_ms": round(statistics.median(latencies) * 1000, 2) if latencies else None,
        "since_loop_s": round(time.monotonic() - worker.alive_at, 3),
    }


def write_state(worker: Worker, path: str) -> None:
    """Write the state to `path` once (a temporary file beside it, renamed over it).

    Raises:
        OSError: `path` cannot be written (its directory is missing, it is a directory...).
    """
    tmp = f"{path}.{os.getpid()}.tmp"
    data = (json.dumps(state(worker)) + "\n").encode()
    try:
        with open(tmp, "wb") as f:  # noqa: PTH123 - a few bytes, on the loop: the probe is about the loop
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


async def keep_file(worker: Worker, path: str) -> None:
    """Write the state to `path` every `EVERY` seconds until cancelled, then remove it."""
    try:
        while True:
            write_state(worker, path)
            await asyncio.sleep(EVERY)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


async def serve_port(worker: Worker, port: int, *, host: str = "0.0.0.0") -> asyncio.Server:  # noqa: S104
    """Answer HTTP requests on `port` with the state; the caller closes the returned server."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)).strip():
                pass  # the headers: nothing in them matters
            if request.split(b" ")[0] == b"GET":
                status, body = "200 OK", json.dumps(state(worker)).encode()
            else:
                status, body = "405 Method Not Allowed", b'{"error": "GET only"}'
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode() + body
            )
            await writer.drain()
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(answer, host, port)
