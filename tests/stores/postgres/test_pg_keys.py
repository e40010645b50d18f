"""Rule 36 in PostgreSQL: a forged idempotency key in a run's rows is corruption.

A real `polyloop run` writes a run to a database of its own; the test then
cuts it back to a crash inside step 2 (its `safe` action unknown, so resume
would replay it) and forges that action's key behind the library's back.
`verify --store` names the rule, `inspect` says `corrupt`, and `resume`
refuses without running the tool or appending.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg
import pytest

from pg_helpers import AGENTS
from support.cli import Done, polyloop_quick

FORGED = "pl-" + "0" * 32


def polyloop(*args: str, env: dict[str, str]) -> Done:
    return polyloop_quick(*args, env=env)


@pytest.fixture
def env(tmp_path):
    keep = {k: v for k, v in os.environ.items() if not k.startswith("POLYLOOP_")}
    return {**keep, "PL_TEST_EFFECTS": str(tmp_path / "effects"), "PL_TEST_SLOW": "0", "PL_TEST_STEPS": "3"}


def crash_in_step_2_with_a_forged_key(url: str) -> None:
    """Keep the rows up to the intent of s2-a1 (a `safe` look) and give it a forged key."""
    with psycopg.connect(url, autocommit=True) as conn:
        [(seq,)] = conn.execute(
            "SELECT seq FROM polyloop_records WHERE run_id = 'k1' AND kind = 'intent' "
            "AND body->>'result_id' = 's2-a1'").fetchall()
        conn.execute("DELETE FROM polyloop_records WHERE run_id = 'k1' AND seq > %s", (seq,))
        conn.execute("UPDATE polyloop_runs SET next_seq = %s WHERE run_id = 'k1'", (seq + 1,))
        conn.execute("UPDATE polyloop_records SET body = jsonb_set(body::jsonb, '{idempotency_key}', %s)::json "
                     "WHERE run_id = 'k1' AND seq = %s", (json.dumps(FORGED), seq))


def test_a_forged_key_is_corruption_that_verify_inspect_and_resume_report(own_db, env, tmp_path):
    done = polyloop("run", f"{AGENTS}:reads", "--run-id", "k1", "--goal", "g", "--store", own_db, env=env)
    assert done.returncode == 0, done.stderr
    crash_in_step_2_with_a_forged_key(own_db)
    effects = Path(tmp_path / "effects").read_text()

    verify = polyloop("verify", "--store", own_db, "--json", env=env)
    assert verify.returncode == 1, verify.stdout
    [verdict] = json.loads(verify.stdout)["files"]
    assert verdict["status"] == "corrupt"
    assert [p["rule"] for p in verdict["problems"]] == [36], verdict["problems"]
    assert "s2-a1 carries idempotency key" in verdict["problems"][0]["message"]
    text = polyloop("verify", "--store", own_db, env=env)
    assert text.returncode == 1 and "(rule 36)" in text.stdout, text.stdout

    inspect = polyloop("inspect", "k1", "--store", own_db, "--json", env=env)
    assert json.loads(inspect.stdout)["status"] == "corrupt", inspect.stdout

    resume = polyloop("resume", "k1", "--store", own_db, env=env)
    assert resume.returncode == 1 and "rule 36" in resume.stderr, resume.stderr
    assert resume.stderr.count("\n") == 1, resume.stderr
    assert Path(tmp_path / "effects").read_text() == effects, "resume replayed an action with a forged key"
