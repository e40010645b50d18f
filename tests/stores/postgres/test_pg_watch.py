"""`polyloop watch --store postgresql://...`: a live run followed by row position, in a pipe and a terminal."""

from __future__ import annotations

import sys
from pathlib import Path

# The watch helpers (a gated run, a watcher in a pipe or a pseudo-terminal) live with the CLI tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cli"))

from cli_helpers import console_script  # noqa: E402
from watch_helpers import Lines, Screen, ended, open_gate, polyloop, start_gated, terminal_env  # noqa: E402


def test_a_pipe_follows_a_postgresql_run_row_by_row(pg_url, tmp_path):
    gate = tmp_path / "gate"
    where = ["--store", pg_url]
    watch = polyloop("watch", "pg-gated", "--wait", *where, cwd=tmp_path)
    lines = Lines(watch.stdout)
    with ended(watch, lines):
        lines.until("waiting for the run to start")
        with ended(start_gated("pg-gated", where, gate, tmp_path)) as run:
            lines.until("started")
            for step in (1, 2, 3):
                assert "in flight [safe]" in lines.until(f"s{step}-a1 gated")
                assert run.poll() is None  # seen while the run waits at its gate
                open_gate(gate, step)
                assert f"'gate {step} opened'" in lines.until("completed")
            lines.until("finished")
            assert run.wait(timeout=60) == 0
        assert "run pg-gated finished: final_answer" in lines.until("run pg-gated")
        assert watch.wait(timeout=60) == 0, watch.stderr.read()
    assert "held by" in "\n".join(lines.seen)


def test_a_terminal_follows_a_postgresql_run(pg_url, tmp_path):
    gate = tmp_path / "gate"
    where = ["--store", pg_url]
    with ended(start_gated("pg-live", where, gate, tmp_path)) as run:
        screen = Screen([*console_script(), "watch", "pg-live", "--wait", *where], tmp_path, terminal_env())
        screen.until("s1-a1 gated")
        assert run.poll() is None
        for step in (1, 2, 3):
            open_gate(gate, step)
        assert screen.wait() == 0
        assert run.wait(timeout=60) == 0
    assert "run pg-live finished: final_answer" in screen.plain
    assert "\x1b[1A" in screen.text  # redrawn in place


def test_an_unknown_postgresql_run_is_refused_with_2(pg_url, tmp_path):
    with ended(polyloop("watch", "nobody", "--store", pg_url, cwd=tmp_path)) as watch:
        assert watch.wait(timeout=60) == 2
        assert "no run 'nobody'" in watch.stderr.read()
