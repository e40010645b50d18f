"""Settling an unknown action, an alert or an unknown rollback: what `polyloop mark-resolved` runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from .._log.errors import ResolutionError
from .._log.ids import check_run_id
from .._log.records import Record, Resolution, representable
from .._log.store_port import Store
from .._log.who import REASON, said, settled_by
from .._recovery.walker import Recovery, Walker
from .._run.hold import held, walk_checked, write_settlement
from .inspect import RunReport, report_of
from .seen import moved_since


async def mark_resolved(
    store: Store,
    run_id: str,
    result_id: str,
    *,
    executed: bool,
    observation: str | None = None,
    reason: str | None = None,
    by: str | None = None,
) -> Recovery:
    """Settle an unknown action, an alert or an unknown rollback with a durable `resolution` record.

    For an unknown action: `executed=True` means it did happen (resume
    reuses `observation` as its result); `executed=False` means it did not
    (resume runs it again as a new attempt, with the same idempotency key).
    For an alert (a failed verification nothing undid, log format 1.1):
    `executed=True` means the effect stands (the model reads `observation`);
    `executed=False` means it has no effect (the model is told so; the
    action is not run again). For an unknown rollback: `executed=True`
    means it undid the action; `executed=False` that it did not (resume
    runs the rollback again).

    Args:
        store: where the run lives.
        run_id: the run.
        result_id: the id of what waits (`waiting` of `polyloop inspect --json`).
        executed: the operator's verdict.
        observation: what the action produced (only with `executed=True`).
        reason: why the operator decided so; refused when given but blank
            (empty, or only whitespace and control characters).
        by: who decided; defaults to the OS user and host, `user@host`;
            refused when given but blank.

    Returns:
        The run's `Recovery` after the resolution.

    Raises:
        ResolutionError: `result_id` is not an unknown action, an alert or
            an unknown rollback of the run waiting for a person.
        InvalidInputError: a blank `reason` or `by` (nothing is read or written).
        RunActiveError: a live process holds the run.
        RunNotFoundError, CorruptLogError, InvalidRunIdError, StoreError.
    """
    settled = await resolve(store, run_id, result_id, executed=executed, observation=observation, reason=reason, by=by)
    return settled.recovery


async def resolve(
    store: Store, run_id: str, result_id: str, *, executed: bool, observation: str | None = None,
    reason: str | None = None, by: str | None = None, seen: int | None = None,
) -> Settled:
    """`mark_resolved`; the `Settled` also gives inspect's report without a second read.

    `seen`: the log's length when the person looked (the console's forms); refused
    (`ResolutionError`) if what was written since concerns `result_id` (`seen.moved_since`)."""
    if not executed and observation is not None:
        raise ResolutionError(run_id, result_id, "an observation goes only with --executed")
    check_run_id(run_id)
    said(reason, REASON)
    who = settled_by(by)

    def make(walker: Walker) -> Resolution:
        _check_open_unknown(walker, run_id, result_id)
        return Resolution(
            result_id=result_id,
            outcome="executed" if executed else "not_executed",
            observation=representable(observation or "") if executed else None,
            by=who,
            reason=reason,
        )

    def stale(records: Sequence[Record]) -> None:
        why = moved_since(records, seen, result_id) if seen is not None else None
        if why is not None:
            raise ResolutionError(run_id, result_id, why)

    return await settle(store, run_id, make, store.write_resolution, "resolution", stale=stale)


@dataclass(frozen=True, slots=True)
class Settled:
    """A settlement written under the run's hold, with the log as it now is (read once)."""

    recovery: Recovery
    records: tuple[Record, ...]
    walker: Walker

    async def report(self, store: Store, *, validity: bool = True) -> RunReport:
        """What `inspect_run` would now say, from the log already read: no second read."""
        return await report_of(store, self.walker.run_id or "", self.records, self.walker, validity=validity)


async def settle(
    store: Store, run_id: str, make: Callable[[Walker], Record], writer: Callable[..., Awaitable[object]], what: str,
    *, stale: Callable[[Sequence[Record]], None] | None = None,
) -> Settled:
    """Hold the run, read and walk its log once, `make` the record (or refuse), write it: every settlement's way.

    `stale`, when given, sees the log read under the hold first and raises to refuse (a decision
    bound to the log as a person saw it: `seen.moved_since`)."""
    async with held(store, run_id, must_exist=True) as records:
        assert records is not None
        if stale is not None:
            stale(records)
        walker = await walk_checked(records, run_id)
        record = make(walker)
        recovery = await write_settlement(writer, walker, run_id, record, what)
    return Settled(recovery, (*records, record), walker)


def _check_open_unknown(walker: Walker, run_id: str, result_id: str) -> None:
    """Raise `ResolutionError` unless `result_id` is an unknown, unresolved action of the run."""
    if walker.finished is not None:
        raise ResolutionError(run_id, result_id, "the run has finished")
    recovery = walker.recovery()
    assert recovery is not None
    e = recovery.execution(result_id)
    if e is None and recovery.request_of(result_id) is not None:
        raise ResolutionError(
            run_id, result_id, "it is a tool call that waits for a person's decision, not an unknown action: "
            "use `polyloop approve`, `deny` or (for a question) `answer`",
        )
    if e is None:
        ids = ", ".join(x.result_id for x in recovery.executions if x.state == "unknown") or "none"
        raise ResolutionError(run_id, result_id, f"no such execution (unknown ones: {ids})")
    if e.kind == "model_call":
        raise ResolutionError(
            run_id, result_id, "it is a model call; resume re-issues unknown model calls by itself"
        )
    if e.state == "alert":
        if all(b is not e for b in recovery.blocking):
            waits = recovery.blocking[0].result_id if recovery.blocking else None
            why = f"settle its unknown rollback {waits} first" if waits else "resume runs its rollback first"
            raise ResolutionError(run_id, result_id, why)
    elif e.state != "unknown":
        raise ResolutionError(run_id, result_id, f"its state is {e.state}, not unknown or alert")
