"""What a batch reports: one `BatchRun` per line, a `BatchReport` at the end, `BatchProgress` meanwhile."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from ..stores._url import redact_url

Status = Literal[
    "finished", "needs_operator", "failed", "corrupt", "invalid", "changed", "active", "interrupted", "unavailable"
]
STATUSES: tuple[Status, ...] = (
    "finished", "needs_operator", "failed", "corrupt", "invalid", "changed", "active", "interrupted", "unavailable"
)
# Statuses that make a batch fail (exit 1 on the command line).
FAILED: frozenset[str] = frozenset({"failed", "corrupt", "invalid", "changed", "active"})

Outcome = Literal["finished", "needs_operator", "failed", "interrupted", "unavailable"]


@dataclass(frozen=True, slots=True)
class BatchRun:
    """How one line of a batch stands after an invocation.

    Attributes:
        run_id: the line's run id (None when the line names an unsafe one).
        line: the line number in the goals file (1-based).
        status: `finished` (final answer or step budget), `needs_operator`
            (an unknown `never` action waits to be settled), `failed` (the run
            ended in an error, its model call failed, or its worker process
            kept dying), `corrupt` (its log is refused), `invalid` (the line
            itself is bad), `changed` (the line differs from what the run or
            the manifest recorded), `active` (another process holds the run),
            `interrupted` (Ctrl-C came first; it stays resumable) or
            `unavailable` (its model stayed unavailable past its retry
            budget: stopped, resumable; running the batch again resumes it).
        steps: the run's completed steps (0 when it never started).
        reason: one sentence: why it finished, or why it stopped.
        action: what this invocation did: `started`, `resumed`, `skipped`
            (finished or parked before) or `none`.
        waiting: for `needs_operator`, what waits, as `inspect --json`'s
            `waiting` entries: `{"id", "kind", "tool", "args", "reason"}`.
        next: for `needs_operator`, inspect's `next` sentence; else None.
    """

    run_id: str | None
    line: int
    status: Status
    steps: int
    reason: str
    action: str = "none"
    waiting: tuple[dict[str, Any], ...] = ()
    next: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The entry of this run in `polyloop batch --json`."""
        return {
            "run_id": self.run_id,
            "line": self.line,
            "status": self.status,
            "steps": self.steps,
            "reason": self.reason,
            "action": self.action,
            "waiting": [dict(w) for w in self.waiting],
            "next": self.next,
        }


def count(runs: Any) -> dict[str, int]:
    """Runs per status, every status present (zeros included)."""
    counts = Counter(r.status for r in runs)
    return {s: counts.get(s, 0) for s in STATUSES}


@dataclass(frozen=True, slots=True)
class BatchReport:
    """The end of one invocation of a batch.

    Attributes:
        name: the batch name (the prefix of its generated run ids).
        target: the agent target, as recorded in the runs.
        directory: where the logs and the manifest live.
        runs: one entry per line (and per line gone from the goals file), by line.
        steps: steps completed by this invocation, over all runs, as the
            workers reported them (a worker that dies takes its last fraction
            of a second of counting with it).
        seconds: how long this invocation took.
        processes: worker processes used (0 when nothing had to run).
        concurrency: runs per worker process at most.
        restarts: worker processes that died (each replaced while work remained).
        interrupted: Ctrl-C stopped the batch; the runs under way ended the
            call they were in, so every run stays resumable.
        killed: a second Ctrl-C killed the worker processes mid-call: a run
            that was in an action may now need an operator (the next
            invocation says which).
    """

    name: str
    target: str
    directory: str
    runs: tuple[BatchRun, ...]
    steps: int = 0
    seconds: float = 0.0
    processes: int = 0
    concurrency: int = 0
    restarts: int = 0
    interrupted: bool = False
    killed: bool = False
    counts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "counts", count(self.runs))

    @property
    def outcome(self) -> Outcome:
        """`interrupted`, else `failed` if any run failed (or is corrupt, invalid,
        changed, active), else `needs_operator` if any waits, else `unavailable`
        if any stopped on a model outage, else `finished`."""
        if self.interrupted:
            return "interrupted"
        if any(self.counts[s] for s in FAILED):
            return "failed"
        if self.counts["needs_operator"]:
            return "needs_operator"
        if self.counts["unavailable"]:
            return "unavailable"
        return "finished"

    def to_json(self) -> dict[str, Any]:
        """The `polyloop batch --json` document: summary and one entry per run."""
        return {
            "name": self.name,
            "target": self.target,
            "directory": redact_url(self.directory),  # never a password in a document
            "outcome": self.outcome,
            "summary": {"total": len(self.runs), **self.counts},
            "steps": self.steps,
            "seconds": round(self.seconds, 3),
            "steps_per_second": round(self.steps / self.seconds, 1) if self.seconds > 0 else None,
            "processes": self.processes,
            "concurrency": self.concurrency,
            "restarts": self.restarts,
            "killed": self.killed,
            "runs": [r.to_json() for r in self.runs],
        }


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """A snapshot while a batch runs (what a progress display shows).

    Attributes:
        total: lines in the batch.
        counts: runs settled so far in this invocation, per status (runs
            skipped because they had finished before count as `finished`).
        running: runs in the hands of a worker right now.
        queued: runs still waiting for a worker.
        steps: steps completed by this invocation so far.
        seconds: since the invocation began.
        restarts: worker processes replaced after dying.
        done_by_workers: runs the workers settled so far (the pace of the ETA).
        stopping: Ctrl-C came; the workers are stopping their runs (a
            second Ctrl-C kills them).
        outage: what the workers' runs wait for, when their model is
            unavailable (`model unavailable, retrying in 12 s ...`), else None.
    """

    total: int
    counts: dict[str, int]
    running: int
    queued: int
    steps: int
    seconds: float
    restarts: int = 0
    done_by_workers: int = 0
    stopping: bool = False
    outage: str | None = None

    @property
    def done(self) -> int:
        """Runs settled so far (any status)."""
        return sum(self.counts.values())

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def eta(self) -> float | None:
        """Seconds until every run is settled at the pace so far; None before there is a pace."""
        left = self.total - self.done
        if left <= 0:
            return 0.0
        if self.done_by_workers == 0 or self.seconds <= 0:
            return None
        return left * self.seconds / self.done_by_workers
