"""A step's model call, intent first, and what its failure means for the run.

Called by the run loop (`polyloop._run.loop`) for the planner's `CallModel`.
A failure is recorded as the attempt's `model_call_result` and then:

* transient (`TransientModelError`: unreachable, timed out, rate limited,
  5xx, overloaded), in a log of format 1.3: it spends the run's outage
  budget (`polyloop._run.outage`), never its `max_attempts`; past the
  budget the run stops resumable;
* refused for good (`ModelRefusedError`: 401, 400, 404): the run ends with
  reason `error`, naming the provider's error;
* anything else (a bug in a model, an unreadable answer; and transient
  failures in logs of older formats): retried after a backoff up to
  `max_attempts`, or the run stops resumable (`ModelCallError`) —
  the way older versions did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from .._log.errors import MAX_RETRY_AFTER, ModelCallError, TransientModelError
from .._log.model_port import ModelOutput, Usage, _History
from .._log.records import Intent, ModelCallResult, representable
from .._log.unavailable import ModelRefusedError
from .._recovery.plan import CallModel
from .answer import MalformedResponseError
from .history import assistant_turn
from .outage import Outage
from .run_port import RunPort


async def call_model(
    run: RunPort, outage: Outage | None, specs: list[Any], planned: CallModel, history: _History,
    ask: Callable[[], Awaitable[ModelOutput]] | None = None,
) -> str | None:
    """Call the model for a step; the error that ends the run when the provider refused for good.

    `ask` is how a user's loop calls its own model (`polyloop.durable`); by
    default the agent's model is asked with the history and the tools' specs.
    """
    step, attempt = planned.step, planned.attempt
    rid = f"s{step}-m{attempt}"
    level = await outage.admit(step) if outage is not None else 0
    try:
        await run.write(Intent(kind="model_call", step=step, attempt=attempt, result_id=rid))
        if ask is None:
            output = await run.agent.model.complete(history.view(), specs)
        else:
            output = await ask()
        if not isinstance(output, ModelOutput):
            raise TypeError(f"the model returned {type(output).__name__}, not ModelOutput")
    except (Exception, SystemExit) as exc:  # SystemExit: a model does not pick our exit code
        if run.walker.last is None or run.walker.last.intent.result_id != rid:  # the intent never landed
            if outage is not None:
                outage.cancelled(level)
            raise
        return await _failed(run, outage, exc, step, attempt, rid, level)
    except BaseException:  # cancelled (Ctrl-C): whether the endpoint is up is still unknown
        if outage is not None:
            outage.cancelled(level)
        raise
    if outage is not None:
        outage.answered()
    out = storable(output.to_json())
    await run.write(ModelCallResult(result_id=rid, output=out, usage=_usage_json(output.usage)))
    history.append(assistant_turn(out, rid, run.walker.minor >= 2))
    return None


async def _failed(
    run: RunPort, outage: Outage | None, exc: BaseException, step: int, attempt: int, rid: str, level: int
) -> str | None:
    error = representable(f"{type(exc).__name__}: {exc}")
    spent = _usage_json(getattr(exc, "usage", None))
    down = outage is not None and isinstance(exc, TransientModelError) and not isinstance(
        exc, MalformedResponseError)  # an unreadable answer came from an endpoint that is up
    if outage is not None:  # the endpoint's state first: the other runs on it wait on it, whatever the write does
        if down:
            assert isinstance(exc, TransientModelError)
            outage.failed(level, exc)
        else:
            outage.answered()
    await run.write(ModelCallResult(result_id=rid, output=None, error=error, usage=spent,
                                    transient=True if down else None))
    if outage is not None and down:
        await outage.spent(step)  # raises ModelUnavailableError past the budget
        return None
    if isinstance(exc, ModelRefusedError):
        return f"the model call of step {step} failed: {exc}"
    if attempt >= run.walker.max_attempts:
        return None  # the planner finishes the run: the budget is spent
    if not isinstance(exc, TransientModelError):
        raise ModelCallError(run.run_id, step, attempt, error) from exc
    backoff = run.agent.retry_backoff * 2 ** (attempt - 1)
    if exc.retry_after:
        backoff = max(backoff, min(exc.retry_after, MAX_RETRY_AFTER))
    await asyncio.sleep(backoff)
    return None


def _usage_json(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, Usage):
        return None
    try:  # a model may hand over floats or strings; the log holds token counts
        return usage.to_json()
    except (TypeError, ValueError):
        return None


def storable(value: Any) -> Any:
    """`value` as the log will hold it: lone surrogates escaped (see `representable`).

    Checked with one C-level encode first: the recursive walk is for the
    rare value that needs it.
    """
    try:
        if isinstance(value, str):
            value.encode("utf-8")
        else:
            orjson.dumps(value)
        return value
    except (UnicodeEncodeError, TypeError):
        return representable(value)
