"""Helpers for the PostgresStore tests: reaching the server and checking a run's invariants."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode

import psycopg

from polyloop import classify, mark_resolved
from polyloop.stores import PostgresStore, submit

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def private_dir(label: str) -> Path:
    """A new directory outside pytest's temporary tree, for a throwaway server's data.

    The server runs as another user (pgserver's, when the tests run as root), and a
    concurrent pytest session resets the permissions of its own tree under /tmp.
    """
    return Path(tempfile.mkdtemp(prefix=f"polyloop-{label}-"))


def fresh_ids(prefix: str, n: int) -> list[str]:
    """`n` run ids no earlier test used: `<prefix>-<random tag>-<i>` (the database outlives a test)."""
    tag = uuid.uuid4().hex[:8]
    return [f"{prefix}-{tag}-{i}" for i in range(n)]


def with_search_path(url: str, schema: str) -> str:
    """`url` whose sessions use `schema` (other query parameters, like a socket `host`, kept)."""
    base, _, query = url.partition("?")
    params = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "options"]
    params.append(("options", f"-csearch_path={schema}"))
    return f"{base}?{urlencode(params, quote_via=quote)}"


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


AGENTS = str(Path(__file__).with_name("pg_agents.py"))


class WorkerProcess:
    """`polyloop worker --json` as a real subprocess; its events are collected with arrival times."""

    def __init__(self, url: str, effects: Path, *, lease: float, concurrency: int = 1, slow: float = 0.2,
                 steps: int = 6, extra: tuple[str, ...] = ()) -> None:
        env = {**os.environ, "PL_TEST_EFFECTS": str(effects), "PL_TEST_SLOW": str(slow), "PL_TEST_STEPS": str(steps)}
        cmd = [sys.executable, "-m", "polyloop", "worker", "--store", url, "--lease", str(lease),
               "--concurrency", str(concurrency), "--poll", "0.1", "--json", *extra]
        self._stderr_path = effects.with_name(f"worker-{time.monotonic_ns()}.stderr")
        with open(self._stderr_path, "w") as err:
            self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        self.events: list[tuple[float, dict]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append((time.monotonic(), json.loads(line)))

    def seen(self, event: str, run_id: str | None = None) -> list[tuple[float, dict]]:
        return [(t, e) for t, e in list(self.events) if e["event"] == event and (run_id is None or e["run_id"] == run_id)]

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then wait: a clean stop exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        finally:
            self.kill()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def stderr(self) -> str:
        return self._stderr_path.read_text()


def wait_for(condition, timeout: float = 60, what: str = "a condition"):
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def effects(path: Path) -> list[tuple[str, int, str, str, int]]:
    """(run_id, step, result_id, tool, pid) of every tool execution so far."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        run_id, step, result_id, tool, pid = line.split()
        out.append((run_id, int(step), result_id, tool, int(pid)))
    return out


def statuses(conn: psycopg.Connection, run_ids: list[str]) -> dict[str, str]:
    rows = conn.execute("SELECT run_id, status FROM polyloop_runs WHERE run_id = ANY(%s)", (run_ids,)).fetchall()
    return dict(rows)


async def submit_runs(url: str, target: str, run_ids: list[str]) -> None:
    async with PostgresStore(url) as store:
        for run_id in run_ids:
            await submit(store, target, goal="work", run_id=run_id)


async def settle_parked(url: str, conn: psycopg.Connection, run_ids: list[str], done: Path) -> int:
    """Settle every parked run's unknown actions from the effects file (executed iff it has a line)."""
    executed = {rid for _, _, rid, _, _ in effects(done)}
    settled = 0
    async with PostgresStore(url) as store:
        for run_id, status in statuses(conn, run_ids).items():
            if status != "parked":
                continue
            # (inspect_run would do, but it probes `holder` synchronously today.)
            for e in classify(await store.read_log(run_id), run_id=run_id).blocking:
                ran = e.result_id in executed  # an observation goes only with an executed action
                await mark_resolved(store, run_id, e.result_id, executed=ran,
                                    observation="settled by the test" if ran else None, reason="test")
                settled += 1
    return settled


def check_effects(conn: psycopg.Connection, run_ids: list[str], done: Path) -> None:
    """No `never` action ran twice; every execution has its intent in the log (none lost silently)."""
    seen = effects(done)
    by_result = Counter((r[0], r[2]) for r in seen)
    assert all(n == 1 for n in by_result.values()), f"an execution ran twice: {by_result}"
    charges = Counter((run_id, step) for run_id, step, _, tool, _ in seen if tool == "charge")
    assert all(n == 1 for n in charges.values()), f"a `never` action ran twice: {charges}"
    for run_id in run_ids:
        intents = {
            row[0] for row in conn.execute(
                "SELECT body->>'result_id' FROM polyloop_records WHERE run_id = %s AND kind = 'intent'", (run_id,)
            ).fetchall()
        }
        ran = {rid for r, _, rid, _, _ in seen if r == run_id}
        assert ran <= intents, f"{run_id}: executions without a durable intent: {ran - intents}"
