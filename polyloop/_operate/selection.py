"""Choosing runs by age, batch and target: what `ls --since/--batch/--target/--limit` and
`archive --older-than` share.

A duration is written as a person would: `90s`, `15m`, `2h`, `7d`, `2w`, or
several of them together (`1h30m`). A batch's runs are the ones its
manifest names (`DIR/.batch-NAME.json`; on PostgreSQL the row of
`polyloop_batches`). A target matches when it is the recorded one, ends
with it after a `/` (a relative path given for an absolute one), or
matches it as a shell pattern (`*demo.py:*`).
"""

from __future__ import annotations

import fnmatch
import os
import re
from datetime import datetime, timedelta, timezone
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .._files import read_regular
from .._log.errors import InvalidInputError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> timedelta:
    """`text` (`90s`, `15m`, `2h`, `7d`, `2w`, `1h30m`) as a `timedelta`.

    Raises:
        InvalidInputError: it is not such a duration.
    """
    spec = text.strip().lower() if isinstance(text, str) else ""
    pos, seconds = 0, 0.0
    for match in _PART.finditer(spec):
        if match.start() != pos:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not spec or pos != len(spec):
        raise InvalidInputError(
            f"{text!r} is not a duration: write a number and a unit, s, m, h, d or w (e.g. 90s, 15m, 7d, 1h30m)"
        )
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise InvalidInputError(f"{text!r} is too long a duration: at most {timedelta.max.days} days") from None


def moment(at: object) -> datetime | None:
    """`at` (a record's ISO 8601 time) as an aware UTC time, or None when it is not one."""
    if not isinstance(at, str):
        return None
    try:
        when = datetime.fromisoformat(at)
    except (ValueError, OverflowError):
        return None
    try:
        return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)
    except (ValueError, OverflowError):  # e.g. year 1 at +01:00 has no UTC time
        return None


def within(at: object, age: timedelta, now: datetime) -> bool:
    """Whether the time `at` lies no further back than `age` from `now` (an unknown time does not)."""
    when = moment(at)
    return when is not None and now - when <= age


def target_matches(recorded: str | None, wanted: str) -> bool:
    """Whether the recorded target is the one `wanted` names (see the module's docstring)."""
    if recorded is None:
        return False
    if recorded == wanted or recorded.endswith("/" + wanted.lstrip("./")):
        return True
    return fnmatch.fnmatchcase(recorded, wanted)


def batch_run_ids(directory: str | os.PathLike[str], name: str) -> set[str]:
    """The run ids the manifest of batch `name` in a run directory names.

    Raises:
        InvalidInputError: there is no such batch, or its manifest cannot be read.
    """
    path = Path(directory) / f".batch-{name}.json"
    try:
        doc = orjson.loads(read_regular(path))
    except FileNotFoundError:
        raise InvalidInputError(f"no batch {name!r} in {directory} (no manifest {path.name})") from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise InvalidInputError(f"the manifest of batch {name!r} ({path}) cannot be read: {exc}") from None
    return _runs_of(doc, name)


def _runs_of(doc: Any, name: str) -> set[str]:
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, dict):
        raise InvalidInputError(f"the manifest of batch {name!r} names no runs")
    return {str(run_id) for run_id in runs}


@dataclass(frozen=True, slots=True)
class Choice:
    """Which summaries `list_runs` keeps: by status, age and target, then the first `limit`."""

    statuses: frozenset[str] | None
    since: timedelta | None
    limit: int | None
    target: str | None

    @classmethod
    def make(cls, statuses: Iterable[str] | None, known: Iterable[str], *, since: timedelta | str | None,
             limit: int | None, target: str | None) -> Choice:
        """The choice `list_runs` was asked for; `ValueError` for an unknown status or a negative limit."""
        wanted = None if statuses is None else frozenset(statuses)
        if wanted is not None and not wanted <= set(known):
            bad = ", ".join(sorted(wanted - set(known)))
            raise ValueError(f"unknown status {bad}: use {', '.join(known)}")
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be 0 or more, not {limit}")
        return cls(wanted, parse_duration(since) if isinstance(since, str) else since, limit, target)

    def of(self, found: Iterable[Any], key: Callable[[Any], Any]) -> list[Any]:
        now = datetime.now(timezone.utc)
        kept = [
            s for s in found
            if (self.statuses is None or s.status in self.statuses)
            and (self.since is None or within(s.updated, self.since, now))
            and (self.target is None or target_matches(s.target, self.target))
        ]
        kept.sort(key=key)
        return kept if self.limit is None else kept[: self.limit]


def cause_of(report: Any) -> str | None:
    """What ended or stopped a run, in one sentence (`RunSummary.cause`)."""
    rec = report.recovery
    f = rec.finished if rec is not None else None
    if f is None:
        return None  # `reason` says why it stopped
    if f.reason == "cancelled":
        return f"cancelled by {f.by}: {f.why}"
    if f.reason == "error" and rec.steps and rec.steps[-1].model_calls:
        last = rec.steps[-1].model_calls[-1].error  # the provider's own words: what the error was
        if last and last not in (f.error or ""):
            return f"{f.error}; the last: {last}"
    return f.error
