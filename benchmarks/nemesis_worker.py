"""One worker of the nemesis (benchmarks/nemesis.py): `polyloop worker` with a clock the nemesis can jump.

    python benchmarks/nemesis_worker.py URL LEASE CONCURRENCY

The worker of `polyloop worker`, built on the library's `Worker` with the
lease-clock seam (`polyloop.stores._pg_lease.LeaseClock`): SIGUSR1 jumps this
process's clock an hour forward, SIGUSR2 an hour back. Prints one JSON line
per event, with the wall time: `{"t", "event", "run_id", "epoch", "detail"}`.
SIGTERM stops it cleanly.
"""

from __future__ import annotations

import signal

# A jump sent while this process still imports must not kill it (the default action of SIGUSR1/2).
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
signal.signal(signal.SIGUSR2, signal.SIG_IGN)

import asyncio  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from polyloop.stores import PostgresStore, Worker, WorkerEvent  # noqa: E402
from polyloop.stores._pg_lease import LeaseClock  # noqa: E402

HOUR = 3600.0


class JumpingClock(LeaseClock):
    """The monotonic clock plus an offset the signals move (waits stay real)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


def show(event: WorkerEvent) -> None:
    print(json.dumps({"t": time.time(), **event.to_json()}), flush=True)


async def main(url: str, lease: float, concurrency: int) -> None:
    clock = JumpingClock()
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    current: list[Worker] = []

    def jump(by: float) -> None:
        clock.offset += by
        show(WorkerEvent("clock", None, detail=f"{by:+.0f} s"))

    def stop() -> None:
        stopped.set()
        for worker in current:
            worker.stop()

    loop.add_signal_handler(signal.SIGUSR1, jump, HOUR)
    loop.add_signal_handler(signal.SIGUSR2, jump, -HOUR)
    loop.add_signal_handler(signal.SIGTERM, stop)
    while not stopped.is_set():  # the store may be down when this worker starts: try again
        store = PostgresStore(url, lease=lease, max_connections=concurrency + 2, connect_timeout=2, _clock=clock)
        worker = Worker(store, concurrency=concurrency, poll=0.1, on_event=show, _clock=clock)
        current[:] = [worker]
        try:
            async with store:
                await worker.run()
            return
        except Exception as exc:  # noqa: BLE001 - the first look failed (the server is restarting)
            show(WorkerEvent("error", None, detail=f"{type(exc).__name__}: {exc}"))
            await asyncio.sleep(0.5)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))
