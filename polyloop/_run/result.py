"""How a run ended: `RunResult`, returned by `Agent.run`, `resume_run` and the run loop."""

from __future__ import annotations

from dataclasses import dataclass, field

from .._log.records import FinishReason


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended.

    Attributes:
        run_id: the run.
        reason: `final_answer`, `max_steps`, `error`, `tool_failures` (a
            tool failed its failure budget of times in a row; log format 1.2)
            or `cancelled` (a person asked it to stop: `polyloop cancel`;
            log format 1.3).
        text: the final answer (None unless reason is `final_answer`).
        steps: how many steps the run completed.
        error: why it ended, when reason is `error` or `tool_failures`; for
            `cancelled`, `cancelled by WHO: WHY`.
        already_finished: the run had finished before this call (nothing ran).
    """

    run_id: str
    reason: FinishReason
    text: str | None
    steps: int
    error: str | None = None
    already_finished: bool = field(default=False, compare=False)

    @property
    def final(self) -> str | None:
        """The final answer; the same as `text`."""
        return self.text
