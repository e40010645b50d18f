"""Following a PostgreSQL run log by position: the rows after the last one read (see `_follow`)."""

from __future__ import annotations

from .._log.codec import parse_log
from .._log.errors import CorruptLogError, Problem, SchemaVersionError
from .._log.records import Record
from ._pg_read import RULE
from ._postgres import PostgresStore

_ROWS = 2000  # rows one look returns at most (the next look takes the rest)

_AFTER = """
SELECT seq, body::text FROM polyloop_records
WHERE run_id = %s AND seq >= %s ORDER BY seq LIMIT %s
"""


class PgTail:
    """The rows of one run numbered from the next position on, one query per look."""

    def __init__(self, store: PostgresStore, run_id: str) -> None:
        self._store = store
        self._run_id = run_id
        self._next = 0  # the seq of the first row not yet returned

    async def more(self) -> list[Record]:
        async with self._store._conn(self._run_id) as conn:
            cur = await conn.execute(_AFTER, (self._run_id, self._next, _ROWS), prepare=True)
            rows = await cur.fetchall()
            if not rows and self._next == 0:
                raise await self._store._no_log(conn, self._run_id)
        for offset, (seq, _) in enumerate(rows):
            if seq != self._next + offset:  # rows deleted or renumbered (rule 35)
                expected = self._next + offset
                raise CorruptLogError(self._run_id, [Problem(
                    f"seq {expected} is missing: the rows jump to seq {seq} (rows were deleted or renumbered)",
                    index=expected, line=expected + 1, rule=RULE)])
        if not rows:
            return []
        parsed = parse_log(("\n".join(text for _, text in rows) + "\n").encode())
        first = self._next
        self._next += len(rows)
        if parsed.schema_version is not None:
            raise SchemaVersionError(self._run_id, parsed.schema_version)
        if parsed.problems:
            raise CorruptLogError(self._run_id, [
                Problem(p.message, line=None if p.line is None else p.line + first, rule=p.rule)
                for p in parsed.problems])
        return parsed.records
