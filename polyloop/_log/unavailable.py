"""The two ends of a failed model call that are not retried here (see `polyloop._log.errors` for the tree).

`ModelUnavailableError`: the endpoint kept failing transiently past the
run's retry budget; the run stopped, resumable (exit code 5).
`ModelRefusedError`: the provider refused the request in a way no retry
fixes (authentication, a bad request, an unknown model); the run ended.
"""

from __future__ import annotations

from .errors import PolyLoopError


class ModelUnavailableError(PolyLoopError):
    """A model endpoint stayed unavailable past the run's retry budget; the run stopped, resumable.

    Raised by `Agent.run` after the run's `run_stopped` record is durable
    (log format 1.3; a run of an older format stops without it). Nothing
    ended: `polyloop resume` (or `Agent.run` again) tries again with a
    fresh budget, a batch re-run resumes the run, a worker queues it again.
    Differs from `ModelCallError` (the model raised something that is not a
    transient failure) and from a run that ended with reason `error`.

    Attributes:
        run_id: the run.
        step: the step whose model call could not be made.
        endpoint: the provider and URL (no password), or None.
        error: the last failure, in the provider's words.
        attempts: this run's failed attempts of the step.
        failures: the endpoint's failed calls in a row (all runs of the process).
        since: when those failures began (ISO 8601 UTC).
    """

    def __init__(
        self, run_id: str, step: int, *, endpoint: str | None, error: str, attempts: int, failures: int, since: str
    ) -> None:
        self.run_id = run_id
        self.step = step
        self.endpoint = endpoint
        self.error = error
        self.attempts = attempts
        self.failures = failures
        self.since = since
        super().__init__(f"run {run_id!r} stopped, resumable: {unavailable_sentence(endpoint, error, failures, since)}; "
                         "resume it once the model is back")


def unavailable_sentence(endpoint: str | None, error: str, failures: int, since: str) -> str:
    """One sentence on an outage: what was unreachable, since when, how often it failed, the last error."""
    what = f"the model at {endpoint}" if endpoint else "the model"
    calls = "1 call" if failures == 1 else f"{failures} calls in a row"
    return f"{what} was unavailable ({calls} failed since {since[:19].replace('T', ' ')} UTC; last: {error})"


class ModelRefusedError(PolyLoopError):
    """Raised by models: the provider refused the request, and asking again cannot help.

    Authentication failed (401, 403), the request is invalid (400, 422),
    the model does not exist (404), or the account has no quota left. The
    run loop records the failed attempt and ends the run with reason
    `error`, naming the provider's error. Differs from
    `TransientModelError` (worth another attempt).

    Args:
        message: what the provider said, with its HTTP status.
        status: the HTTP status, if any.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
