"""Rule 35: a run's rows are numbered 0 .. n-1 without gaps, and its row's `next_seq` is n.

Real `polyloop run` processes write a run to a database of its own; the test
then deletes or renumbers rows behind the library's back, as an operator's
stray SQL or a bad restore would. `verify --store` lists the breach with the
missing sequence number, `inspect` says `corrupt`, and `resume` refuses
without appending (appending at the row's `next_seq` would make the hole
permanent).
"""

from __future__ import annotations

import json
import os

import psycopg
import pytest

from polyloop.stores import PostgresStore

from pg_helpers import AGENTS
from support.cli import Done, polyloop_quick


def polyloop(*args: str, env: dict[str, str]) -> Done:
    return polyloop_quick(*args, env=env)


@pytest.fixture
def env(tmp_path):
    keep = {k: v for k, v in os.environ.items() if not k.startswith("POLYLOOP_")}
    return {**keep, "PL_TEST_EFFECTS": str(tmp_path / "effects"), "PL_TEST_SLOW": "0", "PL_TEST_STEPS": "4"}


def rows(url: str, run_id: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT seq, kind FROM polyloop_records WHERE run_id = %s ORDER BY seq", (run_id,)
        ).fetchall()


def change(url: str, sql: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


# (how the rows are changed, a run finished before? , what the problem names)
CASES = {
    "renumbered": ("UPDATE polyloop_records SET seq = seq + 100 WHERE run_id = 'j1' AND seq >= 10",
                   "seq 10 to 109 are missing"),
    "middle-row-deleted": ("DELETE FROM polyloop_records WHERE run_id = 'j1' AND seq = 5", "seq 5 is missing"),
    "last-row-deleted": (
        "DELETE FROM polyloop_records WHERE run_id = 'j1' AND seq = "
        "(SELECT max(seq) FROM polyloop_records WHERE run_id = 'j1')",
        "is missing: the run's row counts",
    ),
    "next-seq-behind": ("UPDATE polyloop_runs SET next_seq = next_seq - 1 WHERE run_id = 'j1'",
                        "the next append would collide"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_gap_or_a_wrong_next_seq_is_corruption_that_verify_inspect_and_resume_report(own_db, env, case):
    sql, named = CASES[case]
    done = polyloop("run", f"{AGENTS}:reads", "--run-id", "j1", "--goal", "g", "--store", own_db, env=env)
    assert done.returncode == 0, done.stderr
    ok = polyloop("verify", "--store", own_db, "--json", env=env)
    assert (ok.returncode, json.loads(ok.stdout)["summary"]["corrupt"]) == (0, 0)
    change(own_db, sql)
    before = rows(own_db, "j1")

    verify = polyloop("verify", "--store", own_db, "--json", env=env)
    assert verify.returncode == 1, verify.stdout
    [verdict] = json.loads(verify.stdout)["files"]
    assert verdict["status"] == "corrupt"
    assert any(named in p["message"] for p in verdict["problems"]), verdict["problems"]

    inspect = polyloop("inspect", "j1", "--store", own_db, "--json", env=env)
    report = json.loads(inspect.stdout)
    assert report["status"] == "corrupt", report
    assert any(named in p for p in report["problems"]), report["problems"]

    resume = polyloop("resume", "j1", "--store", own_db, env=env)
    assert resume.returncode == 1 and "corrupt" in resume.stderr, resume.stderr
    assert resume.stderr.count("\n") == 1, resume.stderr
    assert rows(own_db, "j1") == before, "resume appended to a log with a hole"


async def test_the_problem_carries_rule_35_and_the_batched_read_sees_it_too(own_db, env, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    done = polyloop("run", f"{AGENTS}:reads", "--run-id", "j1", "--goal", "g", "--store", own_db, env=env)
    assert done.returncode == 0, done.stderr
    change(own_db, CASES["middle-row-deleted"][0])
    async with PostgresStore(own_db) as store:
        parsed = await store.read_parsed("j1")
        [problem] = parsed.problems
        # Positions, as everywhere a PostgreSQL log is reported: record 6 is seq 6 now.
        assert (problem.rule, problem.line, problem.index) == (35, 6, 5)
        assert problem.message.startswith("seq 5 is missing: the record at seq 4 is followed by seq 6")
        many = await store.read_parsed_many(["j1"])
        assert [(p.rule, p.message) for p in many["j1"].problems] == [(35, problem.message)]
