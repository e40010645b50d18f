"""What `archive` reports: one entry per run (`ArchivedRun`), and the whole (`ArchiveReport`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .shapes import JSON_SCHEMA

Outcome = Literal["archived", "refused"]


@dataclass(frozen=True, slots=True)
class ArchivedRun:
    """What `archive` did with one run.

    Attributes:
        run_id: the run.
        outcome: `archived` (it is now in the archive, and only there) or
            `refused` (it stays where it was; `reason` says why).
        reason: why it was refused (None when archived).
        finished: whether the run had finished (None when unknown).
        path: where its log is now.
    """

    run_id: str
    outcome: Outcome
    reason: str | None = None
    finished: bool | None = None
    path: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "outcome": self.outcome, "reason": self.reason, "finished": self.finished,
                "path": self.path}


@dataclass(frozen=True, slots=True)
class ArchiveReport:
    """What `archive` did: one entry per run it was asked to (or chose to) archive.

    Attributes:
        to: the archive directory.
        runs: one `ArchivedRun` per run, in the order they were taken.
        swept: runs whose earlier archive a crash had cut short, finished now.
    """

    to: str
    runs: tuple[ArchivedRun, ...]
    swept: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """Whether some run was refused."""
        return any(r.outcome == "refused" for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        """The document `polyloop archive --json` prints (docs/reference/json.md)."""
        archived = sum(r.outcome == "archived" for r in self.runs)
        return {"schema": JSON_SCHEMA, "to": self.to, "runs": [r.to_json() for r in self.runs],
                "swept": list(self.swept),
                "summary": {"archived": archived, "refused": len(self.runs) - archived}}
