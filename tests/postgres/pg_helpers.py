"""Helpers for the PostgresStore tests: reaching the server and checking a run's invariants."""

from __future__ import annotations

import psycopg

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def reachable(url: str) -> str | None:
    """None if the server at `url` answers, else why not."""
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0]
    return None


def log_rows(conn: psycopg.Connection, run_id: str) -> list[tuple[int, int, str]]:
    """(seq, epoch, kind) of every record of the run, in sequence order."""
    return conn.execute(
        "SELECT seq, epoch, kind FROM polyloop_records WHERE run_id = %s ORDER BY seq", (run_id,)
    ).fetchall()


def check_invariants(conn: psycopg.Connection, run_id: str, *, finished: bool = True) -> list[tuple[int, int, str]]:
    """Contiguous sequence numbers, epochs never decreasing, at most (or, finished, exactly) one terminal record."""
    rows = log_rows(conn, run_id)
    assert [seq for seq, _, _ in rows] == list(range(len(rows))), f"{run_id}: sequence numbers have a gap"
    epochs = [epoch for _, epoch, _ in rows]
    assert epochs == sorted(epochs), f"{run_id}: an epoch decreased along the log: {epochs}"
    kinds = [kind for _, _, kind in rows]
    assert kinds[:1] == ["run_started"], f"{run_id}: the log does not start with run_started"
    ends = kinds.count("run_finished")
    assert ends == (1 if finished else ends) and ends <= 1, f"{run_id}: {ends} terminal records"
    if ends:
        assert kinds[-1] == "run_finished", f"{run_id}: records follow run_finished"
    return rows
