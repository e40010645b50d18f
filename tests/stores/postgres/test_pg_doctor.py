"""`polyloop doctor --store postgresql://...`: the server, its durability, the schema, a probe row."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from polyloop._log.records import SCHEMA_VERSION
from polyloop.stores._pg_schema import SCHEMA_VERSION as TABLES
from support.cli import Done, polyloop_quick

ROOT = Path(__file__).resolve().parents[2]  # tests/
AGENTS = ROOT / "cli" / "agents.py"


def _polyloop(*args: str) -> Done:
    return polyloop_quick(*args)


def _checks(done: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def test_a_fresh_database_is_reported_and_nothing_is_created(pg_url, pg_conn):
    done = _polyloop("doctor", "--store", pg_url, "--json")
    assert done.returncode == 0, done
    checks = _checks(done)
    assert checks["server"]["detail"].startswith("PostgreSQL ")
    assert checks["durability"]["ok"]
    assert "no PolyLoop tables yet" in checks["schema"]["detail"]
    assert pg_conn.execute("SELECT to_regclass('polyloop_runs')").fetchone()[0] is None


def test_a_database_with_runs_gets_a_probe_row_that_is_deleted(pg_url, pg_conn):
    run = _polyloop("run", f"{AGENTS}:finishing", "--goal", "g", "--run-id", "pg-doc", "--store", pg_url)
    assert run.returncode == 0, run
    done = _polyloop("doctor", "--store", pg_url)
    assert done.returncode == 0, done
    lines = done.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["store", "server", "durability", "schema", "write", "logs"]
    assert all(line.startswith("✓") for line in lines)
    assert f"PolyLoop tables version {TABLES}" in done.stdout and f"1 log, format {SCHEMA_VERSION} (1)" in done.stdout
    assert pg_conn.execute("SELECT run_id FROM polyloop_runs").fetchall() == [("pg-doc",)]


def test_an_unreachable_server_fails_in_one_line_without_a_traceback():
    done = _polyloop("doctor", "--store", "postgresql://nobody@127.0.0.1:9/none")
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1].startswith("✗ server")
    assert "Traceback" not in done.stderr and done.stderr == ""


def test_a_user_who_may_not_write_fails_the_write_check(pg_url, pg_conn):
    run = _polyloop("run", f"{AGENTS}:finishing", "--goal", "g", "--run-id", "pg-ro", "--store", pg_url)
    assert run.returncode == 0, run
    role = f"polyloop_reader_{uuid.uuid4().hex[:8]}"
    schema = pg_conn.execute("SELECT current_schema()").fetchone()[0]
    pg_conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        pg_conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        pg_conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
        parts = urlsplit(pg_url)  # the same server and schema, as the new role (trust authentication)
        reader = urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}"))
        done = _polyloop("doctor", "--store", reader, "--json")
        assert done.returncode == 1, done
        checks = _checks(done)
        assert checks["server"]["ok"] and checks["schema"]["ok"]
        assert not checks["write"]["ok"] and "permission denied" in checks["write"]["detail"]
        assert checks["logs"]["detail"].startswith("1 log")
    finally:
        pg_conn.execute(f"DROP OWNED BY {role}")
        pg_conn.execute(f"DROP ROLE {role}")
