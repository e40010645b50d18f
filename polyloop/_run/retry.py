"""Riding out a model outage: exponential backoff with full jitter, one circuit breaker per endpoint.

A transient model failure (connection refused or reset, timeout, 429, 5xx,
overloaded) is asked again after a backoff. The runs of one process that
share a model endpoint (a hosted model's `endpoint`: provider and base URL)
share one `Endpoint`: its failures in a row, and the time before which
nobody calls it. While it is open every run on it waits, without spending
its budget; when the time comes one run's call probes it (half-open) while
the others keep waiting for the verdict. So a batch of 200 runs in one
outage makes a handful of calls, not 200 times its budget.

A run gives up (the loop writes `run_stopped` and raises
`ModelUnavailableError`) when its own transient failures of the step reach
its `max_attempts`, or when the endpoint's failures in a row, counted over
every run, reach it while the run was waiting on it. A model that names no
endpoint gets one of its own per run.

The state is plain data (no asyncio object), so it survives event loops:
`polyloop run` makes one, a batch worker runs many runs in one, a queue
worker lives for days. `outages()` is what a live display shows.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._log.records import utc_now

__all__ = ["Endpoint", "ModelOutage", "endpoint_for", "full_jitter", "outages"]

POLL = 0.25  # seconds between looks at a waiting endpoint, at most (a success may come early)


def full_jitter(base: float, failures: int, cap: float, *, rng: Callable[[], float] = random.random) -> float:
    """A delay drawn uniformly from [0, min(cap, base * 2**(failures - 1))] ("full jitter")."""
    ceiling = min(cap, base * 2 ** min(failures - 1, 62))
    return max(0.0, ceiling * rng())


@dataclass(frozen=True, slots=True)
class ModelOutage:
    """A model endpoint this process found failing, as a live display shows it.

    Attributes:
        endpoint: provider and URL (no password).
        failures: its failed calls in a row.
        retry_in: seconds until the next call may go (0 while one probes it).
        since: when the failures began (ISO 8601 UTC).
        error: the last failure.
        waiting: runs waiting on it.
    """

    endpoint: str
    failures: int
    retry_in: float
    since: str
    error: str
    waiting: int

    def sentence(self) -> str:
        """`model unavailable, retrying in 12 s` and what it is about."""
        when = f"retrying in {self.retry_in:.0f} s" if self.retry_in >= 0.5 else "retrying now"
        runs = "" if self.waiting <= 1 else f", {self.waiting} runs waiting"
        return f"model unavailable, {when} ({self.endpoint}: {self.failures} failed{runs}; last: {self.error})"


class Endpoint:
    """What the runs of this process know of one model endpoint: its failures in a row and its backoff."""

    def __init__(self, key: str, *, shared: bool) -> None:
        self.key = key
        self.shared = shared
        self.failures = 0  # in a row, over every run on it
        self.total = 0  # ever: a run notes where it began waiting
        self.open_until = 0.0  # time.monotonic() before which nobody calls it
        self.probing = False
        self.since = ""
        self.error = ""
        self.waiting = 0

    async def admit(self, started: int, budget: int) -> int | None:
        """Wait until this run may call the endpoint: the failures in a row it calls under, or None to give up.

        `started` is the endpoint's `total` when the run began on its step:
        a run gives up once the endpoint failed `budget` times in a row and
        at least once since then (its own calls or other runs' probes).
        """
        self.waiting += 1
        try:
            while True:
                if self.failures >= budget and self.total > started:
                    return None
                if self.failures == 0:
                    return 0
                now = time.monotonic()
                if now >= self.open_until and not self.probing:
                    self.probing = True  # half-open: this run's call decides for everyone
                    return self.failures
                left = self.open_until - now
                await asyncio.sleep(POLL if self.probing or left <= 0 else max(0.001, min(left, POLL)))
        finally:
            self.waiting -= 1

    def succeeded(self) -> None:
        """The endpoint answered (any answer but a transient failure): everyone may call it again."""
        self.failures = 0
        self.probing = False
        self.open_until = 0.0

    def failed(self, level: int, error: str, delay: float) -> None:
        """A transient failure of a call admitted at `level`; nobody calls it again for `delay` seconds.

        Calls that were already under way when the endpoint began failing
        fail together: they count as one failure in a row, not as many.
        """
        if self.failures == 0:
            self.since = utc_now()
        self.failures = max(self.failures, level + 1)
        self.total += 1
        self.error = error
        self.probing = False
        self.open_until = max(self.open_until, time.monotonic() + delay)

    def released(self) -> None:
        """A probe ended without a verdict (cancelled)."""
        self.probing = False

    def outage(self) -> ModelOutage | None:
        if self.failures == 0:
            return None
        left = max(0.0, self.open_until - time.monotonic())
        return ModelOutage(self.key, self.failures, left, self.since, self.error, self.waiting)


_ENDPOINTS: dict[str, Endpoint] = {}


def endpoint_for(model: Any) -> Endpoint:
    """The shared `Endpoint` of a model that names one (its `endpoint` string), else a private one."""
    key = model.endpoint if isinstance(getattr(model, "endpoint", None), str) and model.endpoint else None
    if key is None:
        return Endpoint(type(model).__name__, shared=False)
    found = _ENDPOINTS.get(key)
    if found is None:
        found = _ENDPOINTS[key] = Endpoint(key, shared=True)
    return found


def outages() -> list[ModelOutage]:
    """The shared endpoints of this process that are failing now (empty when all answer)."""
    return [o for o in (e.outage() for e in list(_ENDPOINTS.values())) if o is not None]
