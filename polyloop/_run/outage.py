"""One run's side of riding out a model outage (log format 1.3): wait, count, and stop resumable.

The run loop asks `admit` before each model call of a step and tells
`failed` / `answered` how the call went; the shared backoff and breaker of
the model's endpoint are `polyloop._run.retry`'s. When the run's budget is
spent — its own transient failures of the step since its last
`run_stopped`, or the endpoint's failures in a row over every run of the
process, reach `max_attempts` — the run writes `run_stopped` (durable) and
raises `ModelUnavailableError`: nothing ends, and the next resume, batch
re-run or queue worker tries again with a fresh budget.
"""

from __future__ import annotations

from typing import Any

from .._log.errors import MAX_RETRY_AFTER, TransientModelError
from .._log.records import RunStopped, representable, utc_now
from .._log.store_port import capabilities_of
from .._log.unavailable import ModelUnavailableError
from .._recovery.on_outages import transient_failures
from .retry import Endpoint, endpoint_for, full_jitter
from .run_port import RunPort


class Outage:
    """The outage budget of one run (one pass of its loop) on its model's endpoint."""

    def __init__(self, run: RunPort, model: Any, *, budget: int, backoff: float, cap: float = MAX_RETRY_AFTER) -> None:
        self.run = run
        self.endpoint: Endpoint = endpoint_for(model)
        self.budget = budget
        self.backoff = backoff
        self.cap = cap
        self.began: tuple[int, int] | None = None  # (step, the endpoint's failure count when the run began on it)

    async def admit(self, step: int) -> int:
        """Wait until the run may call the model for `step`: the failures in a row it calls under.

        Raises:
            ModelUnavailableError: the budget is spent (after `run_stopped` is durable).
        """
        if self.began is None or self.began[0] != step:
            self.began = (step, self.endpoint.total)
        if self.endpoint.failures == 0 and self.budget > 0:
            return 0  # the endpoint is up: `Endpoint.admit` lets the call go at once (every step but in an outage)
        level = await self.endpoint.admit(self.began[1], self.budget)
        if level is None:
            await self._stop(step)
        assert level is not None
        return level

    def answered(self) -> None:
        """The call got an answer (or a failure that is no outage): the endpoint is up."""
        self.endpoint.succeeded()

    def cancelled(self, level: int) -> None:
        """The call admitted at `level` ended without a verdict: a probe (level > 0) lets another go."""
        if level > 0:
            self.endpoint.released()

    def failed(self, level: int, exc: TransientModelError) -> None:
        """A transient failure of the call admitted at `level`: the endpoint backs off."""
        delay = full_jitter(self.backoff, level + 1, self.cap)
        if exc.retry_after:
            delay = max(delay, min(exc.retry_after, self.cap))
        self.endpoint.failed(level, str(exc), delay)

    async def spent(self, step: int) -> None:
        """Stop the run (after `run_stopped`) once its transient failures of `step` spent the budget."""
        if transient_failures(self.run.walker, step) >= self.budget:
            await self._stop(step)

    async def _stop(self, step: int) -> None:
        e = self.endpoint
        attempts = transient_failures(self.run.walker, step)
        error = representable(e.error or "the model endpoint failed")
        since = e.since or utc_now()
        endpoint = e.key if e.shared else None
        failures = max(e.failures, attempts, 1)
        self.began = None
        if RunStopped in capabilities_of(self.run.store).writes:  # a store of log format 1.3
            await self.run.write(RunStopped(
                cause="model_unavailable", step=step, attempts=attempts, failures=failures, error=error,
                since=since, endpoint=endpoint,
            ))
        raise ModelUnavailableError(
            self.run.run_id, step, endpoint=endpoint, error=error, attempts=attempts, failures=failures, since=since
        )
