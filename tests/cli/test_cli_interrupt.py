"""Ctrl-C (SIGINT) exits 130 and leaves the run resumable; a live run is `active`."""

from __future__ import annotations

import signal

from cli_helpers import (
    Done,
    one_line_error,
    start_slow,
)


def test_sigint_exits_130_and_the_run_stays_resumable(cli, tmp_path):
    proc = start_slow(cli, "slow", tmp_path / "started")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, (stdout, stderr)
    assert "run slow" in stdout
    line = one_line_error(Done(proc.returncode, stdout, stderr))
    assert "interrupted" in line and f"polyloop resume slow --dir {cli.runs}" in line
    kinds = [r["record"] for r in cli.records("slow")]
    assert "run_finished" not in kinds
    doc = cli("inspect", "slow", "--json").json()
    assert doc["status"] == "resumable"
    assert [e["state"] for e in doc["executions"] if e["kind"] == "action"] == ["unknown"]
    assert doc["next"].startswith("replay the safe action slow_lookup")


def test_a_live_run_is_active_and_cannot_be_resumed_or_resolved(cli, tmp_path):
    proc = start_slow(cli, "live", tmp_path / "started")
    try:
        doc = cli("inspect", "live", "--json").json()
        assert doc["status"] == "active"
        assert doc["holder"]
        assert "active" in cli("inspect", "live").stdout
        done = cli("resume", "live")
        assert done.code == 2
        assert "is active" in one_line_error(done)
        done = cli("mark-resolved", "live", "s1-a1", "--executed", "--reason", "checked")
        assert done.code == 2
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 130

