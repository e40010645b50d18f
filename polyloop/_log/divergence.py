"""`DivergenceError`: a user's loop asked for other calls than its log records (a `CheckpointError`, exit code 4)."""

from __future__ import annotations

from .errors import CheckpointError


class DivergenceError(CheckpointError):
    """A user's loop asked for a different call than the log records (exit code 4).

    Resuming a run of a user's loop (`polyloop.durable`) replays the loop
    from its start: each model call and tool call it asks for must be the
    one the log records at that point (same step, same tool, same
    arguments). The first one that is not is refused before anything of it
    runs (the resume's own `resumed` record is all it wrote). The loop's logic changed (or is not
    deterministic): start the run over under a new run id, or restore the
    logic that made the log.

    Attributes:
        run_id: the run.
        step: the step at which the loop diverged.
        recorded: what the log records there (one line).
        asked: what the loop asked for instead (one line).
    """

    def __init__(self, run_id: str, step: int, recorded: str, asked: str) -> None:
        self.step = step
        self.recorded = recorded
        self.asked = asked
        diff = {"what": "loop", "name": f"step {step}", "recorded": recorded, "now": asked}
        super().__init__(
            run_id,
            f"run {run_id!r} diverged from its log at step {step}: the log records {recorded}, "
            f"the loop asked for {asked}; start the run over under a new run id, or restore "
            "the loop that wrote the log",
            [diff],
        )
