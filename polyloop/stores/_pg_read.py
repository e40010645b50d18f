"""Reading a run's log back from PostgreSQL, and checking its numbering (rule 35).

A correct writer numbers a run's rows 0, 1, 2 ... without gaps, and moves
the run row's `next_seq` on in the statement that inserts them, so the row
always says how many records the run has. A log whose rows break that was
changed behind the library's back (rows deleted or renumbered): its records
may still decode and even look like a complete run, so the numbering is
checked on every read, as rule 35 of docs/reference/log-format.md.

The read stays one query: the gap check costs three aggregates (`count`,
`min`, `max`, which the scan computes anyway) and a lookup of the run row.
Only when they show a gap does a second query locate it, on a log that is
corrupt already.
"""

from __future__ import annotations

from typing import Any

import psycopg

from .._log.errors import Problem

RULE = 35

# The log's text (the JSONL lines), and what the numbering check needs, in one snapshot.
READ_ONE = """
SELECT string_agg(body::text, E'\\n' ORDER BY seq), count(*), min(seq), max(seq),
    (SELECT next_seq FROM polyloop_runs WHERE run_id = %(run)s)
FROM polyloop_records WHERE run_id = %(run)s
"""

READ_MANY = """
SELECT r.run_id, string_agg(r.body::text, E'\\n' ORDER BY r.seq), count(*), min(r.seq), max(r.seq),
    (SELECT next_seq FROM polyloop_runs WHERE run_id = r.run_id)
FROM polyloop_records r WHERE r.run_id = ANY(%s) GROUP BY r.run_id
"""

# Where the gaps are, for a log the aggregates found one in (the first few).
_GAPS = """
SELECT seq, after, position FROM (
    SELECT seq, lag(seq) OVER (ORDER BY seq) AS after, row_number() OVER (ORDER BY seq) - 1 AS position
    FROM polyloop_records WHERE run_id = %s
) numbered WHERE seq <> COALESCE(after, -1) + 1 ORDER BY seq LIMIT 10
"""


def _contiguous(count: int, first: int | None, last: int | None) -> bool:
    # `seq` is unique within a run (the primary key): count distinct numbers from first to last.
    return count == 0 or (first == 0 and last == count - 1)


def numbered_right(count: int, first: int | None, last: int | None, next_seq: int | None) -> bool:
    """Whether rows numbered `first` .. `last` (`count` of them) are 0 .. n-1 and the run row says n."""
    return _contiguous(count, first, last) and (next_seq is None or next_seq == count)


async def numbering_problems(
    conn: psycopg.AsyncConnection[Any], run_id: str, count: int, first: int | None, last: int | None,
    next_seq: int | None,
) -> list[Problem]:
    """The breaches of rule 35 in a run's numbering (none for a log a correct writer wrote).

    `count`, `first`, `last` are the aggregates of the run's `seq` column;
    `next_seq` the run row's (None when the row is missing: nothing to
    compare). A gap is reported at the position of the record after it;
    a `next_seq` that disagrees with the rows, as a problem of the whole log.
    """
    problems: list[Problem] = []
    if not _contiguous(count, first, last):
        cur = await conn.execute(_GAPS, (run_id,))
        for seq, after, position in await cur.fetchall():
            problems.append(Problem(_gap(after, seq), index=position, line=position + 1, rule=RULE))
    if next_seq is not None and count and next_seq != (last or 0) + 1:
        problems.append(Problem(_tail(next_seq, last or 0), rule=RULE))
    return problems


def _missing(low: int, high: int) -> str:
    return f"seq {low} is missing" if low == high else f"seq {low} to {high} are missing"


def _gap(after: int | None, seq: int) -> str:
    low = 0 if after is None else after + 1
    before = "the log starts" if after is None else f"the record at seq {after}"
    return (
        f"{_missing(low, seq - 1)}: {before} is followed by seq {seq} (rows were deleted or renumbered; "
        "a correct writer numbers a run's records 0, 1, 2 ... without gaps)"
    )


def _tail(next_seq: int, last: int) -> str:
    if next_seq > last + 1:
        return (
            f"{_missing(last + 1, next_seq - 1)}: the run's row counts {next_seq} records "
            f"(next_seq {next_seq}) but the last row is seq {last} (rows were deleted)"
        )
    return (
        f"the run's row counts {next_seq} records (next_seq {next_seq}) but rows run to seq {last}: "
        "the next append would collide with a row a correct writer never wrote"
    )
