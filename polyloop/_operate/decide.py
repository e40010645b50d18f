"""People's decisions on waiting tool calls: `approve`, `deny` and `answer` (log format 1.2).

Each writes one durable `decision` record under the run's lock, after
checking (on the log read under that lock) that the named request is open
and of the right kind, so two deciders at once leave exactly one decision:
the second holder is refused (`RunActiveError`) or, once the first is done,
finds the request decided (`DecisionError`). See docs/how-to/require-approval.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from .._recovery.walker import Recovery, Walker
from .._log.errors import DecisionError, StoreError
from .._log.ids import check_run_id
from .._log.records import Decision, DecisionKind, Record, args_digest, representable
from .._log.store_port import Store, capabilities_of
from .._log.who import REASON, filled, said, settled_by
from .resolve import Settled, settle
from .seen import moved_since


async def approve(
    store: Store,
    run_id: str,
    request_id: str,
    *,
    reason: str,
    by: str | None = None,
    args: dict[str, Any] | None = None,
    expect_sha256: str | None = None,
) -> Recovery:
    """Approve a waiting tool call with a durable `decision` record; resume then runs it.

    The action then runs intent first with the approved arguments (its
    precondition, if it declares one, is checked after the intent,
    immediately before the tool runs). Approving is not running: the
    outcome is recorded by the run as for any action.

    Args:
        store: where the run lives.
        run_id: the run.
        request_id: the request's id (`waiting[].id` of `polyloop inspect --json`, e.g. `s3-a1`).
        reason: why (recorded); refused when blank (empty, or only
            whitespace and control characters).
        by: who decides; defaults to the OS user and host (`user@host`);
            refused when given but blank.
        args: edited arguments to run instead of the model's (recorded in
            the decision, hashed in `args_sha256`). They are checked against
            the tool's schema on resume, before any intent: arguments that
            do not fit never reach the tool, the model reads why.
        expect_sha256: refuse unless the request's `args_sha256` is this
            (approve exactly the arguments you reviewed).

    Returns:
        The run's `Recovery` after the decision.

    Raises:
        DecisionError: no such request, already decided, the run does not
            wait for it, a question (use `answer`), a SHA-256 that is not the
            request's, or `args` that are not a JSON object.
        InvalidInputError: a blank `reason` or `by` (nothing is read or written).
        RunActiveError: a live process holds the run (another decider, or the run).
        RunNotFoundError, CorruptLogError, InvalidRunIdError, StoreError.
    """
    settled = await decide(store, run_id, request_id, "approved", reason=reason, by=by, args=args,
                           expect_sha256=expect_sha256)
    return settled.recovery


async def deny(
    store: Store,
    run_id: str,
    request_id: str,
    *,
    reason: str,
    by: str | None = None,
    expect_sha256: str | None = None,
) -> Recovery:
    """Deny a waiting tool call with a durable `decision` record; nothing of it ever runs.

    On resume the model reads `denied by BY: REASON` as the call's
    observation, and the run goes on.

    Args:
        store, run_id, request_id, reason, by, expect_sha256: as for `approve`.

    Returns:
        The run's `Recovery` after the decision.

    Raises:
        DecisionError, InvalidInputError, RunActiveError, RunNotFoundError,
        CorruptLogError, InvalidRunIdError, StoreError: as for `approve`.
    """
    settled = await decide(store, run_id, request_id, "denied", reason=reason, by=by, expect_sha256=expect_sha256)
    return settled.recovery


async def answer(
    store: Store,
    run_id: str,
    request_id: str,
    text: str,
    *,
    by: str | None = None,
    reason: str | None = None,
) -> Recovery:
    """Answer a question the model asked with `ask_human`, as a durable `decision` record.

    On resume the model reads `text` as the question's observation. The
    answer is recorded once: a later crash or resume reuses it, never asks again.

    Args:
        store: where the run lives.
        run_id: the run.
        request_id: the question's id (`waiting[].id`, kind `answer`).
        text: the answer.
        by: who answers; defaults to the OS user and host; refused when given but blank.
        reason: an optional note (recorded); refused when given but blank.

    Returns:
        The run's `Recovery` after the decision.

    Raises:
        DecisionError: no such question, already answered, the run does
            not wait for it, or it is an approval (use `approve` or `deny`).
        InvalidInputError: a blank `reason` or `by` (nothing is read or written).
        RunActiveError, RunNotFoundError, CorruptLogError, InvalidRunIdError, StoreError.
    """
    return (await decide(store, run_id, request_id, "answered", reason=reason, by=by, answer=text)).recovery


async def decide(
    store: Store,
    run_id: str,
    request_id: str,
    kind: DecisionKind,
    *,
    reason: str | None,
    by: str | None,
    args: dict[str, Any] | None = None,
    answer: str | None = None,
    expect_sha256: str | None = None,
    seen: int | None = None,
) -> Settled:
    """`approve`, `deny` or `answer` by kind; the `Settled` also gives inspect's report without a second read.

    `seen`: the log's length when the person looked (the console's forms); refused
    (`DecisionError`) if what was written since concerns `request_id` (`seen.moved_since`)."""
    if args is not None and not isinstance(args, dict):
        raise DecisionError(run_id, request_id, f"edited arguments must be a JSON object, not {type(args).__name__}")
    if kind == "answered" and not isinstance(answer, str):
        raise DecisionError(run_id, request_id, "the answer must be text")
    check_run_id(run_id)
    if kind == "answered":
        filled(answer, "the answer (TEXT)")
    said(reason, REASON, required=kind != "answered")
    who = settled_by(by)
    if args is not None:
        try:
            orjson.dumps(args)
        except TypeError as exc:
            raise DecisionError(run_id, request_id, f"edited arguments cannot be recorded: {exc}") from None
    if Decision not in capabilities_of(store).writes:
        raise StoreError("the store cannot write decision records (log format 1.2): it lacks write_decision",
                         run_id=run_id)

    def make(walker: Walker) -> Decision:
        r = _open_request(walker, run_id, request_id, kind)
        if expect_sha256 is not None and expect_sha256.lower() != r.request.args_sha256:
            raise DecisionError(
                run_id, request_id,
                f"its arguments hash to {r.request.args_sha256}, not {expect_sha256}: review them again "
                "(`polyloop inspect`)",
            )
        edited = representable(args) if args is not None else None  # as the log will hold them
        return Decision(
            id=request_id,
            decision=kind,
            by=representable(who),
            request_sha256=r.request.args_sha256,
            args_sha256=args_digest(edited if edited is not None else r.request.args),
            reason=representable(reason) if reason is not None else None,
            args=edited,
            answer=representable(answer) if answer is not None else None,
        )

    def stale(records: Sequence[Record]) -> None:
        why = moved_since(records, seen, request_id) if seen is not None else None
        if why is not None:
            raise DecisionError(run_id, request_id, why)

    return await settle(store, run_id, make, store.write_decision, "decision",  # type: ignore[attr-defined]
                        stale=stale)


def _open_request(walker: Walker, run_id: str, request_id: str, kind: DecisionKind) -> Any:
    """The open request `request_id` of the run, or `DecisionError` saying why there is none."""
    if walker.finished is not None:
        raise DecisionError(run_id, request_id, "the run has finished")
    r = walker.request_of(request_id)
    if r is None:
        waiting = ", ".join(x.result_id for x in walker.waiting_requests()) or "none"
        raise DecisionError(run_id, request_id, f"the run does not wait for it (waiting requests: {waiting})")
    if r.decision is not None:
        d = r.decision
        raise DecisionError(run_id, request_id, f"it was already {d.decision} by {d.by} at {d.at}")
    if r.kind == "answer" and kind != "answered":
        raise DecisionError(run_id, request_id, "it is a question: answer it with `polyloop answer`")
    if r.kind == "approval" and kind == "answered":
        raise DecisionError(run_id, request_id, "it waits for approval: use `polyloop approve` or `deny`")
    return r
