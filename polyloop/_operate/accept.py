"""Accepting a run's changed checkpoint on the record, without resuming it (log format 1.2).

When what a run depends on changed since it started (an input, its logic
version, its configuration, a product it referenced), resume refuses it
(exit code 4) until a person accepts the changes on the record.
`polyloop resume RUN --accept-changes` accepts and resumes in one go;
`accept_changes` writes the same `checkpoint_accepted` record only, under
the run's hold, from the same computation (`polyloop._run.resume.checkpoint_changes`):
a later plain `polyloop resume RUN` honours it, as after an accepting
resume that crashed. The browser console's "Accept these changes" form
(`polyloop serve`) is this call, bound to the page the person saw (`seen`,
`expect_sha256`). See docs/how-to/change-an-agent-safely.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from .._log.errors import CheckpointError, PolyLoopError, StoreError, TargetError
from .._log.ids import check_run_id
from .._log.records import CheckpointAccepted, Record, representable
from .._log.store_port import Store, capabilities_of
from .._log.who import REASON, said, settled_by
from .._recovery.walker import Walker
from .._run.hold import held, walk_checked, write_settlement
from .._run.resume import checkpoint_changes
from .._run.target import load_target
from .resolve import Settled
from .seen import moved_since


async def accept_changes(
    store: Store,
    run_id: str,
    *,
    reason: str,
    by: str | None = None,
    seen: int | None = None,
    expect_sha256: str | None = None,
) -> Settled:
    """Accept every change of the run's checkpoint with a durable `checkpoint_accepted` record; nothing runs.

    The changes are what `polyloop resume RUN --accept-changes` would accept
    now (the inputs re-read from their recorded paths, the logic version and
    configuration of the recorded target, imported here, and every changed
    product). The next resume compares against them, so a plain `polyloop
    resume RUN` continues.

    Args:
        store: where the run lives.
        run_id: the run.
        reason: why (recorded); refused when blank or a bare placeholder.
        by: who accepts; defaults to the OS user and host; refused when given but blank.
        seen: the log's length when the person looked (the console's form):
            refused if a record written since moved the run (another
            acceptance, a resume, its progress, its end).
        expect_sha256: refuse unless the changes now hash to this
            (`changes_sha256` of the ones the person reviewed).

    Returns:
        The `Settled` acceptance (its last record is the `CheckpointAccepted`).

    Raises:
        CheckpointError: nothing to accept (the checkpoint is as recorded),
            the run has finished, it has no target to compare against (a
            run started from Python, a user's loop), a stale `seen`, or
            changes other than `expect_sha256`'s. Nothing was written.
        TargetError: the recorded target cannot be loaded.
        InvalidInputError: a blank `reason` or `by` (nothing is read or written).
        RunActiveError: a live process holds the run.
        RunNotFoundError, CorruptLogError, InvalidRunIdError, StoreError.
    """
    check_run_id(run_id)
    said(reason, REASON, required=True)
    who = settled_by(by)
    if CheckpointAccepted not in capabilities_of(store).writes:
        raise StoreError("the store cannot write checkpoint_accepted records (log format 1.2): it lacks "
                         "write_checkpoint_accepted", run_id=run_id)
    async with held(store, run_id, must_exist=True) as records:
        assert records is not None
        why = moved_since(records, seen, None) if seen is not None else None
        if why is not None:
            raise _refused(run_id, why)
        walker = await walk_checked(records, run_id)
        diffs = await _changes(store, walker, run_id)
        if expect_sha256 is not None and expect_sha256.lower() != changes_sha256(diffs):
            raise _refused(run_id, "the changes are not the ones the page showed (an input or product changed "
                                   "again since): review them again", diffs)
        record = CheckpointAccepted(differences=diffs, reason=representable(reason), by=representable(who))
        recovery = await write_settlement(store.write_checkpoint_accepted,  # type: ignore[attr-defined]
                                          walker, run_id, record, "acceptance")
    return Settled(recovery, (*records, record), walker)


async def pending_changes(
    store: Store, run_id: str, records: Sequence[Record] | None = None
) -> list[dict[str, Any]]:
    """What `accept_changes` would accept now, without holding the run (what a page shows).

    `records`: the run's log as the caller already read it (a page drawn from
    `inspect_run`'s report), so the changes are those of the log the page shows;
    None reads it.

    Raises:
        CheckpointError: nothing to accept, or nothing to compare against (see `accept_changes`).
        TargetError, RunNotFoundError, CorruptLogError, InvalidRunIdError, StoreError.
    """
    check_run_id(run_id)
    if records is None:
        records = await store.read_log(run_id)
    return await _changes(store, await walk_checked(records, run_id), run_id)


def changes_sha256(diffs: Sequence[dict[str, Any]]) -> str:
    """The SHA-256 of a list of checkpoint changes (keys sorted): what a form shows, bound to what is accepted."""
    return hashlib.sha256(orjson.dumps(list(diffs), option=orjson.OPT_SORT_KEYS)).hexdigest()


async def _changes(store: Store, walker: Walker, run_id: str) -> list[dict[str, Any]]:
    """The run's checkpoint changes no acceptance covers (`checkpoint_changes`), or why there are none to accept."""
    started = walker.started
    assert started is not None
    if walker.finished is not None:
        raise _refused(run_id, f"the run has finished ({walker.finished.reason}): nothing of it runs again")
    if not started.target:
        raise _refused(run_id, "it was started from Python without a target, so there is no agent to compare "
                               "with: accept with Agent.run(..., accept_changes=True, reason=...)")
    if started.config.get("loop") == "own":
        raise _refused(run_id, "it is a run of a user's loop (polyloop.durable): its configuration is compared "
                               "when its entry point opens it again; accept there, with `polyloop resume "
                               f"{run_id} --accept-changes --reason TEXT`")
    agent = load_target(started.target)
    try:
        diffs = await checkpoint_changes(store, walker, agent)
    except PolyLoopError:
        raise
    except Exception as exc:  # the agent's own code (a model's describe()) failed
        raise TargetError(started.target, f"comparing its configuration raised {type(exc).__name__}: {exc}") from exc
    if not diffs:
        raise _refused(run_id, "nothing to accept: its inputs, logic version, configuration and products are "
                               "as recorded (or as accepted before)")
    return diffs


def _refused(run_id: str, why: str, diffs: Sequence[dict[str, Any]] = ()) -> CheckpointError:
    return CheckpointError(run_id, f"cannot accept the changes of run {run_id!r}: {why}", diffs)
