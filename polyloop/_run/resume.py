"""What every resume does before the run goes on (log format 1.2): validity, crash loop, the count.

`Resume.open` runs once, before anything of the run is executed, on every
path that continues an existing log (`Agent.run` with a known run id,
`resume_run`, a batch re-run). In order: the checkpoint is compared
(`polyloop._run.validity.differences`; a difference refuses with
`CheckpointError` unless accepted on the record), the planner's crash-loop
stop is honoured (`CrashLoopError` unless lifted on the record), and a
`resumed` record counts the resume. A resume that stops for an operator or
finds the run finished writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .artifacts import bad_artifacts
from .._log.errors import CrashLoopError, InvalidInputError
from .._recovery.plan import AlertStop, AwaitDecision, CrashLoopStop, Finished, NeedsOperator, Next, describe, plan
from .._log.records import CheckpointAccepted, CrashLoopAccepted, Resumed
from .._log.store_port import capabilities_of
from .validity import differences, refusal
from .._log.who import BY, REASON, said, settled_by

if TYPE_CHECKING:
    from .._log.store_port import Store
    from .._recovery.walker import Walker
    from .run_port import AgentPort, RunPort


@dataclass(slots=True)
class Resume:
    """How this resume was asked for: the inputs now, and what a person accepts on the record."""

    inputs: Mapping[str, Any] | None = None
    accept_changes: bool = False
    accept_crash_loop: bool = False
    reason: str | None = None
    by: str | None = None
    on_resume: Callable[[str], None] | None = None

    def check(self) -> None:
        """Refuse an acceptance without a reason, and a blank reason or name (before anything is read or written)."""
        if (self.accept_changes or self.accept_crash_loop) and self.reason is None:
            which = "accepting changes (--accept-changes)" if self.accept_changes else (
                "lifting a crash loop (--accept-crash-loop)")
            raise InvalidInputError(f"{which} needs {REASON}: it is written to the log")
        said(self.reason, REASON)
        said(self.by, BY)

    async def open(self, run: RunPort) -> None:
        walker = run.walker
        planned = plan(walker)
        if not compares_checkpoint(planned):
            return  # nothing runs: the loop reports it as before
        assert walker.started is not None
        by = settled_by(self.by)
        # Without accept_changes, changed products refused the resume before the lock's work.
        diffs = await checkpoint_changes(run.store, walker, run.agent, inputs=self.inputs,
                                         products=self.accept_changes)
        if diffs:
            if not self.accept_changes:
                raise refusal(run.run_id, diffs)
            await run.write(CheckpointAccepted(differences=diffs, reason=self.reason or "", by=by))
        if isinstance(planned, CrashLoopStop):
            if not self.accept_crash_loop:
                tool = getattr(planned.execution, "tool", None)
                raise CrashLoopError(run.run_id, planned.resumes, planned.limit, planned.step, tool)
            await run.write(CrashLoopAccepted(resumes=planned.resumes, reason=self.reason or "", by=by))
        if walker.minor >= 2 and Resumed in capabilities_of(run.store).writes:
            await run.write(Resumed(by=by))
        walker.go_live()
        if self.on_resume is not None:
            self.on_resume(describe(plan(walker), run.run_id))


async def checkpoint_changes(
    store: Store, walker: Walker, agent: AgentPort, *, inputs: Mapping[str, Any] | None = None,
    products: bool = True,
) -> list[dict[str, Any]]:
    """Every change of the run's checkpoint no acceptance on the record covers: what an acceptance accepts.

    The one computation behind `resume --accept-changes` (`Resume.open`) and the
    console's acceptance (`polyloop._operate.accept`): the inputs, logic version and
    configuration against `agent` (`validity.differences`), then with `products`
    every changed product, also one the interrupted step may have replaced
    (`unsettled`, checked again once that step completed), so one acceptance
    covers them all and the check after the step honours it.
    """
    assert walker.started is not None
    diffs = differences(walker.started, walker.accepted, agent, inputs=inputs)
    if products:
        bad = await bad_artifacts(store, walker, unsettled=True)
        diffs += [c.difference() for c in bad]
    return diffs


def compares_checkpoint(planned: Next) -> bool:
    """Whether resume compares the checkpoint before `planned` (not for a finished run or a stop for a person).

    The one rule `Resume.open` follows and `polyloop._operate.outlook` reports: a
    stop runs nothing, so it is reported as the stop (exit code 3) even when
    the checkpoint changed; the comparison refuses once it is settled.
    """
    return not isinstance(planned, (Finished, NeedsOperator, AlertStop, AwaitDecision))
