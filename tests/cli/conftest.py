"""Fixtures of the CLI tests (helpers live in cli_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import Cli, Done, target


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(cwd=tmp_path, runs=tmp_path / "runs")


@pytest.fixture
def crashed_mailer(cli: Cli, tmp_path: Path) -> Callable[[str], Done]:
    """Start the mailer agent and SIGKILL it right after its `never` side effect."""

    def crash(run_id: str) -> Done:
        done = cli(
            "run", target("mailer"), "--goal", "mail ops", "--run-id", run_id,
            env={"POLYLOOP_TEST_KILL": "1", "POLYLOOP_TEST_EFFECTS": str(tmp_path / "effects")},
        )
        assert done.code == -9, done
        return done

    return crash
