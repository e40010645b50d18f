"""Appends to a run's log in PostgreSQL: the fence and the insert in one statement.

An append names the run, the sequence number it expects the record to get
and the writer's lease epoch (None for a writer without a lease). One
statement moves the run row's `next_seq` on, under that row's lock, only if
the number and the fence hold, and inserts the record(s) with the epoch it
found; if the fence refused, nothing was written and `diagnose` says why.
Two writers can thus never interleave records of one run: a claim that
bumps the epoch and an append lock the same row, and whichever comes second
re-checks its condition against what the first committed.

The statements are plain SQL rather than a call of the `polyloop_append`
function (which still writes a run's first record, creating its row): the
server plans them once per connection, and they skip PL/pgSQL's per-call
setup; with the cursor kept per connection that took a
seventh to a fifth off each append (`python benchmarks/postgres.py --appends`,
docs/performance.md).

`synchronous_commit` is set for the statement's own transaction: `on` for
a durable record (committed and flushed before the statement returns),
`off` for the others (flushed with the run's next durable write, like the
JSONL store's unsynced appends). A held run's unsynced records usually
travel in the statement of its next durable one (`APPEND_MANY`): a step
is then two statements, not four (`PostgresStore._append_records`).
"""

from __future__ import annotations

from typing import Any

import psycopg

# The fence, the same in both statements: the run's row moves on only at the expected sequence
# number `$2`, and, for a writer with a lease (epoch `$3`), only while that lease is live; a writer
# without one only while nobody holds a live lease.
_FENCE = """
    WHERE run_id = $1::text AND next_seq = $2::bigint AND CASE
        WHEN $3::bigint IS NULL THEN holder IS NULL OR lease_until <= clock_timestamp()
        ELSE epoch = $3::bigint AND holder IS NOT NULL AND lease_until > clock_timestamp() END
    RETURNING epoch)"""

# One record. `$1` run, `$2` seq, `$3` epoch (NULL: no lease), `$4` kind, `$5` body, `$6` on/off.
APPEND_ONE = f"""
WITH fence AS (
    UPDATE polyloop_runs SET
        next_seq = next_seq + 1,
        status = CASE
            WHEN $4::text = 'run_finished' THEN 'finished'
            WHEN $4::text = 'resolution' AND status = 'parked' THEN 'queued'
            ELSE status END{_FENCE}
INSERT INTO polyloop_records (run_id, seq, epoch, kind, body)
SELECT $1::text, $2::bigint, fence.epoch, $4::text, $5::text::json FROM fence
WHERE set_config('synchronous_commit', $6::text, true) IS NOT NULL
"""

# Several records, seq `$2`, `$2`+1, ... in the order given: `$4` their kinds joined by commas,
# `$5` their bodies as one JSON array, `$6` on/off. (Not text[]: quoting every `"` of a body for
# an array literal cost the client more CPU than the rest of the statement.) A held run's
# unsynced records travel with its next durable one this way.
APPEND_MANY = f"""
WITH fence AS (
    UPDATE polyloop_runs SET
        next_seq = next_seq + json_array_length($5::text::json),
        status = CASE
            WHEN 'run_finished' = ANY(string_to_array($4::text, ',')) THEN 'finished'
            WHEN 'resolution' = ANY(string_to_array($4::text, ',')) AND status = 'parked' THEN 'queued'
            ELSE status END{_FENCE}
INSERT INTO polyloop_records (run_id, seq, epoch, kind, body)
SELECT $1::text, $2::bigint + b.n - 1, fence.epoch, b.kind, b.body
FROM fence, ROWS FROM (json_array_elements($5::text::json), unnest(string_to_array($4::text, ',')))
    WITH ORDINALITY AS b(body, kind, n)
WHERE set_config('synchronous_commit', $6::text, true) IS NOT NULL
"""

# A run's first record: the function also creates the run's row when nobody claimed it first.
APPEND_FIRST = "SELECT polyloop_append($1::text, 0, $2::bigint, $3::text, $4::text::json, true)"

_STATE = """
SELECT epoch, next_seq, holder, holder IS NOT NULL AND lease_until > clock_timestamp()
FROM polyloop_runs WHERE run_id = $1::text
"""


async def append(
    cur: psycopg.AsyncRawCursor[Any], run_id: str, seq: int, epoch: int | None,
    rows: list[tuple[str, str]], *, durable: bool,
) -> str:
    """Append `rows` (each a record's kind and JSON) at `seq`, `seq`+1, ...; `ok` or why the fence refused.

    The refusal is one of `missing`, `held:HOLDER`, `fenced:EPOCH`, `expired`,
    `seq:NEXT` (see `diagnose`).
    """
    sync = "on" if durable else "off"
    if seq == 0:
        assert len(rows) == 1
        (kind, body), = rows
        await cur.execute(APPEND_FIRST, (run_id, epoch, kind, body), prepare=True)
        row = await cur.fetchone()
        return row[0] if row else "missing"
    if len(rows) == 1:
        (kind, body), = rows
        await cur.execute(APPEND_ONE, (run_id, seq, epoch, kind, body, sync), prepare=True)
    else:
        kinds = ",".join(kind for kind, _ in rows)
        bodies = "[" + ",".join(body for _, body in rows) + "]"
        await cur.execute(APPEND_MANY, (run_id, seq, epoch, kinds, bodies, sync), prepare=True)
    if cur.rowcount == len(rows):
        return "ok"
    return await diagnose(cur, run_id, epoch)


async def diagnose(cur: psycopg.AsyncRawCursor[Any], run_id: str, epoch: int | None) -> str:
    """Why an append was refused, as `polyloop_append` reports it (read after the refusal)."""
    await cur.execute(_STATE, (run_id,), prepare=True)
    row = await cur.fetchone()
    if row is None:
        return "missing"
    current, next_seq, holder, live = row
    if epoch is None and live:
        return f"held:{holder}"
    if epoch is not None and current != epoch:
        return f"fenced:{current}"
    if epoch is not None and not live:
        return "expired"
    return f"seq:{next_seq}"
