"""A decision bound to what the person saw: refuse it if the log moved under what they decided.

A form (the browser console's, `polyloop serve`) is drawn from the log as it
was at some length: the person decides on that picture. `moved_since` says
what, among the records written since, concerns the thing decided (its
decision or resolution by someone else, a new request of the same id, the
run's end), so the decision is refused with what happened instead of being
applied to something the person never saw. Records about other things (a
sibling call's decision) do not make the form stale.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._log.records import CheckpointAccepted, Decision, Record, Resolution, Resumed, RunFinished


def moved_since(records: Sequence[Record], seen: int, ident: str | None) -> str | None:
    """Why the log is no longer the one drawn at length `seen` for `ident`, or None when it still is.

    `ident` None: the run's checkpoint (an acceptance of its changes), which any record but a
    decision or settlement of one of its calls moves (another acceptance, a resume, the run's progress)."""
    if seen < 0:
        return f"the page's log position {seen} is not a position in a log (reload the page)"
    if seen > len(records):
        return (f"the log holds {len(records)} records, fewer than the {seen} the page was drawn from: "
                "it is not the log you saw (reload the page)")
    for at, record in enumerate(records[seen:], start=seen):
        what = _about(record, ident)
        if what is not None:
            return f"since the page was drawn (record {seen}), record {at} was written: {what}; review it again"
    return None


def _about(record: Record, ident: str | None) -> str | None:
    """What `record` did to `ident`, in words, or None when it is about something else."""
    if isinstance(record, RunFinished):
        return f"the run finished ({record.reason})"
    if ident is None:
        return _about_checkpoint(record)
    if isinstance(record, Decision):
        if record.id != ident:
            return None
        return f"it was {record.decision} by {record.by} at {record.at}"
    if getattr(record, "result_id", None) != ident:
        return None
    by = getattr(record, "by", None)
    return f"{record.TAG} of {ident}" + (f" by {by}" if by else "") + f" at {getattr(record, 'at', '?')}"


def _about_checkpoint(record: Record) -> str | None:
    """What `record` did to the run's checkpoint, in words; None for a person's settlement of one call."""
    if isinstance(record, (Decision, Resolution)):
        return None
    by = getattr(record, "by", None)
    if isinstance(record, CheckpointAccepted):
        return f"changes were accepted by {by} at {record.at}"
    if isinstance(record, Resumed):
        return f"the run was resumed by {by} at {record.at}"
    return f"{record.TAG} by {by}" if by else f"the run went on ({record.TAG})"
