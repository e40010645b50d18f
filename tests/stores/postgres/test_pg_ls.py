"""`polyloop ls --store postgresql://...`: the same runs give the same listing as on a directory.

The same runs are made by real `polyloop run` processes on a run directory and
on a database of its own (a fresh schema), then `ls --json` of both must agree
on everything but where the runs live (`file`) and when they moved (`updated`).
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from polyloop.stores._pg_conn import describe_url
from support.cli import Done, clean_env, console_script
from support.cli import polyloop_quick as run_polyloop
from support import TESTS

AGENTS = TESTS / "cli" / "agents.py"


def polyloop(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60) -> Done:
    return run_polyloop(*args, cwd=cwd, env=clean_env(**(env or {})), timeout=timeout)


def _make_runs(where: list[str], cwd: Path, effects: Path) -> subprocess.Popen[str]:
    """One run of every kind at `where` (`--dir D` or `--store URL`); returns the live one's process."""
    def run(agent: str, run_id: str, **env: str) -> int:
        return polyloop("run", f"{AGENTS}:{agent}", "--goal", "g", "--run-id", run_id, *where, cwd=cwd, env=env).code

    assert run("finishing", "done") == 0
    effects.mkdir(exist_ok=True)
    assert run("mailer", "waits", POLYLOOP_TEST_KILL="1", POLYLOOP_TEST_EFFECTS=str(effects)) == -9
    assert run("model_down", "stopped") == 1
    assert run("finishing", "broken") == 0
    marker = cwd / f"started-{uuid.uuid4().hex[:6]}"
    live = subprocess.Popen(
        [*console_script(), "run", f"{AGENTS}:slow", "--goal", "g", "--run-id", "live", *where],
        cwd=cwd, env=clean_env(POLYLOOP_TEST_STARTED=str(marker)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True,
    )
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert live.poll() is None, live.communicate()
        assert time.monotonic() < deadline, "the slow tool never started"
        time.sleep(0.05)
    return live


def _stop(live: subprocess.Popen[str]) -> None:
    if live.poll() is None:
        live.send_signal(signal.SIGINT)
    live.communicate(timeout=30)


def _without_place_and_time(runs: list[dict]) -> dict[str, dict]:
    """The runs by id, without `file` and `updated`, and the holder (`pid N on HOST`) of an active one."""
    out = {}
    for r in runs:
        entry = {k: v for k, v in r.items() if k not in ("file", "updated")}
        entry["reason"] = re.sub(r"held by pid \d+ on ", "held by pid N on ", entry["reason"])
        out[r["run_id"]] = entry
    return out


def test_the_same_runs_list_the_same_on_a_directory_and_on_postgresql(own_db, tmp_path):
    runs = tmp_path / "runs"
    lives = []
    try:
        lives.append(_make_runs(["--dir", str(runs)], tmp_path, tmp_path / "fx-dir"))
        lives.append(_make_runs(["--store", own_db], tmp_path, tmp_path / "fx-pg"))
        # The same corruption in both: a second run_started at the end of a finished log.
        first = (runs / "broken.jsonl").read_bytes().splitlines(keepends=True)[0]
        with (runs / "broken.jsonl").open("ab") as f:
            f.write(first)
        with psycopg.connect(own_db, autocommit=True) as conn:
            conn.execute(
                "SELECT polyloop_append('broken', r.next_seq, NULL, 'run_started', "
                "(SELECT body FROM polyloop_records WHERE run_id = 'broken' AND seq = 0), true) "
                "FROM polyloop_runs r WHERE r.run_id = 'broken'"
            )
            last_at = dict(conn.execute(
                "SELECT DISTINCT ON (run_id) run_id, body->>'at' FROM polyloop_records "
                "ORDER BY run_id, seq DESC"
            ).fetchall())
        # A process killed on PostgreSQL leaves its lease until it lapses (15 s by default), but
        # its holder is a process of this machine that is gone: no longer `active`, here and now.
        with psycopg.connect(own_db, autocommit=True) as conn:
            assert conn.execute("SELECT lease_until > clock_timestamp() FROM polyloop_runs "
                                "WHERE run_id = 'waits'").fetchone() == (True,)
        on_dir = polyloop("ls", "--dir", str(runs), "--json", cwd=tmp_path)
        on_pg = polyloop("ls", "--store", own_db, "--json", cwd=tmp_path)
    finally:
        for live in lives:
            _stop(live)
    assert on_dir.code == on_pg.code == 0, (on_dir, on_pg)
    assert on_pg.stderr == ""
    listed = on_pg.json()
    assert _without_place_and_time(listed) == _without_place_and_time(on_dir.json())
    statuses = {r["run_id"]: r["status"] for r in listed}
    assert statuses == {"done": "finished", "waits": "needs_operator", "stopped": "resumable",
                        "broken": "corrupt", "live": "active"}
    where = describe_url(own_db)
    for run in listed:
        assert run["file"] == f"postgresql://{where}/{run['run_id']}"
        assert run["updated"] == last_at[run["run_id"]]
    assert [r["updated"] for r in listed] == sorted((r["updated"] for r in listed), reverse=True)


def test_status_filter_environment_and_text_on_postgresql(own_db, tmp_path):
    assert polyloop("run", f"{AGENTS}:finishing", "--goal", "g", "--run-id", "a", "--store", own_db,
                    cwd=tmp_path).code == 0
    assert polyloop("run", f"{AGENTS}:model_down", "--goal", "g", "--run-id", "b", "--store", own_db,
                    cwd=tmp_path).code == 1
    done = polyloop("ls", "--status", "resumable", "--json", cwd=tmp_path, env={"POLYLOOP_STORE": own_db})
    assert done.code == 0, done
    assert [r["run_id"] for r in done.json()] == ["b"]
    text = polyloop("ls", "--store", own_db, cwd=tmp_path)
    assert text.code == 0 and text.stderr == "", text
    lines = text.stdout.splitlines()
    assert lines[0].split()[:2] == ["RUN", "STATUS"] and len(lines) == 4
    assert lines[-1] == "2 runs: 1 finished, 1 resumable"
    none = polyloop("ls", "--store", own_db, "--status", "corrupt", cwd=tmp_path)
    assert none.code == 0 and none.stdout.startswith("no runs with status corrupt in postgresql://"), none


def test_an_empty_database_lists_nothing(own_db, tmp_path):
    done = polyloop("ls", "--store", own_db, "--json", cwd=tmp_path)
    assert (done.code, done.json()) == (0, [])


def _one_line(done: Done) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    "url",
    ["postgresql://nobody:secret@127.0.0.1:1/nothing", "postgresql://bad url"],
    ids=["unreachable", "unparsable"],
)
def test_a_bad_or_unreachable_store_is_the_error_the_other_commands_give(url, tmp_path):
    listed = polyloop("ls", "--store", url, cwd=tmp_path, timeout=30)
    inspected = polyloop("inspect", "x", "--store", url, cwd=tmp_path, timeout=30)
    assert listed.code == inspected.code == 1
    assert _one_line(listed) == _one_line(inspected)
    assert "secret" not in listed.stderr
    as_json = polyloop("ls", "--store", url, "--json", cwd=tmp_path, timeout=30)
    assert as_json.code == 1 and as_json.json()["error"]["type"] == "StoreError"


def test_dir_and_store_together_are_refused(own_db, tmp_path):
    done = polyloop("ls", "--dir", str(tmp_path), "--store", own_db, cwd=tmp_path)
    assert done.code == 2 and "not both" in _one_line(done)


def test_many_runs_are_read_in_few_queries_over_one_connection(own_db, monkeypatch):
    """130 runs (more than one chunk): one connection, and a handful of queries, not one per run."""
    import asyncio

    from polyloop import Agent, ScriptedModel, list_runs
    from polyloop.stores import PostgresStore

    async def make() -> None:
        async with PostgresStore(own_db) as store:
            agent = Agent(model=ScriptedModel([{"final": "ok"}]))
            for i in range(130):
                await agent.run("g", run_id=f"r{i:03d}", store=store)

    asyncio.run(make())
    connects = []
    queries = []
    real_connect = psycopg.AsyncConnection.connect.__func__
    real_execute = psycopg.AsyncConnection.execute

    async def connect(cls, *args, **kwargs):
        connects.append(1)
        return await real_connect(cls, *args, **kwargs)

    async def execute(self, query, *args, **kwargs):
        queries.append(query)
        return await real_execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", classmethod(connect))
    monkeypatch.setattr(psycopg.AsyncConnection, "execute", execute)
    found = list_runs(own_db)
    assert len(found) == 130 and {s.status for s in found} == {"finished"}
    assert len(connects) == 1, len(connects)
    assert len(queries) <= 10, queries


def test_a_stopped_runs_products_in_the_database_are_judged_as_inspect_judges_them(own_db, tmp_path):
    # A run that kept a product and was killed before its next step: its product is in the database,
    # so ls says what inspect says (resumable), never that the product is missing.
    products = str(TESTS / "cli" / "artifact_agents.py") + ":pipeline"
    for where in (["--dir", str(tmp_path / "runs")], ["--store", own_db]):
        killed = polyloop("run", products, "--goal", "g", "--run-id", "kept", *where, cwd=tmp_path,
                          env={"POLYLOOP_TEST_DIE_AT_CALL": "2"})
        assert killed.code == -9, killed
    on_dir = polyloop("ls", "--dir", str(tmp_path / "runs"), "--json", cwd=tmp_path)
    on_pg = polyloop("ls", "--store", own_db, "--json", cwd=tmp_path)
    shown = polyloop("inspect", "kept", "--store", own_db, "--json", cwd=tmp_path)
    assert on_dir.code == on_pg.code == shown.code == 0, (on_dir, on_pg, shown)
    [listed] = on_pg.json()
    assert "missing" not in listed["reason"], listed
    assert (listed["status"], listed["reason"]) == (shown.json()["status"], shown.json()["reason"])
    assert _without_place_and_time(on_pg.json()) == _without_place_and_time(on_dir.json())
