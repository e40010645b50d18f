"""`polyloop submit --json` and `worker --json` on a real PostgreSQL server: one document each, with `schema`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from pg_helpers import AGENTS

POLYLOOP = [sys.executable, "-m", "polyloop"]


def test_submit_and_worker_print_documents_with_schema(pg_url, tmp_path):
    env = {**os.environ, "PL_TEST_EFFECTS": str(tmp_path / "effects"), "PL_TEST_SLOW": "0", "PL_TEST_STEPS": "1"}
    run_id = f"json-{uuid.uuid4().hex[:8]}"
    out = subprocess.run([*POLYLOOP, "submit", f"{AGENTS}:reads", "--goal", "g", "--run-id", run_id,
                          "--store", pg_url, "--json"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"schema": 1, "command": "submit", "run_id": run_id, "status": "queued",
                                      "exit_code": 0, "error": None}
    again = subprocess.run([*POLYLOOP, "submit", f"{AGENTS}:reads", "--run-id", run_id, "--store", pg_url, "--json"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 2 and json.loads(again.stdout)["error"]["exit_code"] == 2, again
    worked = subprocess.run([*POLYLOOP, "worker", "--until-idle", "--store", pg_url, "--json"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert worked.returncode == 0, worked.stderr
    lines = [json.loads(line) for line in worked.stdout.splitlines()]
    assert lines and all(line["schema"] == 1 for line in lines)
    assert any(line["run_id"] == run_id for line in lines)
