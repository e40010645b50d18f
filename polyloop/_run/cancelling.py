"""A run's safe point: where its loop looks for a request to stop (`polyloop cancel`).

The loop calls `stop_if_asked` before every model call: nothing of the run
is in flight there (no tool call runs, no intent waits for its result), so
ending the run loses nothing and cuts nothing short. A request found there
ends the run with a durable `run_finished` of reason `cancelled` naming who
asked and why (log format 1.3), and is then removed.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .._log.cancel_port import CancellingStore
from .._log.store_port import capabilities_of
from .._log.errors import PolyLoopError, StoreError
from .._log.records import RunFinished, representable
from .result import RunResult



def ended_by(f: RunFinished) -> str | None:
    """`RunResult.error` of a finished run: its error, or who cancelled it and why."""
    return f"cancelled by {f.by}: {f.why}" if f.reason == "cancelled" else f.error


def cancel_channel(store: Any) -> CancellingStore | None:
    """The store's cancel-request channel, or None when it has none."""
    return store if capabilities_of(store).cancelling else None


async def stop_if_asked(run: Any) -> RunResult | None:
    """End `run` (a `_Run`) as cancelled if someone asked it to stop; None to go on.

    Raises:
        StoreError: the request or the end marker cannot be read or written.
    """
    channel = run.cancels  # looked up once per run (`_Run`), not once per step
    if channel is None:
        return None
    try:
        request = await channel.cancel_request(run.run_id)
    except PolyLoopError:
        raise
    except Exception as exc:
        raise StoreError(f"store failed to read the requests to stop run {run.run_id!r}: {exc}",
                         run_id=run.run_id) from exc
    if request is None:
        return None
    steps = run.walker.completed_steps
    await run.write(RunFinished(reason="cancelled", result=None, steps=steps,
                                by=representable(request.by), why=representable(request.why)))
    with contextlib.suppress(Exception):  # the run is finished; a request left behind is harmless
        await channel.clear_cancel(run.run_id)
    return RunResult(run.run_id, "cancelled", None, steps, ended_by(run.walker.finished))
