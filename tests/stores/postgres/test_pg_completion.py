"""Shell completion against a PostgreSQL store: run ids and what waits, from --store or $POLYLOOP_STORE."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# bash_complete lives with the CLI tests (tests/cli/watch_helpers.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cli"))

from cli_helpers import clean_env, console_script  # noqa: E402
from watch_helpers import bash_complete  # noqa: E402

AGENTS = Path(__file__).resolve().parents[2] / "cli" / "agents.py"


def _run(pg_url: str, run_id: str, agent: str, **env: str) -> int:
    argv = [*console_script(), "run", f"{AGENTS}:{agent}", "--goal", "g", "--run-id", run_id, "--store", pg_url]
    return subprocess.run(argv, env=clean_env(**env), capture_output=True, timeout=120).returncode


def test_run_ids_and_waiting_ids_come_from_the_database(pg_url, tmp_path):
    assert _run(pg_url, "pg-done", "finishing") == 0
    assert _run(pg_url, "pg-mail", "mailer", POLYLOOP_TEST_KILL="1") == -9
    assert sorted(bash_complete(tmp_path, "polyloop", "inspect", "--store", pg_url, "pg-")) == ["pg-done", "pg-mail"]
    assert bash_complete(tmp_path, "polyloop", "watch", "pg-d", env={"POLYLOOP_STORE": pg_url}) == ["pg-done"]
    words = ("polyloop", "mark-resolved", "pg-mail", "")
    assert bash_complete(tmp_path, *words, env={"POLYLOOP_STORE": pg_url}) == ["s1-a1"]


def test_a_database_without_tables_completes_nothing_and_creates_nothing(pg_url, pg_conn, tmp_path):
    assert bash_complete(tmp_path, "polyloop", "inspect", "--store", pg_url, "") == []
    assert pg_conn.execute("SELECT to_regclass('polyloop_runs')").fetchone()[0] is None
