"""The runs page's filters: `polyloop ls`'s, from the page's query (`status`, `since`, `target`, `batch`, `limit`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.datastructures import QueryParams

from .views import STATUS_WORDS

STATUSES = tuple(STATUS_WORDS)


class BadFilter(ValueError):
    """A filter of the page's query that `polyloop ls` would refuse too (exit 2 there, 400 here)."""


def chosen(q: QueryParams) -> dict[str, Any]:
    """`list_runs`' keyword arguments for the query `q` (as `ls --status ... --since --target --batch --limit`).

    `status` may be repeated, as `--status` may. Raises `BadFilter` for a status
    that is none of `STATUSES` or a `limit` that is not a count."""
    statuses = [s for s in q.getlist("status") if s]
    for status in statuses:
        if status not in STATUSES:
            raise BadFilter(f"no status {status!r}: one of " + ", ".join(STATUSES))
    limit = q.get("limit") or None
    if limit is not None and not (limit.isascii() and limit.isdigit()):
        raise BadFilter(f"the limit {limit!r} is not a count of runs (0, 1, 2, ...)")
    return {"statuses": statuses or None, "since": q.get("since") or None, "target": q.get("target") or None,
            "batch": q.get("batch") or None, "limit": int(limit) if limit is not None else None}


def shown(q: Mapping[str, str]) -> dict[str, str]:
    """The filters as the page's form shows them again (the first status when several are asked)."""
    return {name: q.get(name, "") for name in ("status", "since", "target", "batch", "limit")}
