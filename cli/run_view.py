"""What `run` and `resume` print: the run id first, then how the run ended."""

from __future__ import annotations

from pathlib import Path

from polyloop import RunResult

from .paste import place
from .terminal import clip, err, out, safe, say


def run_begins(run_id: str, log: Path | str) -> None:
    """Printed before the run starts, so the id is known even if the process dies."""
    say(out(), ("run ", "bold"), (run_id, "bold cyan"), f"  (log: {place(str(log))})")


def resume_begins(run_id: str, next_step: str) -> None:
    """Printed as a resume continues a run: what it does first."""
    say(err(), ("resuming ", "bold"), run_id, f": {next_step}")


def run_result(result: RunResult, *, already: bool = False) -> None:
    """How a run ended: the final answer on stdout; an error on stderr."""
    verb = "had already finished" if already else "finished"
    steps = f"{result.steps} step" + ("" if result.steps == 1 else "s")
    if result.reason == "final_answer":
        say(out(), (f"{verb}: ", "bold green"), f"final answer after {steps}")
        out().print(safe(result.text or ""), soft_wrap=True)
    elif result.reason == "max_steps":
        say(
            out(),
            (f"{verb}: ", "bold yellow"),
            f"the step budget was spent after {steps}, without a final answer",
        )
    elif result.reason == "cancelled":
        say(err(), ("cancelled: ", "bold yellow"),
            f"run {result.run_id} {verb} after {steps}: {clip(result.error or 'cancelled', 10_000)}")
    elif result.reason == "tool_failures":
        say(
            err(),
            ("polyloop: error: ", "bold red"),
            f"run {result.run_id} {verb} after {steps}, stopped by its failure budget: {clip(result.error, 10_000)}",
        )
    else:
        say(
            err(),
            ("polyloop: error: ", "bold red"),
            f"run {result.run_id} {verb} with an error after {steps}: {clip(result.error, 10_000)}",
        )
