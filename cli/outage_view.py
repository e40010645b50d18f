"""The live line of a model outage: `model unavailable, retrying in 12 s`, on stderr while a run waits.

`run` and `resume` watch the library's shared endpoints (`polyloop.model_outages`)
from a thread while the run goes on, and say each new failure in a row once,
and once more when the model answers again. `batch` shows the same in its
progress display (cli/batch_view.py).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from polyloop import model_outages

from .terminal import err, say

EVERY = 0.5  # seconds between looks


@contextlib.contextmanager
def notices() -> Iterator[None]:
    """Print outage lines on stderr for as long as the block runs (and a last look after it)."""
    seen: dict[str, int] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(stop, seen), name="polyloop-outages", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=2 * EVERY)
        if not watcher.is_alive():
            _look(seen, waits=False)  # a model that answered at the very end; nobody waits any more


def _watch(stop: threading.Event, seen: dict[str, int]) -> None:
    while not stop.wait(EVERY):
        _look(seen)


def _look(seen: dict[str, int], *, waits: bool = True) -> None:
    now = {o.endpoint: o for o in model_outages()}
    for endpoint, o in now.items():
        if waits and seen.get(endpoint) != o.failures:
            seen[endpoint] = o.failures
            say(err(), ("polyloop: ", "bold yellow"), o.sentence())
    for endpoint in [e for e in seen if e not in now]:
        del seen[endpoint]
        say(err(), ("polyloop: ", "bold green"), f"the model at {endpoint} answers again")
