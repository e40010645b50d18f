"""The context a tool receives: `ToolContext`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .artifacts import NO_ARTIFACTS, Artifacts


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool learns about the execution it is part of.

    Declare a parameter named `ctx` (or annotated `ToolContext`) to receive it.

    Attributes:
        run_id: the run.
        step: the step (from 1).
        attempt: the attempt of this action within the step (from 1); a replay
            of an unknown `safe` action, or a re-run after an operator said
            `not_executed`, has a higher attempt.
        result_id: the id its result is stored under.
        idempotency_key: the same for every attempt of this logical action;
            pass it to external services so they can de-duplicate.
        call: which of the step's tool calls this is (from 1) when the model
            asked for several at once; None for a step's only call.
        artifacts: store and read the run's intermediate products
            (`ctx.artifacts.write(name, data)` returns an `ArtifactRef`;
            docs/how-to/keep-intermediate-products.md). Meant for the tool
            itself: a rollback's context, one a resumed run gives a verify
            or reconcile guard, and one built by hand have none (using it
            raises `RuntimeError`).
    """

    run_id: str
    step: int
    attempt: int
    result_id: str
    idempotency_key: str
    call: int | None = None
    artifacts: Artifacts = field(default=NO_ARTIFACTS, repr=False, compare=False)
