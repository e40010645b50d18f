"""`polyloop ls --since/--limit/--target` and the cause of a run that ended (`--batch` is tested with a real
batch in tests/batch/test_batch_cancel.py)."""

from __future__ import annotations

import re

import pytest
from cli_helpers import Cli, logs_digest, target


@pytest.fixture
def runs(cli: Cli) -> Cli:
    """`old` (finished in 2020), `new` (finished now), `broken` (ended: its model call failed)."""
    for run_id, agent in (("old", "finishing"), ("new", "finishing"), ("broken", "model_error")):
        cli("run", target(agent), "--run-id", run_id, "--goal", "g")
    log = cli.log("old")
    log.write_text(re.sub(r'"at":"\d{4}-[^"]*"', '"at":"2020-01-01T00:00:00.000000Z"', log.read_text()))
    return cli


def ls(cli: Cli, *args: str) -> list[dict]:
    done = cli("ls", "--dir", str(cli.runs), "--json", *args)
    assert done.code == 0, done
    return done.json()


def test_since_keeps_the_runs_active_within_the_duration(runs: Cli) -> None:
    assert sorted(r["run_id"] for r in ls(runs, "--since", "1h")) == ["broken", "new"]
    assert sorted(r["run_id"] for r in ls(runs, "--since", "10000d")) == ["broken", "new", "old"]
    assert sorted(r["run_id"] for r in ls(runs, "--since", "1h30m", "--status", "finished")) == ["broken", "new"]


def test_limit_keeps_the_most_recent(runs: Cli) -> None:
    assert [r["run_id"] for r in ls(runs, "--limit", "1")] == ["broken"]
    assert ls(runs, "--limit", "0") == []


def test_target_matches_as_recorded_by_path_suffix_or_pattern(runs: Cli) -> None:
    recorded = ls(runs)[0]["target"]
    assert recorded.endswith("cli/agents.py:model_error")
    assert [r["run_id"] for r in ls(runs, "--target", recorded)] == ["broken"]
    assert [r["run_id"] for r in ls(runs, "--target", "agents.py:model_error")] == ["broken"]
    assert sorted(r["run_id"] for r in ls(runs, "--target", "*:finishing")) == ["new", "old"]
    assert ls(runs, "--target", "agents.py:nothing") == []


def test_a_run_that_ended_in_an_error_shows_the_providers_error(runs: Cli) -> None:
    broken = next(r for r in ls(runs) if r["run_id"] == "broken")
    assert broken["reason"] == "error"
    assert "ConnectionError: model server unreachable" in broken["cause"]
    shown = runs("ls", "--dir", str(runs.runs))
    assert "error: the model call of step 1 failed 1 times; the last: ConnectionError" in shown.stdout
    assert next(r for r in ls(runs) if r["run_id"] == "new")["cause"] is None


@pytest.mark.parametrize(("args", "message"), [(["--since", "yesterday"], "is not a duration"),
                                               (["--limit", "-1"], "greater than or equal to 0"),
                                               (["--since", "99999999999999999999d"], "too long a duration"),
                                               (["--batch", "none"], "no batch 'none'")])
def test_bad_filters_exit_2(runs: Cli, args: list[str], message: str) -> None:
    before = logs_digest(runs.runs)
    done = runs("ls", "--dir", str(runs.runs), *args)
    assert done.code == 2 and message in done.stderr, done
    assert logs_digest(runs.runs) == before
